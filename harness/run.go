package harness

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/fencecheck/fencecheck/durable"
	"github.com/fencecheck/fencecheck/history"
	"github.com/fencecheck/fencecheck/nemesis"
	"github.com/fencecheck/fencecheck/reports"
	"github.com/fencecheck/fencecheck/workloads"
)

// ErrCannotRun wraps every failure that kept the run from being carried out
// (target did not start, store not writable): exit code 3.
var ErrCannotRun = errors.New("the run could not be carried out")

// ErrAborted is the error of a run ended at once (Config.Abort closed): the
// target was torn down, no verdict was reached and no report written. It
// wraps ErrCannotRun (exit code 3).
var ErrAborted = fmt.Errorf("%w: aborted (interrupted again): torn down at once, without the rest of the final phase, the check or the report", ErrCannotRun)

// UntilAbort is a context that ignores ctx's end (the final phase and the
// check run after a main phase cut short) but ends when abort is closed.
func UntilAbort(ctx context.Context, abort <-chan struct{}) (context.Context, context.CancelFunc) {
	c, cancel := context.WithCancel(context.WithoutCancel(ctx))
	if abort != nil {
		go func() {
			select {
			case <-abort:
				cancel()
			case <-c.Done():
			}
		}()
	}
	return c, cancel
}

// Aborted reports whether abort is closed (never, for nil).
func Aborted(abort <-chan struct{}) bool {
	select {
	case <-abort:
		return true
	default:
		return false
	}
}

// Run is one finished run.
type Run struct {
	Config Config
	// Command is the command line that repeats the run (Config.Command).
	Command []string
	// Dir is the run's store folder.
	Dir string
	// RunID labels everything the run creates (NewRunID); `fencecheck
	// clean --run` takes it.
	RunID string
	// Namespace scopes every name the run sends: Config.Namespace, or one
	// derived from RunID (namespaceOf).
	Namespace string
	// HistoryPath is Dir/history.jsonl.
	HistoryPath string
	Start, End  time.Time
	// Nemeses lists the nemeses that acted, with how often; NotApplicable
	// those requested that could not act on this target, with why.
	Nemeses       map[string]*nemesis.Count
	NotApplicable map[string]string
	// Endpoints the clients used.
	Endpoints Endpoints
	// System is the system the target ran, release and size (Systemer);
	// "" when the target does not say.
	System string
	// ContractDeviations are the preflight's deviations from Fencing API v1
	// that cannot let a bad token through: the run went on past them.
	ContractDeviations []string
	// RunErrors are problems during the run that did not stop it (heal
	// failed, recovery timed out), each also a problem event in the history;
	// reported beside the verdict.
	RunErrors []string
	// Schedule is the faults the run carried out, as written to
	// schedule.json (nemesis.ScheduleFile).
	Schedule *nemesis.Schedule
	// Complete is false when heal, recovery or the final reads failed;
	// CutShort is true when the caller's context ended the main phase early
	// (a signal). Both are in the history's end event.
	Complete, CutShort bool
}

// Execute carries out one run against target: setup, main phase (workload and
// nemeses), heal, recovery, final reads, teardown. It returns once the
// history is complete on disk; checking and reporting follow (Finish). The
// history records the run itself too (history/run.go): what it set out to
// do, its phases, its problems and how far it got.
//
// A run that ends before its history began leaves no empty folder in the
// store (tidyUnstarted): a refused one (a schedule that does not fit the
// target: a usage error) none at all; one that could not be carried out
// (its target did not start, an interrupt during setup) its folder only when
// it holds the target's logs, with error.txt saying why. STORE/latest points
// at a run once its history began.
func Execute(ctx context.Context, cfg Config, target Target) (*Run, error) {
	n, err := cfg.Normalize()
	if err != nil {
		return nil, err
	}
	return n.Execute(ctx, target)
}

// Execute is harness.Execute for a config normalised already (gate.Run's).
func (n Normalized) Execute(ctx context.Context, target Target) (*Run, error) {
	run, err := n.execute(ctx, target)
	if err != nil && run != nil && run.Dir != "" {
		if st, serr := os.Stat(run.HistoryPath); serr != nil || st.Size() == 0 {
			if tidyUnstarted(run.Dir, err, errors.Is(err, ErrCannotRun)) {
				run.Dir, run.HistoryPath = "", ""
			} else {
				err = fmt.Errorf("%w (the target's logs are kept in %s)", err, run.Dir)
			}
		}
	}
	return run, err
}

