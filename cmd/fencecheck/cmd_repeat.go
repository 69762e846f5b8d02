package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/fencecheck/fencecheck/analysis"
	"github.com/fencecheck/fencecheck/gate"
	"github.com/fencecheck/fencecheck/harness"
	"github.com/fencecheck/fencecheck/history"
)

// repeated is one run of `fencecheck test --repeat N`.
type repeated struct {
	seed    uint64
	code    int
	verdict string // valid, invalid, unknown, or "could not run"
	took    time.Duration
	dir     string
	command []string
	why     string // the first anomaly, the gate's reasons, or the error
}

// runRepeat runs the config N times, seeds one after another from its seed
// (drawn once when it has none), each a whole run of its own (folder,
// report, verdict), as Jepsen's test count and etcd's --count do. It stops
// after the first invalid run with --fail-fast, and after the run that a
// first interrupt cut short. It ends with every run's verdict, the
// detection rate with its 95 % Wilson interval, and the reproduce line of
// each run that did not pass; the exit code is the worst verdict
// (analysis.WorstExit: invalid, then could not run, then unknown, then
// valid).
func runRepeat(f *testFlags) error {
	cfg := f.cfg
	cfg.Log = history.NewPrintableWriter(os.Stderr)
	if !f.quiet {
		cfg.Progress = os.Stderr
	}
	if cfg.Seed == 0 {
		cfg.Seed = cfg.WithDefaults().Seed
	}
	ctx, abort, stop := interrupts(os.Stderr)
	defer stop()
	cfg.Abort = abort
	var runs []repeated
	for i := range f.repeat {
		c := cfg
		c.Seed = cfg.Seed + uint64(i)
		fmt.Fprintf(os.Stderr, "\n== run %d of %d: seed %d\n", i+1, f.repeat, c.Seed)
		start := time.Now()
		res, err := gate.Run(ctx, c)
		if gate.IsUsage(err) {
			return exitWith(res.ExitCode, err) // every run of this config would be refused
		}
		r := repeated{seed: c.Seed, code: res.ExitCode, verdict: string(res.Verdict), took: time.Since(start),
			dir: res.Dir, command: res.Command}
		switch {
		case err != nil:
			r.verdict, r.why = "could not run", err.Error()
		case len(res.Anomalies) > 0:
			r.why = fmt.Sprintf("%d anomalies, first: %s", len(res.Anomalies), res.Anomalies[0])
		case len(res.Reasons) > 0:
			r.why = strings.Join(res.Reasons, "; ")
		}
		runs = append(runs, r)
		fmt.Fprintf(os.Stdout, "run %d of %d, seed %d: %s (exit %d) in %s%s\n", i+1, f.repeat, r.seed, r.verdict, r.code,
			r.took.Truncate(100*time.Millisecond), clip(r.why))
		if errors.Is(err, harness.ErrAborted) || harness.Aborted(abort) {
			break
		}
		if ctx.Err() != nil {
			fmt.Fprintf(os.Stderr, "fencecheck: interrupted: no more runs\n")
			break
		}
		if f.failFast && r.code == analysis.ExitInvalid {
			fmt.Fprintf(os.Stderr, "fencecheck: --fail-fast: stopping at the first invalid run\n")
			break
		}
	}
	printRepeat(os.Stdout, runs, f.repeat)
	return exitWith(worstOf(runs), nil)
}

// worstOf is the worst exit code of runs (analysis.WorstExit).
func worstOf(runs []repeated) int {
	codes := make([]int, len(runs))
	for i, r := range runs {
		codes[i] = r.code
	}
	return analysis.WorstExit(codes...)
}

// printRepeat prints the end of a repeat: each run's verdict, the counts,
// the detection rate and the reproduce lines of the runs that did not pass.
func printRepeat(w io.Writer, runs []repeated, asked int) {
	fmt.Fprintf(w, "\nrepeat: %d of %d runs done\n", len(runs), asked)
	counts := map[string]int{}
	decided := 0
	for _, r := range runs {
		fmt.Fprintf(w, "  seed %-12d %-13s exit %d  %6.1f s  %s\n", r.seed, r.verdict, r.code, r.took.Seconds(), r.dir)
		counts[r.verdict]++
		if r.code != analysis.ExitCannot {
			decided++
		}
	}
	var parts []string
	for _, v := range []string{"invalid", "could not run", "unknown", "valid"} {
		if counts[v] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", counts[v], v))
		}
	}
	fmt.Fprintf(w, "verdicts: %s\n", strings.Join(parts, ", "))
	rate := analysis.DetectionRate(counts["invalid"], decided)
	fmt.Fprintf(w, "detection rate: %d of %d runs with a verdict invalid", rate.K, rate.N)
	if rate.N > 0 {
		fmt.Fprintf(w, ": %.0f%% (95%% Wilson interval %.0f%%-%.0f%%)", 100*float64(rate.K)/float64(rate.N), 100*rate.Low, 100*rate.High)
	}
	fmt.Fprintln(w)
	for _, r := range runs {
		if r.code == analysis.ExitValid {
			continue
		}
		fmt.Fprintf(w, "%s (seed %d)%s\n  %s\n", r.verdict, r.seed, clip(r.why), harness.ShellLine(r.command))
	}
	fmt.Fprintf(w, "exit code %d: the worst verdict (invalid 1, then could not run 3, then unknown 2, then valid 0)\n", worstOf(runs))
}

// clip is a run's reason for a one-line summary: ": " and at most 160
// characters of it, escaped for the terminal.
func clip(why string) string {
	if why == "" {
		return ""
	}
	why = strings.ReplaceAll(why, "\n", " ")
	if r := []rune(why); len(r) > 160 {
		why = string(r[:157]) + "..."
	}
	return ": " + history.Printable(why)
}
