// Package gate runs fencecheck from Go: one fault-injected run against a
// target, checked and reported, with the release gate's answer as an exit
// code. It is what `fencecheck test` does, for projects that gate their own
// fencing system from `go test` or a small Go program in CI:
//
//	res, err := gate.Run(ctx, gate.Config{
//		Target:  "spec:deploy/fencecheck.json",
//		Time:    30 * time.Second,
//		Nemesis: "all",
//	})
//	if res.ExitCode != gate.ExitValid { ... } // err says why it could not run
//
// A run passes (ExitValid) only when the checkers find the history valid
// AND the run did real work: at least MinOps operations ended ok or fail,
// and every nemesis named in Nemesis took effect. Otherwise the answer is
// unknown (ExitUnknown), with the reasons in Result.Reasons.
package gate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/fencecheck/fencecheck/harness"
	"github.com/fencecheck/fencecheck/models"
	"github.com/fencecheck/fencecheck/targets"
)

// Exit codes: the same as the fencecheck command's, so a Go gate and a
// shell gate agree.
const (
	ExitValid   = 0
	ExitInvalid = 1
	ExitUnknown = 2
	ExitCannot  = 3
	ExitUsage   = 64
)

// Config is one gated run. Zero fields take fencecheck test's defaults.
type Config struct {
	// Target is "memory", "etcd", "redis", ... or "spec:PATH".
	Target string
	// Bugs and SealKey configure the memory reference (memory only).
	Bugs    []string
	SealKey string
	// Time is the main phase (default 30 s); Nemesis the faults: a
	// comma-separated list, "all" (every one that applies, except
	// restart-wipe; the default) or "none".
	Time    time.Duration
	Nemesis string
	// Seed reproduces a run (0: one from the clock, kept in Result.Seed).
	Seed uint64
	// MinOps is the fewest operations that must end ok or fail for a
	// verdict other than unknown (default 10).
	MinOps int
	// Concurrency (writers), Readers and Keys shape the workload
	// (defaults 5, 2, 3).
	Concurrency, Readers, Keys int
	// Store is the run store folder (default "store").
	Store string
	// JUnit, when set, is where the JUnit XML file is copied.
	JUnit string
	// Log receives phase messages, Progress live progress lines (nil:
	// none).
	Log, Progress io.Writer
	// Tune adjusts any other setting of the run before it starts.
	Tune func(*harness.Config)
	_    struct{}
}

// Result is the gate's answer.
type Result struct {
	// ExitCode is ExitValid, ExitInvalid, ExitUnknown, ExitCannot or
	// ExitUsage.
	ExitCode int
	// Verdict is the checked verdict after the gate (valid, invalid,
	// unknown); empty when the run could not be carried out.
	Verdict models.Verdict
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
	// Report is the checkers' full report.
	Report *models.Report
}

// Passed reports whether the gate lets the release through.
func (r *Result) Passed() bool { return r != nil && r.ExitCode == ExitValid }

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

// IsUsage reports whether err is a configuration error (ExitUsage).
func IsUsage(err error) bool {
	var u *usageError
	return errors.As(err, &u)
}

// Run carries out one run and gates it. The error is nil whenever the run
// was carried out, whatever the verdict; otherwise it says why not, and
// Result.ExitCode is ExitCannot or ExitUsage. A spec target runs the
// conformance preflight first: a system that breaks the contract gives
// ExitCannot with every deviation in the error.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	hc := harness.Config{
		Target: cfg.Target, Time: cfg.Time, Nemesis: cfg.Nemesis, Seed: cfg.Seed, MinOps: cfg.MinOps,
		Concurrency: cfg.Concurrency, Readers: cfg.Readers, Keys: cfg.Keys, Store: cfg.Store,
		Log: cfg.Log, Progress: cfg.Progress,
	}
	if hc.Target == "" {
		hc.Target = "memory"
	}
	if hc.Nemesis == "" {
		hc.Nemesis = "all"
	}
	if hc.Readers == 0 {
		hc.Readers = 2
	}
	if hc.Seed == 0 {
		hc.Seed = uint64(time.Now().UnixNano() & 0x7fffffff)
	}
	hc.Options = map[string]any{}
	if len(cfg.Bugs) > 0 {
		hc.Options["bugs"] = cfg.Bugs
	}
	if cfg.SealKey != "" {
		hc.Options["sealed"] = true
	}
	if cfg.Tune != nil {
		cfg.Tune(&hc)
	}
	hc.Defaults()
	hc.Command = command(hc, cfg)
	res := &Result{ExitCode: ExitUsage, Seed: hc.Seed}
	if err := hc.Validate(); err != nil {
		return res, &usageError{err}
	}
	target, err := targets.New(hc.Target, targets.Options{Bugs: cfg.Bugs, SealKey: cfg.SealKey, Log: cfg.Log})
	if err != nil {
		return res, &usageError{err}
	}
	res.ExitCode = ExitCannot
	run, err := harness.Execute(ctx, hc, target)
	if run != nil {
		res.Dir = run.Dir
	}
	if err != nil {
		if !errors.Is(err, harness.ErrCannotRun) {
			res.ExitCode = ExitUsage
			return res, &usageError{err}
		}
		return res, err
	}
	v, err := harness.Finish(ctx, run, target.Semantics())
	if err != nil {
		return res, err
	}
	res.ExitCode, res.Verdict, res.Reasons, res.Report = v.ExitCode, v.Verdict, v.GateReasons, v.Report
	for _, a := range v.Report.Anomalies() {
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
		if err := copyFile(filepath.Join(run.Dir, "junit.xml"), cfg.JUnit); err != nil {
			res.ExitCode = ExitCannot
			return res, fmt.Errorf("%w: junit: %v", harness.ErrCannotRun, err)
		}
	}
	return res, nil
}

// command is the fencecheck command line that repeats the run.
func command(hc harness.Config, cfg Config) []string {
	out := []string{"fencecheck", "test", "--target=" + hc.Target, "--time=" + hc.Time.String(),
		"--nemesis=" + hc.Nemesis, fmt.Sprintf("--concurrency=%d", hc.Concurrency),
		fmt.Sprintf("--readers=%d", hc.Readers), fmt.Sprintf("--keys=%d", hc.Keys),
		"--ttl=" + hc.TTL.String(), "--op-timeout=" + hc.OpTimeout.String(),
		fmt.Sprintf("--min-ops=%d", hc.MinOps), "--store=" + hc.Store}
	bugs := append([]string(nil), cfg.Bugs...)
	sort.Strings(bugs)
	if len(bugs) > 0 {
		out = append(out, "--bug="+strings.Join(bugs, ","))
	}
	if hc.Forge {
		out = append(out, "--forge")
	}
	return append(out, fmt.Sprintf("--seed=%d", hc.Seed))
}

func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o644)
}