func (n Normalized) execute(ctx context.Context, target Target) (*Run, error) {
	cfg, replay, nemNames := n.Config, n.Replay, n.Nemeses
	if cfg.Abort != nil {
		// An abort ends setup and the main phase as the caller's end does.
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		go func() {
			select {
			case <-cfg.Abort:
				cancel()
			case <-ctx.Done():
			}
		}()
	}
	// Outside the main phase the log goes through the phase's status line
	// (status.go), which shows the step a long wait is at.
	logs := orDiscard(cfg.Log)
	logTo := logs
	logf := func(format string, args ...any) { fmt.Fprintf(logTo, format+"\n", args...) }
	run := &Run{Config: cfg, Command: cfg.Command(), Start: time.Now()}
	logf("fencecheck: seed %d; reproduce with: %s", cfg.Seed, ShellLine(run.Command))
	dir, err := reports.NewRunDir(cfg.Store, target.Name(), run.Start)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCannotRun, err)
	}
	run.Dir = dir
	run.HistoryPath = filepath.Join(dir, "history.jsonl")
	run.RunID = NewRunID(target.Name(), dir)
	run.Namespace = cfg.Namespace
	if run.Namespace == "" {
		run.Namespace = namespaceOf(run.RunID)
	}
	if err := writeJSON(filepath.Join(dir, "config.json"), storedConfig(run, target)); err != nil {
		return run, fmt.Errorf("%w: %v", ErrCannotRun, err)
	}
	logf("setup: starting target %s (run folder %s, run id %s, namespace %s)", target.Name(), dir, run.RunID, run.Namespace)
	setup := StartStatus(cfg.Progress, "setup")
	logTo = setup.Log(logs)
	env := Env{RunID: run.RunID, Dir: dir, Namespace: run.Namespace, Log: logTo, DiskLayer: nemesis.NeedDiskLayer(nemNames)}
	eps, err := target.Start(setup.Context(ctx), env)
	setup.End()
	logTo = logs
	// Stop always runs: a target that half-started must still clean up.
	defer func() {
		logf("teardown: stopping target")
		if err := target.Stop(context.WithoutCancel(ctx)); err != nil {
			logf("teardown: %v", err)
		}
	}()
	if err != nil && ctx.Err() != nil {
		return run, fmt.Errorf("%w: interrupted during setup (target %s was starting; torn down, nothing to check)", ErrCannotRun, target.Name())
	}
	if err != nil {
		return run, fmt.Errorf("%w: target %s did not start: %v", ErrCannotRun, target.Name(), err)
	}
	run.Endpoints = eps
	if st, ok := target.(Systemer); ok {
		if sys, err := st.System(ctx); err != nil {
			logf("setup: which system runs is unknown: %v", err)
		} else if sys != "" {
			run.System = sys
			logf("setup: system %s", sys)
			if err := writeJSON(filepath.Join(dir, "config.json"), storedConfig(run, target)); err != nil {
				return run, fmt.Errorf("%w: %v", ErrCannotRun, err)
			}
		}
	}

	rec, err := history.Create(run.HistoryPath)
	if err != nil {
		return run, fmt.Errorf("%w: %v", ErrCannotRun, err)
	}
	defer rec.Close()
	// The collector's headroom follows the history's size (memlimit.go).
	defer limitRunMemory(run.HistoryPath)()

	links, linkedEps, err := interpose(rec, cfg, eps, nemNames)
	if err != nil {
		return run, fmt.Errorf("%w: %v", ErrCannotRun, err)
	}
	wl, err := workloads.NewFenced(workloads.Config{
		Clients: cfg.Concurrency, Readers: cfg.readers(), Keys: cfg.Keys, Namespace: run.Namespace, TTL: cfg.TTL,
		OpTimeout: cfg.OpTimeout, Seed: cfg.Seed, Profile: cfg.Profile, Duration: cfg.Time,
		Issuers: conns(linkedEps.Issuers), Resources: conns(linkedEps.Resources),
	})
	if err != nil {
		return run, err
	}
	acks := history.NewAcks()
	rec.Listen(acks.Observe)
	nenv := &nemesis.Env{Target: target, Holders: wl, ClientClock: wl, Acks: acks, TTL: cfg.TTL, Log: orDiscard(cfg.Log)}
	if links != nil { // a nil *proxy.Set is not "no links"
		defer links.Close()
		nenv.Links = links
	}
	sel := nemesis.Select(nemNames, nenv)
	run.NotApplicable = sel.NotApplicable
	for n, why := range sel.NotApplicable {
		logf("nemesis %s does not apply to %s: %s", n, target.Name(), why)
	}
	var sched *nemesis.Scheduler
	if replay == nil {
		sched = nemesis.NewScheduler(nenv, rec, cfg.Seed, sel.Active)
		if n.guided() && len(sel.Active) > 0 {
			cov, err := watchCoverage(rec, cfg, target.Semantics())
			if err != nil {
				return run, fmt.Errorf("%w: live coverage: %v", ErrCannotRun, err)
			}
			nenv.Coverage = cov.read
			sched.Guide()
		}
	} else {
		// A schedule that names what this target does not have is the
		// caller's mistake (a usage error), found before the main phase.
		if err := replay.CheckTarget(nenv, sel.Active, sel.NotApplicable); err != nil {
			return run, fmt.Errorf("--schedule %s does not fit target %s:\n%w", cfg.Schedule, target.Name(), err)
		}
		sched = nemesis.NewReplay(nenv, rec, cfg.Seed, replay, sel.Active)
		for _, f := range replay.Faults {
			if f.Start >= cfg.Time {
				logf("--schedule: %s starts after the main phase ends (--time %s): not started", f.Describe(), cfg.Time)
			}
		}
	}
	run.Nemeses = sched.Counts
	names := make([]string, 0, len(sel.Active))
	for _, n := range sel.Active {
		names = append(names, n.Name())
	}
	sort.Strings(names)

	// The history starts once the target is up: its time 0 is the start of
	// the workload, so times (and time to detection) do not count setup.
	if _, err := rec.Begin(runEvent(history.RunStart, map[string]any{
		history.RunExtraRequested: cfg.Nemesis, history.RunExtraNemeses: names,
		history.RunExtraNotApplicable: sel.NotApplicable, history.RunExtraProfiles: wl.Mix(),
		history.RunExtraNodes: runNodes(target),
	})); err != nil {
		return run, fmt.Errorf("%w: history: %v", ErrCannotRun, err)
	}
	if err := reports.UpdateLatest(cfg.Store, dir); err != nil {
		return run, fmt.Errorf("%w: %v", ErrCannotRun, err)
	}
	if pf, ok := target.(Preflighter); ok {
		rec.Record(runEvent(history.RunPhase, map[string]any{history.RunExtraPhase: history.PhasePreflight}))
		logf("preflight: checking the Fencing API contract (every request recorded)")
		// One process per lock owner (extra.owner), so a lease ends with its
		// owner's release; a fresh one for every other request and after an
		// info outcome.
		owners := map[string]int{}
		reported, err := pf.Preflight(ctx, func(inv history.Event) func(history.Event) {
			owner := string(inv.Extra["owner"])
			proc, ok := owners[owner]
			if !ok || owner == "" {
				proc = wl.Processes().Next()
				owners[owner] = proc
			}
			inv.Process, inv.Type = proc, history.Invoke
			rec.Record(inv)
			return func(done history.Event) {
				done.Process = proc
				rec.Record(done)
				if done.Type == history.Info {
					delete(owners, owner)
				}
			}
		})
		for _, d := range reported {
			logf("contract deviation (reported; the run goes on): %s", d)
		}
		run.ContractDeviations = reported
		if err != nil {
			return run, fmt.Errorf("%w: target %s: conformance preflight: %v", ErrCannotRun, target.Name(), err)
		}
	}
	problem := func(phase, msg string) {
		run.RunErrors = append(run.RunErrors, msg)
		rec.Record(runEvent(history.RunProblem, map[string]any{history.RunExtraPhase: phase, history.RunExtraError: msg}))
		logf("%s", msg)
	}

	prog := newProgress(cfg.Progress, cfg.Time, sched.Active)
	rec.Listen(prog.observe)
	logf("main phase: %s, %d clients, profiles %v (%s), nemeses %v, seed %d", cfg.Time, cfg.Concurrency, wl.Mix(), wl.KeysInWords(), names, cfg.Seed)
	rec.Record(runEvent(history.RunPhase, map[string]any{history.RunExtraPhase: history.PhaseMain}))
	prog.run()
	mainCtx, cancel := context.WithTimeout(ctx, cfg.Time)
	g, gctx := errgroup.WithContext(mainCtx)
	g.Go(func() error { return wl.Run(gctx, rec) })
	// A target that declares authenticated tokens promises to reject forged
	// ones: the forger runs whether or not --forge was given, or an
	// unverified seal would pass unnoticed.
	if cfg.Forge || target.Semantics().Authenticated {
		g.Go(func() error { return runForge(gctx, rec, wl, linkedEps, cfg) })
	}
	g.Go(func() error { sched.Run(gctx); return nil })
	werr := g.Wait()
	cancel()
	prog.finish()
	run.CutShort = ctx.Err() != nil
	if werr != nil && !errors.Is(werr, context.Canceled) && !errors.Is(werr, context.DeadlineExceeded) {
		problem(history.PhaseMain, "workload: "+werr.Error())
	}

	// The final phase runs even if the caller was cancelled: faults must be
	// healed and the final state read so the history can be checked.
	fctx, fcancel := UntilAbort(ctx, cfg.Abort)
	defer fcancel()
	final := StartStatus(cfg.Progress, "final")
	logTo = final.Log(logs)
	defer func() { final.End(); logTo = logs }()
	logf("final phase: heal, recover, read every key")
	rec.Record(runEvent(history.RunPhase, map[string]any{history.RunExtraPhase: history.PhaseFinal}))
	run.Complete = true
	if err := sched.Heal(fctx); err != nil {
		problem(history.PhaseFinal, err.Error())
		run.Complete = false
	}
	run.Schedule = sched.Planned(cfg.Time, cfg.Nemesis)
	if replay != nil {
		run.Schedule.ReplayOf = cfg.Schedule
	}
	if err := writeSchedule(dir, run.Schedule); err != nil {
		problem(history.PhaseFinal, "schedule: "+err.Error())
	}
	final.Set(fmt.Sprintf("recovery: waiting for every node to answer GET /v1/health (up to %s)", cfg.Recovery))
	if err := WaitHealthy(final.Context(fctx), eps, cfg.Recovery); err != nil {
		problem(history.PhaseFinal, "recovery: "+err.Error())
		run.Complete = false
	}
	final.Set("final reads: reading every key once more")
	rctx, rcancel := context.WithTimeout(fctx, cfg.Recovery)
	if err := wl.FinalReads(rctx, rec); err != nil {
		problem(history.PhaseFinal, "final reads: "+err.Error())
		run.Complete = false
	}
	rcancel()
	end := map[string]any{history.RunExtraComplete: run.Complete, history.RunExtraCutShort: run.CutShort}
	if waited := sched.Waited(); len(waited) > 0 {
		end[history.RunExtraWaited] = waited
	}
	if Aborted(cfg.Abort) {
		// No end event: the history says the run did not finish, which
		// is the truth; teardown follows (deferred).
		run.End = time.Now()
		logf("aborted: tearing down at once")
		return run, ErrAborted
	}
	rec.Record(runEvent(history.RunEnd, end))
	run.End = time.Now()
	if err := rec.Close(); err != nil {
		return run, fmt.Errorf("%w: history: %v", ErrCannotRun, err)
	}
	return run, nil
}

