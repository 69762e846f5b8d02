package analysis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"time"

	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/checkers/overlap"
	"github.com/fencecheck/fencecheck/checkers/porcupine"
	"github.com/fencecheck/fencecheck/history"
	"github.com/fencecheck/fencecheck/nemesis"
)

// Defaults of Options' zero values.
const (
	// DefaultTimeout bounds Porcupine's search over a whole history.
	DefaultTimeout = porcupine.DefaultTimeout
	// DefaultMinOps is the fewest definite (ok or fail) client operations a
	// history needs for a "valid" verdict to mean anything: the minimum of
	// `fencecheck test`, `check` and the gate (harness.Default). With no
	// minimum (--min-ops 0) a smaller history, even an empty one, is judged
	// as it is, with a note.
	DefaultMinOps = 10
	// DefaultTTL is the lease the lease-overlap analysis assumes for
	// acquires and renews whose events carry no extra.ttl_ms: the lease
	// fencecheck's clients ask for by default.
	DefaultTTL = history.DefaultTTL
)

// Options configure an analysis. The direct checks always run; Checker
// selects the complete checkers beside them.
type Options struct {
	// Semantics is what the target declares (zero fields: the defaults).
	Semantics checkers.Semantics
	// Checker names the checkers that run beside the direct checks: a
	// comma-separated list of the checker table's names (CheckerNames) and
	// aliases ("both": Porcupine and the fast checker; "" is
	// DefaultChecker).
	Checker string
	// Checkers, when set, are used instead of those Checker selects (a
	// replay of stored results, a test's fake).
	Checkers []Checker
	// Timeout bounds Porcupine's search over the whole history (0:
	// DefaultTimeout). Keys not decided in time are Unknown, never Valid.
	Timeout time.Duration
	// MinOps: with fewer definite client operations a valid history gives
	// unknown. 0 (or negative) means no minimum.
	MinOps int
	// TTL is the lease length for the lease-overlap analysis when events
	// carry none (0: DefaultTTL).
	TTL time.Duration
	// RequireCoverage makes a valid history from a run that left a failure
	// class that applies uncovered (coverage.go: not one of its situations
	// created) unknown, the class named in the gate reason.
	RequireCoverage bool
	// Lenient skips damaged lines and unpairable events instead of failing,
	// and notes each: the report of a damaged history is still written, but
	// its verdict is at best unknown.
	Lenient bool
	// Progress, when set, gets a line every second while a large file is
	// read, and one before the checkers start on it.
	Progress io.Writer
	// Workers is how many goroutines the check keeps busy (0: one per
	// core, GOMAXPROCS; 1: everything on the caller's goroutine). The
	// result is the same whatever it is.
	Workers int
	_       struct{}
}

// Settings are the options an analysis ran with, defaults filled in: what
// results.json records so that a re-check of a stored run judges it the
// same way.
type Settings struct {
	Checker string        `json:"checker"`
	Timeout time.Duration `json:"timeout_ns"`
	MinOps  int           `json:"min_ops"`
	TTL     time.Duration `json:"ttl_ns"`
	// RequireCoverage is Options.RequireCoverage.
	RequireCoverage bool `json:"require_coverage,omitempty"`
}

