// Package gate runs fencecheck from Go: one fault-injected run against a
// target, checked and reported, with the release gate's answer as an exit
// code. Run is the one run path: `fencecheck test` is Run with the config its
// flags set. Projects gate their own fencing system from `go test` or a small
// Go program in CI:
//
//	res, err := gate.Run(ctx, gate.Config{
//		Target:  "spec:deploy/fencecheck.json",
//		Time:    30 * time.Second,
//		Nemesis: "all",
//	})
//	if !res.Passed() { ... } // err says why it could not run
//
// A run passes (analysis.ExitValid) only when the checkers find the history
// valid AND the run did real work: at least MinOps operations ended ok or
// fail, and every nemesis named in Nemesis took effect. Otherwise the answer
// is unknown (analysis.ExitUnknown), with the reasons in Result.Reasons.
package gate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/fencecheck/fencecheck/analysis"
	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/durable"
	"github.com/fencecheck/fencecheck/harness"
	"github.com/fencecheck/fencecheck/harness/sweep"
	"github.com/fencecheck/fencecheck/targets"
)

// Config is one run's settings: harness.Config, the one config of a run
// (target and its options, workload, faults, checkers, output). Zero fields
// take the defaults of `fencecheck test` (harness.Default).
type Config = harness.Config

// Result is the gate's answer.
type Result struct {
	// ExitCode is one of analysis.ExitValid, ExitInvalid, ExitUnknown,
	// ExitCannot or ExitUsage: the code `fencecheck test` exits with.
	ExitCode int
	// Verdict is the checked verdict after the gate (valid, invalid,
	// unknown); empty when the run could not be carried out.
	Verdict checkers.Verdict
	// Reasons say why a valid history still gives unknown.
	Reasons []string
	// Anomalies are the violations found, in words.
	Anomalies []string
	// Faults counts how often each nemesis started; NotApplicable lists
	// the requested ones that could not act on the target, with why.
	Faults        map[string]int
	NotApplicable map[string]string
	// Dir is the run's folder (history, report.html, junit.xml, logs).
	Dir  string
	Seed uint64
	// Command is the command line that repeats the run.
	Command []string
	// Run is the finished run (history path, nemesis counts, problems);
	// Checked the checked and reported run: its analysis (per-checker
	// results, anomalies with their causes, fault periods, counts). Both
	// nil when the run could not be carried out.
	Run     *harness.Run
	Checked *harness.Verdict
}

// Passed reports whether the gate lets the release through.
func (r *Result) Passed() bool { return r != nil && r.ExitCode == analysis.ExitValid }

// Summary is one line for logs and test failures.
func (r *Result) Summary() string {
	if r.Verdict == "" {
		return fmt.Sprintf("exit %d: the run could not be carried out", r.ExitCode)
	}
	s := fmt.Sprintf("exit %d: %s", r.ExitCode, r.Verdict)
	if len(r.Reasons) > 0 {
		s += " (" + strings.Join(r.Reasons, "; ") + ")"
	}
	if len(r.Anomalies) > 0 {
		s += fmt.Sprintf("; %d anomalies, first: %s", len(r.Anomalies), r.Anomalies[0])
	}
	if r.Dir != "" {
		s += "; report " + filepath.Join(r.Dir, "report.html")
	}
	return s
}

// usageError is a config no run can use (unknown target, bad spec, bad
// settings): exit 64.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// IsUsage reports whether err is a configuration error (analysis.ExitUsage).
func IsUsage(err error) bool {
	var u *usageError
	return errors.As(err, &u)
}

// Run carries out one run and gates it: targets.New, harness.Execute (setup,
// main phase, heal, recovery, final reads), harness.Finish (check, gate,
// report files), and the JUnit copy. The error is nil whenever the run was
// carried out, whatever the verdict; otherwise it says why not, and
// Result.ExitCode is ExitCannot or ExitUsage. A spec target runs the
// conformance preflight first: a system that breaks the contract gives
// ExitCannot with every deviation in the error. When ctx ends during the main
// phase, the run is cut short: the faults are healed, the final reads made,
// and the shorter history is checked and reported; when cfg.Abort is closed
// too, the run ends at once (torn down, no report: harness.ErrAborted, exit
// code 3). With cfg.Schedule the
// run replays that schedule file's faults (a file that does not parse, or
// names nodes or nemeses the target lacks, is a usage error).
func Run(ctx context.Context, cfg Config) (*Result, error) {
	n, err := cfg.Normalize()
	cfg = n.Config
	res := &Result{ExitCode: analysis.ExitUsage, Seed: cfg.Seed, Command: cfg.Command()}
	if err != nil {
		return res, &usageError{err}
	}
	target, err := targets.New(cfg)
	if err != nil {
		return res, &usageError{err}
	}
	res.ExitCode = analysis.ExitCannot
	sweepLeftovers(cfg.Log, cfg.Store)
	run, err := n.Execute(ctx, target)
	if run != nil {
		res.Dir = run.Dir
	}
	if err != nil {
		if !errors.Is(err, harness.ErrCannotRun) {
			res.ExitCode = analysis.ExitUsage
			return res, &usageError{err}
		}
		return res, err
	}
	res.Run = run
	// A run cut short (ctx done) was still healed and read; it is checked
	// and reported too, and its history says it was cut short.
	logf(cfg, "check: running the checkers")
	fctx, fcancel := harness.UntilAbort(ctx, cfg.Abort)
	defer fcancel()
	v, err := harness.Finish(fctx, run, target.Semantics())
	if err != nil {
		return res, err
	}
	res.Checked = v
	res.ExitCode, res.Verdict, res.Reasons = v.ExitCode, v.Verdict, v.GateReasons
	for _, a := range v.Anomalies() {
		if !a.Finding {
			res.Anomalies = append(res.Anomalies, a.Text)
		}
	}
	res.Faults = map[string]int{}
	for n, c := range run.Nemeses {
		res.Faults[n] = c.Started
	}
	res.NotApplicable = run.NotApplicable
	if cfg.JUnit != "" {
		if err := durable.Copy(filepath.Join(run.Dir, "junit.xml"), cfg.JUnit, 0o644); err != nil {
			res.ExitCode = analysis.ExitCannot
			return res, fmt.Errorf("%w: --junit: %v", harness.ErrCannotRun, err)
		}
	}
	return res, nil
}

func logf(cfg Config, format string, args ...any) {
	if cfg.Log != nil {
		fmt.Fprintf(cfg.Log, format+"\n", args...)
	}
}

// sweepLeftovers removes what dead runs left on this machine (their dead
// layers, their folders) before a run starts: a run killed at any moment
// must not trip or hang the next one. It says what it removed on log.
func sweepLeftovers(log io.Writer, store string) {
	if log == nil {
		log = io.Discard
	}
	swept, err := sweep.Leftovers(store)
	for _, l := range swept.Lines() {
		fmt.Fprintf(log, "sweep: %s (left by a run that is gone)\n", l)
	}
	if err != nil {
		fmt.Fprintf(log, "sweep: warning: %v\n", err)
	}
}
