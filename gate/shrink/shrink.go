// Package shrink turns a failing stored run into the smallest fault schedule
// that still fails: `fencecheck shrink RUN_DIR`. It replays the run's
// schedule.json (`fencecheck test --schedule`) with fewer faults, shorter
// faults and a shorter main phase, keeping every candidate that still fails,
// and writes what it found into RUN_DIR/shrink/.
//
// Real systems are not deterministic: a replay of the same schedule with the
// same workload seed fails in some tries and not in others. So every
// candidate runs up to Tries times and "still fails" when at least Need of
// them are invalid; it stops as soon as the answer is decided either way.
//
// The steps, each keeping what still fails:
//
//  1. reproduce: the faults that started before the first violation (plus a
//     margin, the main phase cut there), else the whole schedule; if neither
//     fails again, the shrink ends with exit code 2;
//  2. no fault at all (a bug that needs none, e.g. accepting equal tokens);
//  3. delta debugging (ddmin) over the nemesis kinds, then over the faults
//     left;
//  4. each fault shorter (halved, twice at most);
//  5. the main phase cut to just after the last fault ends and the failure
//     showed;
//  6. the kept schedule run to all its tries, for an honest "k of n".
package shrink

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/fencecheck/fencecheck/analysis"
	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/durable"
	"github.com/fencecheck/fencecheck/gate"
	"github.com/fencecheck/fencecheck/harness"
	"github.com/fencecheck/fencecheck/nemesis"
	"github.com/fencecheck/fencecheck/reports"
)

// Dir is the folder of a run that a shrink writes into.
const Dir = "shrink"

// Options configure a shrink. Zero fields take Default's values.
type Options struct {
	// Tries is how often each candidate runs at most; Need how many of its
	// tries must be invalid for it to still fail.
	Tries, Need int
	// Budget bounds the whole shrink; what failed so far is kept.
	Budget time.Duration
	// Parallel is how many tries run at once.
	Parallel int
	// Force replaces RUN_DIR/shrink from an earlier shrink.
	Force bool
	// Progress receives one line per candidate; nil for none.
	Progress io.Writer
	_        struct{}
}

// Default is `fencecheck shrink` with no flags: 3 tries, 2 must fail, 10
// minutes, tries two at a time (one on a single CPU).
func Default() Options {
	return Options{Tries: 3, Need: 2, Budget: 10 * time.Minute, Parallel: min(2, runtime.NumCPU())}
}

func (o Options) withDefaults() Options {
	d := Default()
	if o.Tries == 0 {
		o.Tries = d.Tries
	}
	if o.Need == 0 {
		o.Need = min(d.Need, o.Tries)
	}
	if o.Budget == 0 {
		o.Budget = d.Budget
	}
	if o.Parallel == 0 {
		o.Parallel = d.Parallel
	}
	return o
}

func (o Options) validate() error {
	var errs []error
	if o.Tries < 1 || o.Tries > 100 {
		errs = append(errs, fmt.Errorf("--tries must be 1..100, got %d", o.Tries))
	}
	if o.Need < 1 || o.Need > o.Tries {
		errs = append(errs, fmt.Errorf("--need must be 1..--tries (%d), got %d", o.Tries, o.Need))
	}
	if o.Budget <= 0 {
		errs = append(errs, fmt.Errorf("--budget must be positive, got %s", o.Budget))
	}
	if o.Parallel < 1 || o.Parallel > 16 {
		errs = append(errs, fmt.Errorf("--parallel must be 1..16, got %d", o.Parallel))
	}
	return errors.Join(errs...)
}