// Result is everything fencecheck concludes from one history. results.json,
// report.html, junit.xml, the CLI's summary and the Go gate's answer are
// renderings of it.
type Result struct {
	Semantics checkers.Semantics
	Settings  Settings
	// Verdict is the overall verdict and Reason why (see combine and the
	// gate in check.go); ExitCode the process exit code it maps to.
	Verdict  checkers.Verdict
	Reason   string
	ExitCode int
	// Checks holds one result per checker and model, the lease findings
	// (model "lease") included. Anomalies of a check whose verdict is valid
	// are findings (Finding is set). Every violation carries its Cause.
	Checks []checkers.Result
	// Keys are the per-key verdicts of checkers that decide key by key.
	Keys []checkers.KeyResult
	// AnomalyCount is the one count of anomalies: the distinct violations,
	// the checkers' reports of one violation merged (rootcause.go), those a
	// checker did not list included. ViolationKinds counts the same by
	// each violation's kind (they sum to AnomalyCount).
	AnomalyCount   int
	ViolationKinds map[string]int
	// RootCauses group the violations by what explains them (the fault
	// occurrence, else the key), first violation first.
	RootCauses []RootCause
	// FindingKinds summarise the findings (observations that are not
	// violations: lease overlaps...) one line per kind.
	FindingKinds []FindingKind
	// FirstViolation is the earliest violation when the verdict is invalid:
	// its At is the time to detection, its Cause the fault named for it.
	FirstViolation *checkers.Anomaly
	// Faults are the history's fault periods, by start time.
	Faults []Fault
	// Nemeses counts each nemesis's starts and failures to start.
	Nemeses map[string]NemesisCount
	Counts  Counts
	Latency []Latency
	// LateWrites counts the seeds' scenario: writes by expired holders and
	// how each ended.
	LateWrites LateWrites
	// Coverage is what the run provoked: per failure class, the situations
	// that expose it and how often the run created each (coverage.go).
	Coverage *Coverage
	// Leases is the lease-overlap analysis (nil when it could not run: a
	// note says why); its Overlaps are the earliest MaxAnomaliesPerKind,
	// Count counts them all.
	Leases *overlap.Report
	// Run is what the run events say about the run (nil for a history
	// without them: an old file or another tool's).
	Run *RunRecord
	// GateReasons say why the run does not pass however the checkers
	// decided (too few operations, a requested fault that never took
	// effect, a run that did not complete, a damaged history).
	GateReasons []string
	// Notes are what a reader must know about the history and the run.
	Notes []string
	// End is the time of the last event (ns).
	End int64
	// Ops are every client operation, by invoke index (Op finds one), kept
	// compactly (history.Ops).
	Ops     *history.Ops
	Elapsed time.Duration

	checkers     []Checker
	causeScanned int64 // operations the idle-time rule looked back over (maxCauseScan)
}

// Op returns the operation whose invoke event has index id, or nil.
func (r *Result) Op(id int64) *history.Op {
	if r.Ops == nil {
		return nil
	}
	return r.Ops.Op(id)
}

// Anomalies lists every check's anomalies, findings included, earliest
// first.
func (r *Result) Anomalies() []checkers.Anomaly {
	var out []checkers.Anomaly
	for _, res := range r.Checks {
		out = append(out, res.Anomalies...)
	}
	checkers.SortAnomalies(out)
	return out
}

// maxNotes bounds the notes about a damaged history: a file with a million
// bad lines must not produce a million-line report.
const maxNotes = 20

// CheckFile checks a history file in one streaming pass: each line is
// parsed, paired into an operation and dropped, so memory grows with the
// number of operations, not with the file's bytes. A malformed line is a
// *history.ParseError naming it (unless Options.Lenient).
func CheckFile(ctx context.Context, path string, opts Options) (*Result, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var size int64
	if st, err := f.Stat(); err == nil {
		size = st.Size()
	}
	return checkReader(ctx, f, size, opts)
}

// CheckReader is CheckFile for a history read from r.
func CheckReader(ctx context.Context, r io.Reader, opts Options) (*Result, error) {
	return checkReader(ctx, r, 0, opts)
}

