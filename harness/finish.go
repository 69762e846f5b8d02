package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/fencecheck/fencecheck/analysis"
	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/reports"
)

// Verdict is a checked and reported run: the run, and the analysis of its
// history (its verdict, exit code, gate reasons, anomalies...).
type Verdict struct {
	Run *Run
	*analysis.Result
}

// Finish checks a finished run's history (one analysis, which reads the
// run's own events for the gate) and writes results.json, report.html,
// junit.xml and Porcupine's visualizations into the run folder. An error
// means the history could not be checked (ErrCannotRun) or the report not
// written (the verdict is then still returned). ctx ending (Config.Abort,
// through UntilAbort) stops the check: ErrAborted, nothing written. The
// check and the report run under a soft memory limit sized from the
// history (analysis.LimitMemory).
func Finish(ctx context.Context, run *Run, sem checkers.Semantics) (*Verdict, error) {
	// The run's structures (live coverage, the workload's, the proxies')
	// are garbage by now: collected and given back before the check, which
	// then runs under a soft memory limit sized from the history, as does
	// the report (analysis.LimitMemory, docs/endtoend.md).
	analysis.ReleaseMemory()
	var size int64
	if st, err := os.Stat(run.HistoryPath); err == nil {
		size = st.Size()
	}
	defer analysis.LimitMemory(size)()
	res, err := analysis.CheckFile(ctx, run.HistoryPath, CheckOptions(run.Config, sem))
	if ctx.Err() != nil {
		// Aborted: a check cut off is no verdict, and no report says one.
		return nil, ErrAborted
	}
	if err != nil {
		return nil, fmt.Errorf("%w: check history: %v", ErrCannotRun, err)
	}
	v := &Verdict{Run: run, Result: res}
	if _, err := reports.Write(run.Dir, RunInfoOf(run), res); err != nil {
		return v, fmt.Errorf("write report: %w", err)
	}
	return v, nil
}

// CheckOptions are the analysis options of a run's configuration.
func CheckOptions(cfg Config, sem checkers.Semantics) analysis.Options {
	minOps := cfg.MinOps
	if minOps < 0 {
		minOps = 0 // none: a Config stores it as negative, since its zero takes the default
	}
	return analysis.Options{Semantics: sem, Checker: cfg.Checker, Timeout: cfg.CheckTimeout, MinOps: minOps,
		TTL: cfg.TTL, RequireCoverage: cfg.RequireCoverage, Progress: cfg.Log}
}

// RunInfoOf describes a run for the report: what its history does not say.
func RunInfoOf(run *Run) reports.RunInfo {
	id := run.RunID
	if id == "" {
		id = filepath.Base(run.Dir)
	}
	cfg := run.Config
	if run.Namespace != "" {
		cfg.Namespace = run.Namespace // the names the run used
	}
	info := reports.RunInfo{RunID: id, Target: run.Config.Target, System: run.System, Seed: int64(run.Config.Seed),
		Command: strings.Join(run.Command, " "), Start: run.Start, End: run.End, Config: cfg}
	for n := range run.Nemeses {
		info.Nemeses = append(info.Nemeses, n)
	}
	for _, d := range run.ContractDeviations {
		info.Notes = append(info.Notes, "contract deviation, reported (it cannot let a stale, equal, missing or forged token through; --strict-contract stops at it): "+d)
	}
	return info
}
