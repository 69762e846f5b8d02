package nemesis

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// Env is what a nemesis may act on.
type Env struct {
	// Target is the system under test: its nodes. What they can suffer is
	// the capability interfaces the target also implements (Pauser,
	// Restarter, Partitioner, ClockSkewer, Leaderer), found by type
	// assertion, so a target offers only what it can really do.
	Target Cluster
	// Holders are the workload's lock holders, one of which can be frozen
	// past its lease (the client pause); nil when none can.
	Holders HolderPauser
	// ClientClock is the clients' wall clock, by which they judge their
	// leases; the clock nemesis steps it with a node's. Nil when it cannot
	// be stepped.
	ClientClock ClockSkewer
	// Links are the harness's proxies between clients and nodes (and between
	// nodes, where a target routes through them); nil when none.
	Links LinkSet
	// Acks is the run's feed of acknowledgements (history.Acks), by which
	// crash-on-ack times its crashes; nil when none.
	Acks AckWaiter
	// Coverage, when set, is the run's live coverage: how many times each
	// failure situation that applies so far was created, by id (the
	// analysis's count, which this package does not import). The guided
	// schedule aims its faults by it.
	Coverage func() map[string]int
	// TTL is the lease time clients ask for; pauses are sized from it.
	TTL time.Duration
	Log io.Writer
	// claims keeps two faults that take nodes over off one node (set by
	// the scheduler; nil lets a nemesis used on its own take any node).
	claims *claims
	// guided: the scheduler conducts the faults on nodes (Scheduler.Guide).
	guided bool
}

// Fault is one injected fault, live until Stop.
type Fault struct {
	// Nodes the fault acts on (for the history and the report).
	Nodes []string
	// Details are recorded with the start event (offsets, modes, groups...).
	Details map[string]any
	// Stop undoes the fault. It must be safe to call after Heal.
	Stop func(ctx context.Context) error
	// StopDetails are recorded with the stop event, as Details are with the
	// start: what only undoing the fault learns (a re-added member's new
	// id). Stop may fill them in.
	StopDetails map[string]any
	// Made, when set, is closed once the fault has made the situation it
	// was aimed at (a frozen write overtaken by a newer one): a guided
	// fault whose drawn length ran out before is held on until then, for
	// at most HoldFor more (the schedule records the length it had).
	Made    <-chan struct{}
	HoldFor time.Duration
}

// Nemesis is one kind of fault. Choosing a fault and injecting it are two
// steps: Draw (Planner) turns the seed into a Plan, Start carries a plan
// out, whether drawn in this run or read back from a schedule file.
type Nemesis interface {
	Name() string
	// Applicable says whether the nemesis can act on env, and why not.
	Applicable(env *Env) (ok bool, why string)
	Planner
	// Start injects the fault p describes. Every choice is in p: Start
	// draws nothing, so a replayed plan does what the drawn one did.
	Start(ctx context.Context, env *Env, p Plan) (*Fault, error)
}

// Healer is a nemesis that can undo every fault of its kind at once (the
// final heal), beyond stopping its current fault.
type Healer interface {
	Heal(ctx context.Context, env *Env) error
}

// OptIn marks a nemesis that "all" leaves out because it breaks even a
// correct system (restart-wipe destroys the data a durable system relies on).
type OptIn interface{ OptInOnly() bool }

// Timing shapes a nemesis's schedule: quiet periods and fault periods, each
// drawn uniformly from [min, max].
type Timing struct {
	QuietMin, QuietMax time.Duration
	FaultMin, FaultMax time.Duration
}

// Timed is a nemesis that wants its own timing (e.g. pause must outlast the
// lease).
type Timed interface {
	Timing(env *Env) Timing
}

// DefaultTiming suits runs of tens of seconds.
var DefaultTiming = Timing{QuietMin: 1 * time.Second, QuietMax: 3 * time.Second, FaultMin: 1 * time.Second, FaultMax: 3 * time.Second}