func checkReader(ctx context.Context, f io.Reader, size int64, opts Options) (*Result, error) {
	a, err := newAnalyzer(opts)
	if err != nil {
		return nil, err
	}
	rd := history.NewReader(f)
	var src eventSource = readInline{rd}
	if workers(opts) > 1 {
		src = newReadAhead(rd)
		a.feed = newLeaseFeed(a.leases)
		defer a.feed.stop()
	}
	defer src.stop()
	last := time.Now()
	for n := 0; ; n++ {
		e, err := src.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			var pe *history.ParseError
			if !opts.Lenient || !errors.As(err, &pe) {
				return nil, err
			}
			a.damaged(err.Error())
			continue
		}
		a.pairer.Line = src.line()
		if err := a.add(e); err != nil {
			if !opts.Lenient {
				return nil, &history.ParseError{Line: src.line(), Err: err}
			}
			a.damaged(fmt.Sprintf("history line %d: %v", src.line(), err))
		}
		if n%65536 == 0 {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if opts.Progress != nil && time.Since(last) > time.Second {
				last = time.Now()
				pct := 0.0
				if size > 0 {
					pct = 100 * float64(src.bytesRead()) / float64(size)
				}
				fmt.Fprintf(opts.Progress, "check: read %d lines (%.0f%%), %d operations\n", src.line(), pct, a.ops.Len())
			}
		}
	}
	if a.feed != nil {
		a.feed.close() // the summary begins while the rest is done
	}
	if src.truncated() {
		a.notes = append(a.notes, fmt.Sprintf("skipped the last line (%d): it was cut short, as by a crash while it was written; everything before it was checked", src.line()))
	}
	if opts.Progress != nil && size > 64<<20 {
		fmt.Fprintf(opts.Progress, "check: read %d lines, %d operations; checking\n", src.line(), a.ops.Len())
	}
	if err := a.pairRest(); err != nil {
		var pe *history.PairError
		if errors.As(err, &pe) && pe.Line > 0 {
			return nil, &history.ParseError{Line: pe.Line, Err: err}
		}
		return nil, err
	}
	return a.finish(ctx), nil
}

// Check is CheckFile for a history in memory (tests, other tools' events).
// A pairing error is returned as it is.
func Check(ctx context.Context, events []history.Event, opts Options) (*Result, error) {
	a, err := newAnalyzer(opts)
	if err != nil {
		return nil, err
	}
	for _, e := range events {
		if err := a.add(e); err != nil {
			if !opts.Lenient {
				return nil, err
			}
			a.damaged(err.Error())
		}
	}
	if err := a.pairRest(); err != nil {
		return nil, err
	}
	return a.finish(ctx), nil
}

// analyzer is the one pass: every event goes through add once.
type analyzer struct {
	opts     Options
	sem      checkers.Semantics
	checkers []Checker

	pairer *history.Pairer
	// ops are the paired operations, compactly; info writes wait in late
	// until the history ends (a strip event may still change one).
	ops      *history.Ops
	late     []*history.Op
	leases   *overlap.Finder
	leaseErr error
	// feed, when set, runs leases on a goroutine of its own (parallel.go).
	feed    *leaseFeed
	faults  faultPairer
	run     runReader
	service serviceTracker
	nemeses map[string]*nemesis.Count

	events, tampered int
	// granted is the longest lease an answer said it granted (ns).
	granted int64
	keys    map[string]bool
	procs   map[int]bool
	// recentKeys and procSeen spare keys and procs a map operation per
	// event (seen).
	recentKeys [8]string
	recentAt   int
	procSeen   []bool
	end        int64
	damage     int
	notes      []string
}

