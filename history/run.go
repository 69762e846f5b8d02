package history

// Run events (process NemesisProcess, f "run") are what the harness records
// about the run itself, so that a stored history alone says what the run set
// out to do and how far it got: a re-check of a stored run (`fencecheck
// report`) then reaches the same verdict as the run did, and a history cut
// short by a killed harness is seen to be incomplete.
//
// Every run event carries extra.action:
//
//   - "start" (time 0, the first event): extra.requested is the nemesis list
//     as asked for ("all", "pause,restart", "none"); extra.nemeses the
//     nemeses that will act; extra.not_applicable maps each requested one
//     that cannot act on the target to why; extra.profiles each writer's
//     workload profile, in writer order; extra.nodes the target's nodes
//     (RunNode: role, whether they keep state, whether their clock can be
//     moved and their links cut), from which the analysis tells which
//     failure situations the target can have at all (coverage).
//   - "phase": extra.phase names the phase that begins now: "preflight"
//     (a spec target's contract checks, recorded as client operations),
//     "main", "final" (heal, recovery, final reads).
//   - "problem": something went wrong that did not stop the run;
//     extra.error says what (extra.phase where it happened), e.g. a
//     recovery that timed out.
//   - "end" (the last event of a run that finished its final phase):
//     extra.complete is true when heal, recovery and final reads all
//     succeeded, extra.cut_short true when the run was interrupted (signal)
//     and ended early; extra.waited (when any) maps a nemesis to how often
//     it found every node it could act on held by another fault.
//
// Histories without run events (version 1 files, histories from other
// tools) are judged on their operations alone.
const RunEvent = "run"

// Actions of run events.
const (
	RunStart   = "start"
	RunPhase   = "phase"
	RunProblem = "problem"
	RunEnd     = "end"
)

// Keys of run events' extra, as documented above.
const (
	RunExtraAction        = ExtraAction
	RunExtraRequested     = "requested"
	RunExtraNemeses       = "nemeses"
	RunExtraNotApplicable = "not_applicable"
	RunExtraPhase         = "phase"
	RunExtraError         = ExtraError
	RunExtraComplete      = "complete"
	RunExtraCutShort      = "cut_short"
	RunExtraWaited        = "waited"
	RunExtraProfiles      = "profiles"
	RunExtraNodes         = "nodes"
)

// RunNode is one node of the target, as the run start event lists it.
type RunNode struct {
	Name string `json:"name"`
	// Role labels the node ("reference", "etcd", "adapter",
	// "issuer+resource", "resource", ...).
	Role string `json:"role,omitempty"`
	// Stateless: it keeps no state of its own (an adapter in front of a
	// store), so restarting it or cutting it off loses no counter or mark.
	Stateless bool `json:"stateless,omitempty"`
	// Clock: the clock nemesis can move its wall clock. Partition: a
	// partition can cut it off from the other nodes.
	Clock     bool `json:"clock,omitempty"`
	Partition bool `json:"partition,omitempty"`
	// OneWay: a partition can also cut it one way (the connections it
	// opens to a node dropped while that node's to it carry on).
	OneWay bool `json:"one_way,omitempty"`
}

// Phases named by phase events.
const (
	// PhasePreflight: the contract preflight of a spec target, its
	// requests recorded as client operations (judged like the others).
	PhasePreflight = "preflight"
	PhaseMain      = "main"
	PhaseFinal     = "final"
)

// IsRun reports whether e is a run event.
func (e *Event) IsRun() bool { return e.Process == NemesisProcess && e.F == RunEvent }