// LinkActor is a nemesis that acts on the traffic between clients and
// nodes, through the harness's proxies (Env.Links). The harness interposes
// the proxies only when such a nemesis may run: a proxy hop is not free, and
// it is not the system under test.
type LinkActor interface{ ActsOnLinks() bool }

// Effect is what a fault does to the system under test, in the words of the
// analysis's cause rule (analysis/cause.go), which says by effect which
// faults can explain which anomaly: a nemesis that declares its effects
// (Effector) is found by the rule with no change there.
type Effect string

const (
	// LosesState: a node may come back with less than it had (a kill, a
	// power loss): a counter or a high-water mark not made durable is gone.
	LosesState Effect = "loses-state"
	// Separates: nodes, or clients and nodes, cannot reach each other;
	// replicas decide apart.
	Separates Effect = "separates"
	// SkewsClocks: a node's wall clock jumps or strobes.
	SkewsClocks Effect = "skews-clocks"
	// Delays: a request arrives late (a holder stalled past its lease, a
	// write held in flight).
	Delays Effect = "delays"
	// Tampers: requests are changed on their way (the token header
	// stripped or garbled).
	Tampers Effect = "tampers"
	// LosesUnsynced: beside LosesState, a node may come back without what
	// it wrote but had not fsynced (a power loss): it can explain all a
	// kill can, and more, so the cause rule names it first.
	LosesUnsynced Effect = "loses-unsynced"
	// FailsWrites: the node's writes fail (ENOSPC) while the fault lasts. A
	// correct store answers them as errors; one that takes a failed write
	// for done forgets what it acknowledged, as if it had lost state, so
	// the cause rule names it after the faults that do lose state.
	FailsWrites Effect = "fails-writes"
	// LosesDurable: beside LosesState, a node may come back without even
	// what it made durable (its data wiped): it explains more again.
	LosesDurable Effect = "loses-durable"
)

// Effector is a nemesis that says what its faults do. A nemesis without it
// is named for an anomaly only as the last fault event before it.
type Effector interface{ Effects() []Effect }

// table is every nemesis: adding one is its file and one line here. Each
// call of a constructor gives a fresh nemesis (some keep per-run state).
// Everything else reads it: the names --nemesis takes and its help, "all",
// the proxies and the disk layer a run needs, and the cause rule's effects.
var table = []func() Nemesis{
	func() Nemesis { return &pause{} },
	func() Nemesis { return restart{} },
	func() Nemesis { return restart{wipe: true} },
	func() Nemesis { return &memberReplace{} },
	func() Nemesis { return powerLoss{} },
	func() Nemesis { return clock{} },
	func() Nemesis { return &partition{} },
	func() Nemesis { return linkLoss{} },
	func() Nemesis { return linkDelay{} },
	func() Nemesis { return linkDup{} },
	func() Nemesis { return strip{} },
	func() Nemesis { return delay{} },
	func() Nemesis { return crashOnAck{} },
	func() Nemesis { return disk{kind: DiskSlowName} },
	func() Nemesis { return disk{kind: DiskFullName} },
	func() Nemesis { return disk{kind: DiskCorrupt} },
}

// registry is the table by name.
var (
	registryMu sync.RWMutex
	registry   = func() map[string]func() Nemesis {
		m := map[string]func() Nemesis{}
		for _, mk := range table {
			m[mk().Name()] = mk
		}
		return m
	}()
)

// Register adds a nemesis to the table, as a line of it would: for a nemesis
// defined outside this package (a test's, or one of a project that gates its
// own system through gate.Run). Call it before any run starts, e.g. from an
// init function. A name already taken panics: two nemeses cannot share one.
func Register(mk func() Nemesis) {
	registryMu.Lock()
	defer registryMu.Unlock()
	name := mk().Name()
	if _, ok := registry[name]; ok {
		panic(fmt.Sprintf("nemesis %q is registered twice", name))
	}
	table = append(table, mk)
	registry[name] = mk
}