func newAnalyzer(opts Options) (*analyzer, error) {
	sem, err := opts.Semantics.Normalize()
	if err != nil {
		return nil, err
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.TTL <= 0 {
		opts.TTL = DefaultTTL
	}
	if opts.MinOps < 0 {
		opts.MinOps = 0
	}
	cs := opts.Checkers
	if cs == nil {
		if cs, err = selectCheckers(opts); err != nil {
			return nil, err
		}
	}
	if opts.Checkers == nil {
		opts.Checker, _ = NormalizeChecker(opts.Checker) // selectCheckers accepted it
	} else if opts.Checker == "" {
		opts.Checker = DefaultChecker
	}
	return &analyzer{opts: opts, sem: sem, checkers: cs, pairer: history.NewPairer(), ops: &history.Ops{},
		leases: overlap.NewFinder(overlap.Options{TTL: opts.TTL}), nemeses: map[string]*nemesis.Count{},
		run:  runReader{mainAt: -1, finalAt: -1},
		keys: map[string]bool{}, procs: map[int]bool{}}, nil
}

func (a *analyzer) add(e history.Event) error {
	a.events++
	a.end = max(a.end, e.Time)
	switch {
	case e.IsClient():
		if a.run.inMain(e.Time) {
			a.service.add(e, a.run.mainAt)
		}
		if e.Type == history.Ok {
			if ms, ok := extraInt(e.Extra, history.ExtraGrantedTTL); ok {
				a.granted = max(a.granted, ms*int64(time.Millisecond))
			}
		}
	case e.IsRun():
		a.run.add(e)
	case e.IsTamper():
		a.tampered++
	case e.Process == history.NemesisProcess:
		a.faults.add(e)
		c := a.nemeses[e.F]
		if c == nil {
			c = &nemesis.Count{}
		}
		if c.Add(e) {
			a.nemeses[e.F] = c
		}
	}
	op, err := a.pairer.Add(e)
	if e.IsClient() && (e.Type == history.Invoke || err != nil) {
		// A completion the pairer takes has its invoke's key and process.
		a.seen(e.Key, e.Process)
	}
	if err != nil {
		return err
	}
	switch {
	case a.feed != nil:
		a.feed.add(e, op)
	case a.leaseErr == nil:
		a.leaseErr = a.leases.Add(e, op)
	}
	switch {
	case op == nil:
	case op.F == history.Write && op.Outcome == history.OutcomeInfo:
		a.late = append(a.late, op)
	default:
		// Copied, and no one else holds it (the lease finder copies what
		// it needs): the pairer may reuse it.
		a.ops.Add(op)
		a.pairer.Recycle(op)
	}
	return nil
}

// pairRest takes the operations the pairer still holds (info writes, and
// those never completed). A strip event that matched no write is an error,
// or damage under Lenient.
func (a *analyzer) pairRest() error {
	rest, err := a.pairer.Finish()
	if err != nil {
		if !a.opts.Lenient {
			return err
		}
		a.damaged(err.Error())
		a.pairer.DropPending()
		rest, _ = a.pairer.Finish()
	}
	for _, op := range append(a.late, rest...) {
		a.ops.Add(op)
	}
	a.late = nil
	return nil
}

// silences are the gate's reasons about nodes that stopped serving in the
// main phase (service.go); none for a history without phase events.
func (a *analyzer) silences(faults []Fault) []string {
	if a.run.mainAt < 0 {
		return nil
	}
	end := a.run.finalAt
	if end < 0 {
		end = a.end
	}
	return a.service.silences(a.run.mainAt, end, faults)
}

// coverageOf counts coverage over ops (sorted), with the fault periods
// and the run's events read so far: the one place both Check (after the
// run) and a CoverageCounter (during it) count.
func (a *analyzer) coverageOf(ops *history.Ops, faults []Fault, lateReached []int64) *Coverage {
	return coverage(coverageInput{ops: ops, faults: faults, run: a.run.record(), nodes: a.run.nodes, sem: a.sem,
		lateReached: lateReached, main: a.mainPhase(), lease: max(a.opts.TTL, time.Duration(a.granted))})
}

// mainPhase is how long the main phase lasted (the whole history when it
// has no phase events).
func (a *analyzer) mainPhase() time.Duration {
	from, to := a.run.mainAt, a.run.finalAt
	if from < 0 {
		from = 0
	}
	if to < 0 {
		to = a.end
	}
	return time.Duration(max(to-from, 0))
}

func extraInt(extra map[string]json.RawMessage, k string) (int64, bool) {
	b, ok := extra[k]
	if !ok {
		return 0, false
	}
	var v float64
	if json.Unmarshal(b, &v) != nil {
		return 0, false
	}
	return int64(v), true
}

// damaged notes a skipped line or event (Lenient).
func (a *analyzer) damaged(why string) {
	a.damage++
	if a.damage <= maxNotes {
		a.notes = append(a.notes, "skipped damaged "+clipNote(why))
	}
}

func clipNote(s string) string {
	if len(s) > 300 {
		return s[:300] + "…"
	}
	return s
}

// finish runs the checkers on the paired operations and derives everything
// else, each fact once.
func (a *analyzer) finish(ctx context.Context) *Result {
	start := time.Now()
	ops := a.ops
	ops.Sort()
	r := &Result{Semantics: a.sem, Ops: ops, End: a.end, checkers: a.checkers,
		Settings: Settings{Checker: a.opts.Checker, Timeout: a.opts.Timeout, MinOps: a.opts.MinOps, TTL: a.opts.TTL,
			RequireCoverage: a.opts.RequireCoverage}}
	if a.damage > maxNotes {
		a.notes = append(a.notes, fmt.Sprintf("%d damaged lines or events in all", a.damage))
	}
	r.Notes = a.notes
	r.Faults = a.faults.periods(a.end)
	r.Nemeses = nemesisCounts(a.nemeses)
	r.Run = a.run.record()

	// What follows only reads the sorted operations, and each part writes
	// its own results: the parts run at once (parallel.go), the longest
	// first. A checker with a wall-clock budget (Porcupine) runs alone
	// afterwards: cores shared with the rest would spend its budget.
	var rep overlap.Report
	var lateReached []int64
	checks := make([][]checkers.Result, len(a.checkers))
	keyResults := make([][]checkers.KeyResult, len(a.checkers))
	// Progress is written here, never from the tasks: it need not be safe
	// for concurrent use.
	progress := func(c Checker) {
		if a.opts.Progress != nil && ops.Len() > 1_000_000 {
			fmt.Fprintf(a.opts.Progress, "check: %s on %d operations\n", c.Name(), ops.Len())
		}
	}
	runChecker := func(i int) {
		c := a.checkers[i]
		checks[i] = c.Check(ctx, ops, a.sem)
		if k, ok := c.(KeyResulter); ok {
			keyResults[i] = k.KeyResults()
		}
	}
	leaseSummary := func() {
		switch {
		case a.feed != nil:
			rep, a.leaseErr = a.feed.result()
		case a.leaseErr == nil:
			// Only the earliest overlaps are listed (as anomalies); a soak
			// has about one per lease.
			rep = a.leases.Summary(checkers.MaxAnomaliesPerKind)
		}
		// The finder's leases are garbage from here, while the checkers run.
		a.leases, a.pairer = nil, nil
	}
	// The parts that are not checkers: the checkers' grouping
	// (checkers.Group, shared through ops.Memo), late writes and coverage,
	// counts, latencies.
	others := []func(){
		func() { checkers.Group(ops, a.sem) },
		func() {
			r.LateWrites, lateReached = lateWrites(ops)
			r.Coverage = a.coverageOf(ops, r.Faults, lateReached)
		},
		func() { r.Counts = a.count(ops) },
		func() { r.Latency = latencies(ops) },
	}
	var tasks []func()
	if a.feed == nil {
		tasks = append(tasks, leaseSummary)
	} else {
		// The summary is made on the feed's goroutine while the
		// operations were sorted; the other parts run while it is waited
		// for, and the checkers start after it, so that the finder's
		// leases are garbage while they run (the peak memory is theirs).
		runTasks(workers(a.opts), append([]func(){leaseSummary}, others...)...)
		others = nil
		// The finder's leases, the pairer, the reading's batches and
		// coverage's index are garbage now; collected before the checkers
		// allocate, so that their memory is reused rather than added to.
		// (Most of what is live, the operations, has no pointers: the
		// collection is short.)
		runtime.GC()
	}
	var budgeted []int
	for i, c := range a.checkers {
		if _, ok := c.(Budgeted); ok {
			budgeted = append(budgeted, i)
			continue
		}
		progress(c)
		tasks = append(tasks, func() { runChecker(i) })
	}
	tasks = append(tasks, others...)
	runTasks(workers(a.opts), tasks...)
	for _, i := range budgeted {
		progress(a.checkers[i])
		runChecker(i)
	}
	r.Counts.Faults = len(r.Faults)
	for i := range a.checkers {
		r.Checks = append(r.Checks, checks[i]...)
		r.Keys = append(r.Keys, keyResults[i]...)
	}
	if a.leaseErr != nil {
		r.Notes = append(r.Notes, "no lease-overlap analysis: "+a.leaseErr.Error())
	} else {
		r.Leases = &rep
		if rep.Count > 0 && !hasModel(r.Checks, checkers.ModelLease) {
			r.Checks = append(r.Checks, checkers.Result{Checker: checkers.CheckerDirect, Model: checkers.ModelLease,
				Verdict: checkers.Valid, Anomalies: rep.FirstAnomalies(checkers.MaxAnomaliesPerKind), Ops: rep.Leases,
				KindCounts:       map[string]int{checkers.KindLeaseOverlap: rep.Count},
				OmittedAnomalies: max(0, rep.Count-checkers.MaxAnomaliesPerKind),
				Reason:           fmt.Sprintf("%d lease overlaps: clients that both believed they held a lock; fencing is what keeps the resource safe then", rep.Count)})
		}
	}
	// A check that passed may still list what it saw: those are findings.
	for i := range r.Checks {
		if r.Checks[i].Verdict == checkers.Valid {
			for j := range r.Checks[i].Anomalies {
				r.Checks[i].Anomalies[j].Finding = true
			}
		}
	}
	nameCauses(r)
	r.combine()
	r.gate(a.damage, a.silences(r.Faults))
	r.rootCauses()
	r.FindingKinds = findingKinds(r.Checks)
	if r.Verdict == checkers.Invalid {
		r.FirstViolation = firstViolation(r.Checks)
	}
	r.Notes = append(r.Notes, r.Run.Notes()...)
	r.ExitCode = ExitCode(r.Verdict)
	r.Elapsed = time.Since(start)
	return r
}

func firstViolation(checks []checkers.Result) *checkers.Anomaly {
	var first *checkers.Anomaly
	for i := range checks {
		for j := range checks[i].Anomalies {
			a := &checks[i].Anomalies[j]
			if !a.Finding && (first == nil || a.At < first.At) {
				first = a
			}
		}
	}
	if first == nil {
		return nil
	}
	c := *first
	return &c
}

// CanVisualize reports whether a checker of this analysis can draw its keys
// (Visualize).
func (r *Result) CanVisualize() bool {
	for _, c := range r.checkers {
		if _, ok := c.(Visualizer); ok {
			return true
		}
	}
	return false
}

// Visualize writes a checker's HTML visualization of one key of one model
// (Porcupine's: every operation on a timeline per client, the longest
// linearizations found), annotated with the fault periods and the anomalies
// found on that key.
func (r *Result) Visualize(model, key string, w io.Writer) error {
	for _, c := range r.checkers {
		if v, ok := c.(Visualizer); ok {
			return v.Visualize(model, key, r.annotations(model, key), w)
		}
	}
	return errors.New("no checker of this analysis draws keys")
}

func (r *Result) annotations(model, key string) []checkers.Annotation {
	var notes []checkers.Annotation
	for _, f := range r.Faults {
		notes = append(notes, checkers.Annotation{Tag: "faults", Start: f.Start, End: f.Stop,
			Description: f.Nemesis, Details: f.Node, Color: "#fde2c8"})
	}
	for _, res := range r.Checks {
		for _, a := range res.Anomalies {
			if a.Model != model || a.Key != key || a.At == history.Never {
				continue
			}
			color := "#f7c6c6"
			if a.Finding {
				color = "#fff3b0"
			}
			notes = append(notes, checkers.Annotation{Tag: "anomalies (" + res.Checker + ")", Start: a.At,
				Description: a.Kind, Details: a.Text, Color: color})
		}
	}
	return notes
}

// Quantile of sorted values, nearest-rank (the latency figures' rule).
func Quantile(sorted []int64, q float64) int64 { return quantile(sorted, q) }

// hasModel reports whether a checker already answered for model (a replay of
// stored results brings its own lease findings).
func hasModel(checks []checkers.Result, model string) bool {
	for _, c := range checks {
		if c.Model == model {
			return true
		}
	}
	return false
}