// NewRunID is a run's id: the target, the run folder's name and a random
// suffix, so that runs started in the same millisecond (from other
// processes, into other stores) never share an id, and one run's teardown,
// which removes what carries its id, never touches another's objects.
func NewRunID(target, dir string) string {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		// crypto/rand does not fail on Linux; the pid and the clock keep
		// ids apart if it ever does.
		binary.BigEndian.PutUint32(b[:], uint32(os.Getpid())^uint32(time.Now().UnixNano()))
	}
	return reports.TargetDirName(target) + "-" + filepath.Base(dir) + "-" + hex.EncodeToString(b[:])
}

// namespaceOf is the namespace a run derives from its id: the id's random
// part, so that no two runs share one (a repeat of a run included: the
// reproduce line leaves it out, since a repeat against the same long-lived
// server must not read what the run it repeats wrote).
func namespaceOf(runID string) string {
	return "r" + runID[strings.LastIndex(runID, "-")+1:]
}

// runNodes lists the target's nodes for the run start event: what the
// analysis needs to tell a failure situation the target cannot have (no
// issuer replicas, no clock that moves) from one the run did not create.
func runNodes(target Target) []history.RunNode {
	clocks, cuts := map[string]bool{}, map[string]bool{}
	if c, ok := target.(nemesis.ClockSkewer); ok {
		for _, n := range c.ClockNodes() {
			clocks[n] = true
		}
	}
	if p, ok := target.(nemesis.Partitioner); ok {
		for _, n := range p.PartitionNodes() {
			cuts[n] = true
		}
	}
	_, oneWay := target.(nemesis.Grudger)
	var out []history.RunNode
	for _, n := range target.Nodes() {
		out = append(out, history.RunNode{Name: n.Name, Role: n.Role, Stateless: n.Stateless,
			Clock: clocks[n.Name], Partition: cuts[n.Name], OneWay: oneWay && cuts[n.Name]})
	}
	return out
}

