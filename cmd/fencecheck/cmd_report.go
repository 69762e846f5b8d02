package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fencecheck/fencecheck/analysis"
	"github.com/fencecheck/fencecheck/reports"
)

type reportFlags struct {
	stored bool
	checkerFlags
}

func init() {
	f := &reportFlags{}
	cmd := &cobra.Command{
		Use:   "report [flags] RUN_DIR",
		Short: "Re-check a stored run and regenerate results.json, report.html and junit.xml",
		Long: `report checks a stored run's history.jsonl again, with the semantics and check
settings the run was checked with (from results.json, or config.json for a run
killed before its check; flags given here override them), and writes
results.json, report.html, junit.xml and Porcupine's visualizations again. The
run's own events in the history (what it requested, whether it completed) are
judged as the run judged them, so the verdict is the run's. Use it after
upgrading fencecheck, or on a run that was killed before its check. With
--stored the checkers do not run again: their stored results are combined and
rendered anew (fast).

A damaged history (a line that is not an event) is reported, with the damage
noted and the verdict unknown.

RUN_DIR is a run folder such as store/memory/20261130T064701.123Z or
store/latest. Exit codes: 0 valid, 1 invalid, 2 unknown, 3 could not run,
64 usage error.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return runReport(args[0], f) },
	}
	fl := cmd.Flags()
	fl.BoolVar(&f.stored, "stored", false, "combine and render the stored checker results instead of checking again")
	f.checkerFlags.register(fl)
	rootCmd.AddCommand(cmd)
}

func runReport(dir string, f *reportFlags) error {
	if err := f.checkerFlags.validate(); err != nil {
		return usageErrorf("%v", err)
	}
	if _, err := reports.HistoryOf(dir); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return usageErrorf("%v", strings.TrimSuffix(err.Error(), ": "+fs.ErrNotExist.Error()))
		}
		return exitWith(analysis.ExitCannot, err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	res, err := recheck(ctx, dir, f)
	if err != nil {
		return exitWith(analysis.ExitCannot, err)
	}
	printSummary(os.Stdout, res, dir)
	return exitWith(res.ExitCode, nil)
}

// recheck checks a stored run again as the run checked it and rewrites its
// report.
func recheck(ctx context.Context, dir string, f *reportFlags) (*analysis.Result, error) {
	st, err := reports.LoadRun(dir)
	if err != nil {
		return nil, err
	}
	opts := st.Options
	f.checkerFlags.apply(&opts, true)
	opts.Lenient, opts.Progress = true, os.Stderr
	if f.stored {
		if st.Checks == nil {
			return nil, fmt.Errorf("%s has no %s to re-render; re-check the history instead (without --stored)", dir, reports.ResultsFile)
		}
		opts.Checkers = []analysis.Checker{analysis.Replay(st.Checks)}
	}
	path := filepath.Join(dir, reports.HistoryFile)
	// The check and the report under a soft memory limit sized from the
	// history, as a run's own (harness.Finish, docs/endtoend.md).
	if st, err := os.Stat(path); err == nil {
		defer analysis.LimitMemory(st.Size())()
	}
	res, err := analysis.CheckFile(ctx, path, opts)
	if err != nil {
		return nil, fmt.Errorf("check history: %w", err)
	}
	if _, err := reports.Write(dir, st.Info, res); err != nil {
		return res, fmt.Errorf("write report: %w", err)
	}
	return res, nil
}