// Result is what a shrink found.
type Result struct {
	// ExitCode: analysis.ExitInvalid when a failing schedule was kept,
	// ExitUnknown when no candidate failed again, ExitCannot when the
	// candidates could not be run, ExitUsage for a run that cannot be
	// shrunk.
	ExitCode int `json:"exit_code"`
	// Summary is the outcome in words: "fails with just: restart of
	// reference at 2.10 s for 0.80 s (3 of 3 tries)".
	Summary string `json:"summary"`
	// Command replays the kept schedule; Schedule is its file (RUN_DIR/
	// shrink/schedule.json), both empty when nothing failed again.
	Command  []string `json:"command,omitempty"`
	Schedule string   `json:"schedule,omitempty"`
	// Before is the stored run's schedule and main phase, After the kept
	// one; Failed of Tries is how the kept one fared.
	Before Shape `json:"before"`
	After  Shape `json:"after"`
	Failed int   `json:"failed"`
	Tries  int   `json:"tries"`
	// Candidates are every schedule tried, in order.
	Candidates []Candidate   `json:"candidates"`
	Runs       int           `json:"runs"`
	Took       time.Duration `json:"took_ns"`
	OutOfTime  bool          `json:"out_of_budget,omitempty"`
	// Interrupted: the caller's context ended the shrink (a signal).
	Interrupted bool           `json:"interrupted,omitempty"`
	Options     map[string]any `json:"options"`
	// Dir is RUN_DIR/shrink.
	Dir string `json:"-"`
}

// Shape is a schedule's size.
type Shape struct {
	Faults    int           `json:"faults"`
	Kinds     string        `json:"kinds"`
	MainPhase time.Duration `json:"main_phase_ns"`
	Faulted   []string      `json:"described,omitempty"`
}

// Candidate is one schedule tried.
type Candidate struct {
	N         int           `json:"n"`
	What      string        `json:"what"`
	Faults    int           `json:"faults"`
	MainPhase time.Duration `json:"main_phase_ns"`
	Schedule  string        `json:"schedule"`
	Tries     []Try         `json:"tries"`
	Failed    int           `json:"failed"`
	// StillFails is the candidate's verdict: at least Need tries invalid.
	StillFails bool `json:"still_fails"`

	faults []nemesis.Scheduled
}

// Try is one run of a candidate.
type Try struct {
	Dir      string `json:"dir,omitempty"`
	Verdict  string `json:"verdict,omitempty"`
	ExitCode int    `json:"exit_code"`
	// FirstInvalidAt is the time to detection of an invalid try (-1 when
	// none).
	FirstInvalidAt time.Duration `json:"first_invalid_at_ns"`
	Error          string        `json:"error,omitempty"`
	// CutShort: the budget ended during the try; it does not count.
	CutShort bool `json:"cut_short,omitempty"`
	usage    bool
}

func (t Try) failed() bool { return t.ExitCode == analysis.ExitInvalid && !t.CutShort }

// usageError is a run folder that cannot be shrunk.
type usageError struct{ error }

// IsUsage reports whether err says the run cannot be shrunk as asked
// (analysis.ExitUsage).
func IsUsage(err error) bool {
	var u usageError
	return errors.As(err, &u)
}

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// runFunc runs one try of a candidate's config.
type runFunc func(ctx context.Context, cfg harness.Config) Try

// Run shrinks the failing run stored in runDir. The error is nil whenever
// the shrink was carried out, whatever it found (Result.ExitCode says);
// otherwise it says why not.
func Run(ctx context.Context, runDir string, opts Options) (*Result, error) {
	return run(ctx, runDir, opts, runTry)
}

func run(ctx context.Context, runDir string, opts Options, try runFunc) (*Result, error) {
	opts = opts.withDefaults()
	res := &Result{ExitCode: analysis.ExitUsage}
	if err := opts.validate(); err != nil {
		return res, usageError{err}
	}
	s, err := load(runDir, opts)
	if err != nil {
		return res, err
	}
	s.run, s.res = try, res
	res.Dir = s.dir
	res.Options = map[string]any{"tries": opts.Tries, "need": opts.Need, "budget_ns": opts.Budget, "parallel": opts.Parallel}
	if err := os.MkdirAll(filepath.Join(s.dir, "candidates"), 0o755); err != nil {
		res.ExitCode = analysis.ExitCannot
		return res, err
	}
	if f, err := os.Create(filepath.Join(s.dir, "progress.log")); err == nil {
		defer f.Close()
		s.log = f
	}
	bctx, cancel := context.WithTimeout(ctx, opts.Budget)
	defer cancel()
	s.ctx = bctx
	err = s.shrink()
	res.Took = time.Since(s.began).Round(time.Millisecond)
	res.Interrupted = ctx.Err() != nil
	res.OutOfTime = bctx.Err() != nil && !res.Interrupted
	if err != nil {
		res.ExitCode = analysis.ExitCannot
		if IsUsage(err) {
			res.ExitCode = analysis.ExitUsage
		}
		res.Summary = "could not shrink: " + err.Error()
	}
	if werr := s.write(); werr != nil && err == nil {
		err, res.ExitCode = werr, analysis.ExitCannot
	}
	return res, err
}

