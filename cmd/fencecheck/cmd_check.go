package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/fencecheck/fencecheck/analysis"
	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/durable"
	"github.com/fencecheck/fencecheck/history"
	"github.com/fencecheck/fencecheck/reports"
)

type checkFlags struct {
	equal, scope, report string
	authenticated        bool
	checkerFlags
}

// checkerFlags are the checker settings shared by check and report; their
// defaults are the analysis's.
type checkerFlags struct {
	checker string
	timeout time.Duration
	minOps  int
	ttl     time.Duration
	// requireCoverage is --require-coverage, as fencecheck test takes it.
	requireCoverage bool
	fl              *pflag.FlagSet
}

func (c *checkerFlags) register(fl *pflag.FlagSet) {
	c.fl = fl
	fl.StringVar(&c.checker, "checker", analysis.DefaultChecker, "checkers beside the direct checks: "+analysis.CheckerChoices()+", or a comma-separated list of them")
	fl.DurationVar(&c.timeout, "timeout", analysis.DefaultTimeout, "time Porcupine may search, over the whole history")
	fl.IntVar(&c.minOps, "min-ops", analysis.DefaultMinOps, "fewest ok/fail operations for a verdict other than unknown, as fencecheck test and the gate ask (0: no minimum, any history judged as it is)")
	fl.DurationVar(&c.ttl, "ttl", analysis.DefaultTTL, "lease length for lease-overlap analysis when events carry none")
	fl.BoolVar(&c.requireCoverage, "require-coverage", false, "a valid history that never provoked a failure class that applies (docs/coverage.md) is unknown, as fencecheck test --require-coverage judges it")
}

func (c *checkerFlags) validate() error {
	switch {
	case c.minOps < 0:
		return fmt.Errorf("--min-ops must be 0 (no minimum) or more, got %d", c.minOps)
	case c.timeout <= 0:
		return fmt.Errorf("--timeout must be positive, got %s", c.timeout)
	case c.ttl <= 0:
		return fmt.Errorf("--ttl must be positive, got %s", c.ttl)
	}
	if _, err := analysis.NormalizeChecker(c.checker); err != nil {
		return fmt.Errorf("--checker %w", err)
	}
	return nil
}

// apply sets the options these flags give: all of them, or (onlyChanged)
// only those given on the command line, over a stored run's own.
func (c *checkerFlags) apply(o *analysis.Options, onlyChanged bool) {
	set := func(name string) bool { return !onlyChanged || c.fl.Changed(name) }
	if set("checker") {
		o.Checker = c.checker
	}
	if set("timeout") {
		o.Timeout = c.timeout
	}
	if set("min-ops") {
		o.MinOps = c.minOps
	}
	if set("ttl") {
		o.TTL = c.ttl
	}
	if set("require-coverage") {
		o.RequireCoverage = c.requireCoverage
	}
}

func init() {
	f := &checkFlags{}
	cmd := &cobra.Command{
		Use:   "check [flags] HISTORY.jsonl|RUN_DIR|-",
		Short: "Check a recorded history (from fencecheck or any tool writing the same JSON Lines)",
		Long: `check reads a history in fencecheck's JSON Lines format and decides whether it
is linearizable for a fenced register (per key) and an issuer (per lock), with
Porcupine and the specialised checker (given a run folder, its
history.jsonl; given -, standard input). It prints the verdict and every anomaly
in words, each with the fault that explains it. With --report DIR it also
writes results.json, report.html and junit.xml there.

A history recorded by fencecheck says what its run set out to do and how far
it got: a requested fault that never took effect, or a run that did not
finish, makes a valid history unknown. So does a history with fewer than
` + fmt.Sprint(analysis.DefaultMinOps) + ` operations that ended ok or fail, an empty one included (--min-ops sets
the minimum; 0 judges any history as it is). Notes on the history (too few
operations, a last line cut short and skipped) are printed with the verdict.

Exit codes: 0 valid, 1 invalid, 2 unknown, 3 could not run, 64 usage error
(including a malformed history, reported with its line number).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return runCheck(args[0], f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.equal, "equal", "reject", "what the resource does with a token equal to its high-water mark: reject (strict) or accept (reentrant)")
	fl.StringVar(&f.scope, "scope", "per-lock", "token scope: per-lock or global")
	fl.BoolVar(&f.authenticated, "authenticated", false, "the target seals tokens: an accepted unsealed token is a violation")
	f.checkerFlags.register(fl)
	fl.StringVar(&f.report, "report", "", "write results.json, report.html and junit.xml into this folder")
	rootCmd.AddCommand(cmd)
}

func (f *checkFlags) semantics() (checkers.Semantics, error) {
	sem := checkers.Semantics{Equal: checkers.Equal(f.equal), Scope: checkers.Scope(f.scope), Authenticated: f.authenticated}
	if sem.Equal != checkers.EqualReject && sem.Equal != checkers.EqualAccept {
		return sem, fmt.Errorf("--equal must be reject or accept, got %q", f.equal)
	}
	if sem.Scope != checkers.ScopePerLock && sem.Scope != checkers.ScopeGlobal {
		return sem, fmt.Errorf("--scope must be per-lock or global, got %q", f.scope)
	}
	return sem, f.checkerFlags.validate()
}

func runCheck(path string, f *checkFlags) error {
	sem, err := f.semantics()
	if err != nil {
		return usageErrorf("%v", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	opts := analysis.Options{Semantics: sem, Progress: os.Stderr}
	f.checkerFlags.apply(&opts, false)
	name := path
	var res *analysis.Result
	if path == "-" {
		name = "standard input"
		path, res, err = checkStdin(ctx, f.report, opts)
	} else {
		path, err = reports.HistoryOf(path)
		switch {
		case errors.Is(err, reports.ErrNoHistory):
			return exitWith(analysis.ExitCannot, err)
		case errors.Is(err, fs.ErrNotExist):
			return usageErrorf("%v", strings.TrimSuffix(err.Error(), ": "+fs.ErrNotExist.Error()))
		}
		name = path
		res, err = analysis.CheckFile(ctx, path, opts)
	}
	if err != nil {
		var pe *history.ParseError
		if errors.As(err, &pe) || errors.Is(err, os.ErrNotExist) {
			return usageErrorf("%s: %v", name, err)
		}
		return exitWith(analysis.ExitCannot, fmt.Errorf("%s: %w", name, err))
	}
	if f.report != "" {
		if _, err := reports.WriteFrom(f.report, path, reports.RunInfo{Target: "history " + name}, res); err != nil {
			return exitWith(analysis.ExitCannot, err)
		}
	}
	printSummary(os.Stdout, res, f.report)
	return exitWith(res.ExitCode, nil)
}

// checkStdin checks a history read from standard input ("-"). With a report
// folder the history is kept there as it streams by (the report links it),
// and checked from that file.
func checkStdin(ctx context.Context, reportDir string, opts analysis.Options) (string, *analysis.Result, error) {
	if reportDir == "" {
		res, err := analysis.CheckReader(ctx, os.Stdin, opts)
		return "", res, err
	}
	if err := os.MkdirAll(reportDir, 0o755); err != nil {
		return "", nil, err
	}
	path := filepath.Join(reportDir, reports.HistoryFile)
	if err := durable.WriteFileFrom(path, 0o644, func(w io.Writer) error {
		_, err := io.Copy(w, os.Stdin)
		return err
	}); err != nil {
		return "", nil, fmt.Errorf("keeping the history in %s: %w", reportDir, err)
	}
	res, err := analysis.CheckFile(ctx, path, opts)
	return path, res, err
}
