package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/fencecheck/fencecheck/analysis"
	"github.com/fencecheck/fencecheck/harness"
	"github.com/fencecheck/fencecheck/history"
	"github.com/fencecheck/fencecheck/models"
	"github.com/fencecheck/fencecheck/reports"
)

type checkFlags struct {
	equal, scope, report string
	authenticated        bool
	checkerFlags
}

// checkerFlags are the checker settings shared by check and report.
type checkerFlags struct {
	checker string
	timeout time.Duration
	minOps  int
	ttl     time.Duration
}

func (c *checkerFlags) register(fl *pflag.FlagSet) {
	fl.StringVar(&c.checker, "checker", "both", "checker: fast, porcupine or both")
	fl.DurationVar(&c.timeout, "timeout", 30*time.Second, "time Porcupine may search, per model")
	fl.IntVar(&c.minOps, "min-ops", 10, "fewest ok/fail operations for a verdict other than unknown")
	fl.DurationVar(&c.ttl, "ttl", time.Second, "lease length for lease-overlap analysis when events carry none")
}

func (c *checkerFlags) validate() error {
	switch c.checker {
	case "fast", "porcupine", "both":
		return nil
	}
	return fmt.Errorf("--checker must be fast, porcupine or both, got %q", c.checker)
}

func (c *checkerFlags) config() harness.Config {
	return harness.Config{Checker: c.checker, CheckTimeout: c.timeout, MinOps: c.minOps, TTL: c.ttl}
}

func init() {
	f := &checkFlags{}
	cmd := &cobra.Command{
		Use:   "check [flags] HISTORY.jsonl",
		Short: "Check a recorded history (from fencecheck or any tool writing the same JSON Lines)",
		Long: `check reads a history in fencecheck's JSON Lines format and decides whether it
is linearizable for a fenced register (per key) and an issuer (per lock), with
Porcupine and the specialised checker. It prints the verdict and every anomaly
in words. With --report DIR it also writes results.json, report.html and
junit.xml there.

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

func (f *checkFlags) semantics() (models.Semantics, error) {
	sem := models.Semantics{Equal: models.Equal(f.equal), Scope: models.Scope(f.scope), Authenticated: f.authenticated}
	if sem.Equal != models.EqualReject && sem.Equal != models.EqualAccept {
		return sem, fmt.Errorf("--equal must be reject or accept, got %q", f.equal)
	}
	if sem.Scope != models.ScopePerLock && sem.Scope != models.ScopeGlobal {
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
	check, rep, err := harness.CheckFile(ctx, path, f.report, sem, f.config(), os.Stderr)
	if err != nil {
		var pe *history.ParseError
		if errors.As(err, &pe) || errors.Is(err, os.ErrNotExist) {
			return usageErrorf("%s: %v", path, err)
		}
		return exitWith(analysis.ExitCannot, fmt.Errorf("%s: %w", path, err))
	}
	if f.report != "" {
		info := reports.RunInfo{Target: "history " + path, Semantics: &sem}
		if _, err := reports.WriteFrom(f.report, path, info, check); err != nil {
			return exitWith(analysis.ExitCannot, err)
		}
	}
	dir := ""
	if f.report != "" {
		dir = f.report
	}
	printSummary(os.Stdout, rep, rep.Verdict, nil, dir)
	return exitWith(rep.ExitCode(), nil)
}