// lookup makes a fresh nemesis of the name.
func lookup(name string) (Nemesis, bool) {
	registryMu.RLock()
	mk, ok := registry[name]
	registryMu.RUnlock()
	if !ok {
		return nil, false
	}
	return mk(), true
}

// Names lists the nemeses, sorted.
func Names() []string {
	registryMu.RLock()
	defer registryMu.RUnlock()
	var out []string
	for n := range registry {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// OptInNames lists the nemeses that "all" leaves out, sorted.
func OptInNames() []string {
	var out []string
	for _, n := range Names() {
		if optIn(n) {
			out = append(out, n)
		}
	}
	return out
}

func optIn(name string) bool {
	nem, _ := lookup(name)
	o, ok := nem.(OptIn)
	return ok && o.OptInOnly()
}

// HasEffect reports whether the nemesis of the name declares e (Effector);
// false for a name no nemesis has (another tool's events).
func HasEffect(name string, e Effect) bool {
	nem, ok := lookup(name)
	if !ok {
		return false
	}
	ef, ok := nem.(Effector)
	return ok && slices.Contains(ef.Effects(), e)
}

// expand turns "all" into every nemesis that is not opt-in.
func expand(names []string) []string {
	if len(names) != 1 || names[0] != "all" {
		return names
	}
	var out []string
	for _, n := range Names() {
		if !optIn(n) {
			out = append(out, n)
		}
	}
	return out
}

// NeedLinks reports whether any of the named nemeses (as Parse returns them,
// "all" included) acts on links, so the harness must interpose proxies.
func NeedLinks(names []string) bool {
	for _, n := range expand(names) {
		nem, _ := lookup(n)
		if la, ok := nem.(LinkActor); ok && la.ActsOnLinks() {
			return true
		}
	}
	return false
}

// NeedDiskLayer reports whether any of the named nemeses (as Parse returns
// them) needs the targets' data on the lazyfs layer ("all" does: power-loss
// is in it; a target that cannot mount the layer says power-loss does not
// apply, and "all" goes on without it).
func NeedDiskLayer(names []string) bool {
	for _, n := range expand(names) {
		nem, _ := lookup(n)
		if dl, ok := nem.(DiskLayered); ok && dl.NeedsDiskLayer() {
			return true
		}
	}
	return false
}

// Parse turns "pause,restart" (or "all", or "none"/"") into nemeses. "all"
// means every registered nemesis that is applicable to env, chosen later by
// Select.
func Parse(spec string) ([]string, error) {
	spec = strings.TrimSpace(spec)
	if spec == "" || spec == "none" {
		return nil, nil
	}
	if spec == "all" {
		return []string{"all"}, nil
	}
	var out []string
	seen := map[string]bool{}
	for _, n := range strings.Split(spec, ",") {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		if _, ok := lookup(n); !ok {
			return nil, fmt.Errorf("unknown nemesis %q (known: %s, all, none)", n, strings.Join(Names(), ", "))
		}
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	return out, nil
}

// Selection is the outcome of matching requested nemeses to a target.
type Selection struct {
	Active []Nemesis
	// NotApplicable maps a requested nemesis to why it cannot act here.
	NotApplicable map[string]string
}

// Select instantiates the named nemeses (expanding "all") and sorts out those
// that do not apply to env. An explicitly named nemesis that does not apply
// is listed in NotApplicable; under "all" it is silently left out but still
// listed, so reports say what was not exercised.
func Select(names []string, env *Env) Selection {
	sel := Selection{NotApplicable: map[string]string{}}
	for _, n := range expand(names) {
		nem, _ := lookup(n)
		if ok, why := nem.Applicable(env); !ok {
			sel.NotApplicable[n] = why
			continue
		}
		sel.Active = append(sel.Active, nem)
	}
	return sel
}