// runEvent is a run event (history/run.go) with its extra fields.
func runEvent(action string, extra map[string]any) history.Event {
	e := history.Event{Process: history.NemesisProcess, Type: history.Info, F: history.RunEvent,
		Extra: map[string]json.RawMessage{}}
	extra[history.RunExtraAction] = action
	for k, v := range extra {
		if b, err := json.Marshal(v); err == nil {
			e.Extra[k] = b
		}
	}
	return e
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

// HoldsFiles reports whether the folder tree dir holds a file other than
// its own top-level files named in except (empty folders do not count): a
// folder that does not is of no use to keep.
func HoldsFiles(dir string, except ...string) bool {
	holds := false
	filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && !(filepath.Dir(path) == dir && slices.Contains(except, d.Name())) {
			holds = true
			return filepath.SkipAll
		}
		return nil
	})
	return holds
}

// tidyUnstarted tidies the folder of a run that ended with err before its
// history began: kept with reports.ErrorFile when keepLogs and it holds more than
// config.json and an empty history (the target's logs say why it did not
// start); removed otherwise, with its target's folder when that is left
// empty, so refused runs leave no clutter. It reports whether the folder
// was removed.
func tidyUnstarted(dir string, err error, keepLogs bool) (removed bool) {
	if keepLogs && HoldsFiles(dir, reports.ConfigFile, reports.HistoryFile) {
		os.WriteFile(filepath.Join(dir, reports.ErrorFile), []byte(err.Error()+"\n"), 0o644)
		return false
	}
	if os.RemoveAll(dir) != nil {
		return false
	}
	os.Remove(filepath.Dir(dir)) // only when empty: the target's folder of this run alone
	return true
}