type shrinker struct {
	opts  Options
	ctx   context.Context
	run   runFunc
	res   *Result
	began time.Time
	// runDir is the stored run, dir its shrink folder, base its config.
	runDir, dir string
	base        harness.Config
	orig        *nemesis.Schedule
	// firstInvalid is the stored run's time to detection (-1 unknown).
	firstInvalid time.Duration
	// best is the smallest candidate that still failed so far.
	best *Candidate
	// ran counts tries that could be run at all.
	ran int
	log io.Writer
}

// load reads the stored run: its config, schedule and verdict.
func load(runDir string, opts Options) (*shrinker, error) {
	real, err := filepath.EvalSymlinks(runDir) // store/latest moves on
	if err != nil {
		return nil, usagef("no run folder %s: %v", runDir, err)
	}
	if rel, err := filepath.Rel(mustAbs("."), real); err == nil && !strings.HasPrefix(rel, "..") {
		real = rel // commands read better relative, as the user gave it
	}
	s := &shrinker{opts: opts, runDir: real, dir: filepath.Join(real, Dir), began: time.Now()}
	cfg, err := harness.LoadConfig(real)
	if err != nil {
		return nil, usagef("%s is not a stored run: %v", runDir, err)
	}
	s.base = cfg
	var results struct {
		Verdict        checkers.Verdict `json:"verdict"`
		FirstInvalidAt *int64           `json:"first_invalid_at_ns"`
	}
	b, err := os.ReadFile(filepath.Join(real, reports.ResultsFile))
	if err == nil {
		err = json.Unmarshal(b, &results)
	}
	if err != nil {
		return nil, usagef("%s has no readable %s (was the run checked?): %v", runDir, reports.ResultsFile, err)
	}
	if results.Verdict != checkers.Invalid {
		return nil, usagef("%s is %s, not invalid: only a failing run can be shrunk", runDir, results.Verdict)
	}
	s.firstInvalid = -1
	if results.FirstInvalidAt != nil {
		s.firstInvalid = time.Duration(*results.FirstInvalidAt)
	}
	s.orig, err = nemesis.ReadSchedule(filepath.Join(real, nemesis.ScheduleFile))
	if err != nil {
		return nil, usagef("%s has no usable %s (runs record one since schedules exist; repeat the run with its command): %v", runDir, nemesis.ScheduleFile, err)
	}
	if _, err := os.Stat(s.dir); err == nil {
		if !opts.Force {
			return nil, usagef("%s exists from an earlier shrink: remove it, or pass --force to replace it", s.dir)
		}
		if err := os.RemoveAll(s.dir); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func mustAbs(p string) string {
	a, _ := filepath.Abs(p)
	return a
}

// Margins: how far past the first violation the reproduction runs, and how
// far past the last fault and the failure the final main phase does.
const (
	reproduceMargin = 2 * time.Second
	trimMargin      = time.Second
	shortestFault   = 100 * time.Millisecond
	shortestPhase   = time.Second
)

func (s *shrinker) shrink() error {
	s.res.Before = shapeOf(s.orig.Faults, s.base.Time)
	s.progressf("shrink %s: %s, first violation at %s; %s over %s", s.runDir, checkers.Invalid, seconds(s.firstInvalid),
		faultCount(s.orig.Faults), seconds(s.base.Time))

	// 1. Reproduce.
	full := s.candidate("the stored run's schedule", s.orig.Faults, s.base.Time)
	if s.firstInvalid >= 0 {
		if t := roundUp(s.firstInvalid + reproduceMargin); t < s.base.Time {
			c := s.candidate(fmt.Sprintf("the faults before %s (first violation + %s)", seconds(t), seconds(reproduceMargin)), before(s.orig.Faults, t), t)
			if err := s.test(c); err != nil {
				return err
			}
		}
	}
	if s.best == nil {
		if err := s.test(full); err != nil {
			return err
		}
	}
	if s.best == nil {
		if s.ran == 0 {
			return fmt.Errorf("no try of the stored run's schedule could be run: %s", s.lastError())
		}
		return nil
	}

	// 2. No fault at all.
	if len(s.best.faults) > 0 {
		if err := s.test(s.candidate("no fault at all", nil, s.best.MainPhase)); err != nil {
			return err
		}
	}

	// 3. ddmin over nemesis kinds, then over faults.
	var failure error
	tester := func(what func([]nemesis.Scheduled) string) func([]nemesis.Scheduled) bool {
		return func(fs []nemesis.Scheduled) bool {
			if failure != nil || s.ctx.Err() != nil {
				return false
			}
			c := s.candidate(what(fs), fs, s.best.MainPhase)
			if err := s.test(c); err != nil {
				failure = err
			}
			return c.StillFails
		}
	}
	if kinds := kindsOf(s.best.faults); len(kinds) > 1 {
		faults := s.best.faults
		ddmin(kinds, func(ks []string) bool {
			return tester(func(fs []nemesis.Scheduled) string { return "only " + strings.Join(ks, ", ") })(ofKinds(faults, ks))
		})
	}
	if len(s.best.faults) > 1 {
		n := len(s.best.faults)
		ddmin(s.best.faults, tester(func(fs []nemesis.Scheduled) string {
			if len(fs) > 3 {
				return fmt.Sprintf("%d of the %d faults", len(fs), n)
			}
			var parts []string
			for _, f := range fs {
				parts = append(parts, fmt.Sprintf("%s at %.1f s", f.Nemesis, f.Start.Seconds()))
			}
			return strings.Join(parts, " + ")
		}))
	}
	if failure != nil {
		return failure
	}

	// 4. Shorter faults.
	for i := 0; i < len(s.best.faults); i++ {
		for range 2 {
			f := s.best.faults[i]
			d := max(f.Duration/2, shortestFault).Round(time.Millisecond)
			if d >= f.Duration || s.ctx.Err() != nil {
				break
			}
			fs := append([]nemesis.Scheduled(nil), s.best.faults...)
			fs[i].Duration = d
			c := s.candidate(fmt.Sprintf("%s %s: %s instead of %s", f.Nemesis, strings.Join(f.Nodes, ","), seconds(d), seconds(f.Duration)), fs, s.best.MainPhase)
			if err := s.test(c); err != nil {
				return err
			}
			if !c.StillFails {
				break
			}
		}
	}

	// 5. A shorter main phase.
	end := s.best.lastShown()
	for _, f := range s.best.faults {
		end = max(end, f.End())
	}
	if t := max(roundUp(end+trimMargin), shortestPhase); t < s.best.MainPhase && s.ctx.Err() == nil {
		c := s.candidate(fmt.Sprintf("main phase %s instead of %s", seconds(t), seconds(s.best.MainPhase)), before(s.best.faults, t), t)
		if err := s.test(c); err != nil {
			return err
		}
	}

	// 6. Every try of the kept schedule, for an honest count.
	if s.ctx.Err() == nil {
		s.tries(s.best, false)
		s.res.Candidates[s.best.N-1] = *s.best
		s.progressf("kept schedule (candidate %d): %d of %d tries invalid · %s used", s.best.N, s.best.Failed,
			len(s.counted(s.best)), time.Since(s.began).Round(time.Second))
	}
	return nil
}

// candidate makes a candidate of faults in main phase t.
func (s *shrinker) candidate(what string, faults []nemesis.Scheduled, t time.Duration) *Candidate {
	return &Candidate{What: what, Faults: len(faults), MainPhase: t, faults: append([]nemesis.Scheduled(nil), faults...)}
}

// test runs c until its answer is decided and keeps it as the best when it
// still fails. Only a candidate that cannot be run at all is an error.
func (s *shrinker) test(c *Candidate) error {
	if s.ctx.Err() != nil {
		return nil
	}
	c.N = len(s.res.Candidates) + 1
	c.Schedule = filepath.Join(s.dir, "candidates", fmt.Sprintf("%03d.json", c.N))
	sched := &nemesis.Schedule{Seed: s.base.Seed, Nemesis: s.orig.Nemesis, MainPhase: c.MainPhase, Faults: c.faults}
	b, err := sched.Marshal()
	if err == nil {
		err = durable.WriteFile(c.Schedule, b, 0o644)
	}
	if err != nil {
		return err
	}
	s.tries(c, true)
	s.res.Candidates = append(s.res.Candidates, *c)
	var outcome []string
	for _, t := range c.Tries {
		switch {
		case t.CutShort:
			outcome = append(outcome, "cut short")
		case t.Verdict != "":
			outcome = append(outcome, t.Verdict)
		default:
			outcome = append(outcome, "could not run")
		}
	}
	verdict := "passes"
	if c.StillFails {
		verdict = "still fails"
		s.best = c
	}
	if s.ctx.Err() != nil && !c.StillFails {
		verdict = "undecided (out of budget)"
	}
	kept := "none kept yet"
	if s.best != nil {
		kept = fmt.Sprintf("kept: %s, %s", nFaults(len(s.best.faults)), seconds(s.best.MainPhase))
	}
	s.progressf("candidate %d [%s] %s, %s: %s → %s · %s · %s used", c.N, c.What, faultCount(c.faults),
		seconds(c.MainPhase), strings.Join(outcome, ", "), verdict, kept, time.Since(s.began).Round(time.Second))
	for _, t := range c.Tries {
		if t.usage {
			return usagef("a candidate could not be run: %s", t.Error)
		}
	}
	return nil
}

// tries runs c's tries. With early, it stops once the answer is decided
// (Need invalid, or too few left to reach Need), and runs no more at once
// than could still be needed; otherwise it runs every try c lacks.
func (s *shrinker) tries(c *Candidate, early bool) {
	cfg := s.base
	cfg.Schedule, cfg.Time = c.Schedule, c.MainPhase
	cfg.Store = filepath.Join(s.dir, "store")
	cfg.JUnit, cfg.Log, cfg.Progress = "", nil, nil
	var mu sync.Mutex
	var wg sync.WaitGroup
	done := make(chan struct{}, s.opts.Tries)
	inflight := 0
	for {
		mu.Lock()
		counted := len(s.counted(c))
		fails := c.Failed
		needFails := s.opts.Need - fails
		needPasses := s.opts.Tries - s.opts.Need + 1 - (counted - fails)
		decided := needFails <= 0 || needPasses <= 0
		want := s.opts.Tries - counted - inflight
		if early {
			if decided {
				want = 0
			}
			want = min(want, min(needFails, needPasses)-inflight)
		}
		want = min(want, s.opts.Parallel-inflight)
		for ; want > 0 && s.ctx.Err() == nil; want-- {
			inflight++
			wg.Add(1)
			go func() {
				defer wg.Done()
				t := s.run(s.ctx, cfg)
				if s.ctx.Err() != nil {
					t.CutShort = true
				}
				mu.Lock()
				c.Tries = append(c.Tries, t)
				if t.failed() {
					c.Failed++
				}
				if t.Verdict != "" {
					s.ran++
				}
				s.res.Runs++
				mu.Unlock()
				done <- struct{}{}
			}()
		}
		mu.Unlock()
		if inflight == 0 {
			break
		}
		<-done
		inflight--
	}
	wg.Wait()
	c.StillFails = c.Failed >= s.opts.Need
}

// counted are c's tries that count (not cut short by the budget).
func (s *shrinker) counted(c *Candidate) []Try {
	var out []Try
	for _, t := range c.Tries {
		if !t.CutShort {
			out = append(out, t)
		}
	}
	return out
}

func (s *shrinker) lastError() string {
	for i := len(s.res.Candidates) - 1; i >= 0; i-- {
		for _, t := range s.res.Candidates[i].Tries {
			if t.Error != "" {
				return t.Error
			}
		}
	}
	return "no error recorded"
}

// lastShown is the latest time to detection among c's invalid tries.
func (c *Candidate) lastShown() time.Duration {
	var out time.Duration
	for _, t := range c.Tries {
		if t.failed() {
			out = max(out, t.FirstInvalidAt)
		}
	}
	return out
}

// runTry is one try: gate.Run on cfg, and the time to detection from the
// run's results.json.
func runTry(ctx context.Context, cfg harness.Config) Try {
	res, err := gate.Run(ctx, cfg)
	t := Try{Dir: res.Dir, ExitCode: res.ExitCode, Verdict: string(res.Verdict), FirstInvalidAt: -1}
	if err != nil {
		t.Error, t.usage = err.Error(), gate.IsUsage(err)
	}
	if t.Dir != "" {
		var r struct {
			FirstInvalidAt *int64 `json:"first_invalid_at_ns"`
		}
		if b, err := os.ReadFile(filepath.Join(t.Dir, reports.ResultsFile)); err == nil && json.Unmarshal(b, &r) == nil && r.FirstInvalidAt != nil {
			t.FirstInvalidAt = time.Duration(*r.FirstInvalidAt)
		}
	}
	return t
}

// before keeps the faults that start before t.
func before(faults []nemesis.Scheduled, t time.Duration) []nemesis.Scheduled {
	var out []nemesis.Scheduled
	for _, f := range faults {
		if f.Start < t {
			out = append(out, f)
		}
	}
	return out
}

func kindsOf(faults []nemesis.Scheduled) []string {
	return (&nemesis.Schedule{Faults: faults}).Nemeses()
}

func ofKinds(faults []nemesis.Scheduled, kinds []string) []nemesis.Scheduled {
	var out []nemesis.Scheduled
	for _, f := range faults {
		for _, k := range kinds {
			if f.Nemesis == k {
				out = append(out, f)
			}
		}
	}
	return out
}

func shapeOf(faults []nemesis.Scheduled, t time.Duration) Shape {
	sh := Shape{Faults: len(faults), Kinds: (&nemesis.Schedule{Faults: faults}).Kinds(), MainPhase: t}
	if len(faults) <= 10 {
		for _, f := range faults {
			sh.Faulted = append(sh.Faulted, f.Describe())
		}
	}
	return sh
}

func nFaults(n int) string {
	switch n {
	case 0:
		return "no fault"
	case 1:
		return "1 fault"
	}
	return fmt.Sprintf("%d faults", n)
}

func faultCount(faults []nemesis.Scheduled) string {
	switch len(faults) {
	case 0:
		return "no fault"
	case 1:
		return "1 fault (" + faults[0].Nemesis + ")"
	}
	return fmt.Sprintf("%d faults (%s)", len(faults), (&nemesis.Schedule{Faults: faults}).Kinds())
}

// roundUp rounds d up to a tenth of a second, a --time people read.
func roundUp(d time.Duration) time.Duration {
	const step = 100 * time.Millisecond
	return (d + step - 1) / step * step
}

func seconds(d time.Duration) string {
	if d < 0 {
		return "unknown"
	}
	return fmt.Sprintf("%.1f s", d.Seconds())
}

func (s *shrinker) progressf(format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	for _, w := range []io.Writer{s.opts.Progress, s.log} {
		if w != nil {
			fmt.Fprintln(w, line)
		}
	}
}

// write stores the outcome in RUN_DIR/shrink: the kept schedule, the
// summary in words and as JSON, and links it from the stored run's report.
func (s *shrinker) write() error {
	res := s.res
	if s.best != nil && res.Summary == "" {
		res.ExitCode = analysis.ExitInvalid
		res.After = shapeOf(s.best.faults, s.best.MainPhase)
		res.Failed, res.Tries = s.best.Failed, len(s.counted(s.best))
		res.Schedule = filepath.Join(s.dir, nemesis.ScheduleFile)
		sched := &nemesis.Schedule{Seed: s.base.Seed, Nemesis: s.orig.Nemesis, MainPhase: s.best.MainPhase, Faults: s.best.faults}
		b, err := sched.Marshal()
		if err == nil {
			err = durable.WriteFile(res.Schedule, b, 0o644)
		}
		if err != nil {
			return err
		}
		cfg := s.base
		cfg.Schedule, cfg.Time, cfg.JUnit = res.Schedule, s.best.MainPhase, ""
		res.Command = cfg.Command()
		res.Summary = describe(s.best.faults, res.Failed, res.Tries)
	} else if res.Summary == "" {
		res.ExitCode = analysis.ExitUnknown
		res.Summary = "no candidate failed again: the failure did not reproduce in a replay of its schedule"
		switch {
		case res.OutOfTime:
			res.Summary += " before the budget ran out"
		case res.Interrupted:
			res.Summary += " before it was interrupted"
		}
	}
	var txt strings.Builder
	fmt.Fprintln(&txt, res.Summary)
	fmt.Fprintln(&txt)
	if len(res.Command) > 0 {
		fmt.Fprintf(&txt, "replay it:\n  %s\n\n", harness.ShellLine(res.Command))
		fmt.Fprintf(&txt, "shrunk from %s over %s to %s over %s", faultCount(s.orig.Faults), seconds(s.base.Time),
			faultCount(s.best.faults), seconds(s.best.MainPhase))
	} else {
		fmt.Fprintf(&txt, "the stored run had %s over %s", faultCount(s.orig.Faults), seconds(s.base.Time))
	}
	fmt.Fprintf(&txt, " in %s: %d candidates, %d runs (tries %d, need %d", res.Took.Round(time.Second), len(res.Candidates), res.Runs, s.opts.Tries, s.opts.Need)
	switch {
	case res.OutOfTime:
		fmt.Fprintf(&txt, "; the budget of %s ran out", s.opts.Budget)
	case res.Interrupted:
		fmt.Fprintf(&txt, "; interrupted")
	}
	fmt.Fprintf(&txt, ").\nEvery run is a run folder under %s; each candidate's schedule is in %s.\n",
		filepath.Join(s.dir, "store"), filepath.Join(s.dir, "candidates"))
	if err := durable.WriteFile(filepath.Join(s.dir, "summary.txt"), []byte(txt.String()), 0o644); err != nil {
		return err
	}
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	if err := durable.WriteFile(filepath.Join(s.dir, "summary.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	s.progressf("%s", res.Summary)
	if len(res.Command) > 0 {
		s.progressf("replay it: %s", harness.ShellLine(res.Command))
	}
	// The stored run's results.json and report link the summary.
	if err := reports.Rerender(context.WithoutCancel(s.ctx), s.runDir); err != nil {
		s.progressf("the stored run's report could not be updated to link the shrink: %v", err)
	}
	return nil
}

// describe is the kept schedule in words.
func describe(faults []nemesis.Scheduled, failed, tries int) string {
	of := fmt.Sprintf("(%d of %d tries)", failed, tries)
	if len(faults) == 0 {
		return "fails with no fault at all " + of + ": the bug needs none"
	}
	sorted := append([]nemesis.Scheduled(nil), faults...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Start < sorted[j].Start })
	parts := make([]string, len(sorted))
	for i, f := range sorted {
		parts[i] = f.Describe()
	}
	return "fails with just: " + strings.Join(parts, "; ") + " " + of
}
