package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/fencecheck/fencecheck/analysis"
	"github.com/fencecheck/fencecheck/harness"
	"github.com/fencecheck/fencecheck/models"
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
		Short: "Regenerate results.json, report.html and junit.xml of a stored run",
		Long: `report re-checks a stored run's history.jsonl with the run's declared semantics
(from results.json or config.json) and writes results.json, report.html,
junit.xml and Porcupine's visualizations again. Use it after upgrading
fencecheck, or on a run that was killed before its check. With --stored it
only re-renders the stored checker results (fast, no checking).

RUN_DIR is a run folder such as store/memory/20261130T064701.123Z or
store/latest. Exit codes: 0 valid, 1 invalid, 2 unknown, 3 could not run,
64 usage error.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return runReport(args[0], f) },
	}
	fl := cmd.Flags()
	fl.BoolVar(&f.stored, "stored", false, "re-render the stored checker results instead of checking again")
	f.checkerFlags.register(fl)
	rootCmd.AddCommand(cmd)
}

func runReport(dir string, f *reportFlags) error {
	if _, err := os.Stat(filepath.Join(dir, reports.HistoryFile)); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return usageErrorf("%s is not a run folder: it has no %s", dir, reports.HistoryFile)
		}
		return exitWith(analysis.ExitCannot, err)
	}
	if err := f.checkerFlags.validate(); err != nil {
		return usageErrorf("%v", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var recheck reports.CheckFunc
	if !f.stored {
		recheck = func(historyPath string, info reports.RunInfo) (reports.Check, error) {
			sem := models.DefaultSemantics()
			if info.Semantics != nil {
				sem = *info.Semantics
			}
			check, _, err := harness.CheckFile(ctx, historyPath, dir, sem, f.config(), os.Stderr)
			return check, err
		}
	}
	res, err := reports.Regenerate(dir, recheck)
	if err != nil {
		return exitWith(analysis.ExitCannot, err)
	}
	fmt.Printf("verdict: %s\n%s\nreport: %s\n", res.Verdict, res.Summary, filepath.Join(dir, reports.ReportFile))
	return exitWith(res.ExitCode, nil)
}