// configRecord is config.json: every setting, the command that repeats the
// run, and what the target declared. Version 2: the target's options are
// fields (bugs, seal_key), not an options map; every setting has a flag.
// configVersion is config.json's version.
const configVersion = 2

type configRecord struct {
	Config
	// NamespaceDerived says Config.Namespace is the one the run derived
	// from its id: a run made from this record derives its own.
	NamespaceDerived bool     `json:"namespace_derived,omitempty"`
	RunID            string   `json:"run_id"`
	Command          []string `json:"command"`
	TargetName       string   `json:"target_name"`
	// System is the release and size the target said it ran (Systemer).
	System    string `json:"system,omitempty"`
	Semantics any    `json:"semantics"`
	Version   int    `json:"config_version"`
}

func storedConfig(run *Run, t Target) configRecord {
	cfg := run.Config
	cfg.Namespace = run.Namespace
	return configRecord{Config: cfg, NamespaceDerived: run.Config.Namespace == "", RunID: run.RunID, Command: run.Command, TargetName: t.Name(), System: run.System, Semantics: t.Semantics(), Version: configVersion}
}

// writeSchedule writes the run's schedule.json.
func writeSchedule(dir string, s *nemesis.Schedule) error {
	b, err := s.Marshal()
	if err != nil {
		return err
	}
	return durable.WriteFile(filepath.Join(dir, nemesis.ScheduleFile), b, 0o644)
}

// LoadConfig reads a stored run's config.json: the config the run ran with
// (its Command repeats it).
func LoadConfig(runDir string) (Config, error) {
	b, err := os.ReadFile(filepath.Join(runDir, "config.json"))
	if err != nil {
		return Config{}, err
	}
	var rec configRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return Config{}, fmt.Errorf("%s: %w", filepath.Join(runDir, "config.json"), err)
	}
	if rec.Version != configVersion {
		return Config{}, fmt.Errorf("%s: config_version %d, this fencecheck reads %d", filepath.Join(runDir, "config.json"), rec.Version, configVersion)
	}
	if rec.NamespaceDerived {
		rec.Config.Namespace = ""
	}
	return rec.Config, nil
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return durable.WriteFile(path, append(b, '\n'), 0o644)
}
