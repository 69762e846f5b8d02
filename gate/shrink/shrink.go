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
//
// shrink.go holds the steps, ddmin.go the delta debugging, candidate.go the
// running of a candidate's tries, summary.go what a shrink writes and says.
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
	"strings"
	"time"

	"github.com/fencecheck/fencecheck/analysis"
	"github.com/fencecheck/fencecheck/checkers"
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
