package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/fencecheck/fencecheck/models"
	"github.com/fencecheck/fencecheck/models/overlap"
	"github.com/fencecheck/fencecheck/nemesis"
	"github.com/fencecheck/fencecheck/reports"
)

// Verdict is a checked and reported run.
type Verdict struct {
	Run     *Run
	Report  *models.Report
	Results *reports.Results
	// Verdict and ExitCode are the gate's answer: the checkers' verdict,
	// turned to unknown when the run did too little to trust a "valid".
	Verdict  models.Verdict
	ExitCode int
	// GateReasons say why a valid history still gives unknown.
	GateReasons []string
}

// Finish checks a finished run's history, applies the gate (enough ok
// operations, every requested fault took effect) and writes results.json,
// report.html, junit.xml and Porcupine's visualizations into the run folder.
func Finish(ctx context.Context, run *Run, sem models.Semantics) (*Verdict, error) {
	check, rep, err := CheckFile(ctx, run.HistoryPath, run.Dir, sem, run.Config, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: check history: %v", ErrCannotRun, err)
	}
	v := &Verdict{Run: run, Report: rep, Verdict: rep.Verdict}
	v.GateReasons = gate(run, rep)
	if v.Verdict == models.Valid && len(v.GateReasons) > 0 {
		v.Verdict = models.Unknown
	}
	check.Verdict = v.Verdict
	info := RunInfoOf(run, sem)
	info.Notes = append(info.Notes, v.GateReasons...)
	res, err := reports.Write(run.Dir, info, check)
	if err != nil {
		return v, fmt.Errorf("write report: %w", err)
	}
	v.Results = res
	v.ExitCode = reports.ExitCode(v.Verdict)
	return v, nil
}

// assemble turns the models' report and the lease overlaps into what the
// reports package writes.
func assemble(rep *models.Report, ov *overlap.Report, dir string) reports.Check {
	check := reports.Check{Verdict: rep.Verdict, Results: rep.Results, Reason: rep.Reason, Metrics: map[string]any{}}
	if rep.FirstInvalidAt >= 0 {
		check.FirstInvalidAt = rep.FirstInvalidAt
	}
	if ov != nil {
		check.Metrics["lease_overlaps"] = len(ov.Overlaps)
		check.Metrics["lease_overlap_ms"] = ov.Total.Milliseconds()
		check.Metrics["stale_writes_fenced_off_during_overlaps"] = ov.Rejected
		if len(ov.Overlaps) > 0 {
			check.Results = append(check.Results, models.Result{Checker: "direct", Model: "lease",
				Verdict: models.Valid, Anomalies: ov.Anomalies(), Ops: ov.Leases,
				Reason: fmt.Sprintf("%d lease overlaps: clients that both believed they held a lock; fencing is what keeps the resource safe then", len(ov.Overlaps))})
		}
	}
	check.Visualizations = visualize(rep, dir)
	return check
}

// visualize writes Porcupine's HTML for every key Porcupine found invalid and
// for up to three keys otherwise.
func visualize(rep *models.Report, dir string) map[string]string {
	out := map[string]string{}
	if dir == "" {
		return out
	}
	sample := 0
	for _, k := range rep.Keys {
		if k.Verdict != models.Invalid {
			if sample >= 3 || k.Verdict != models.Valid {
				continue
			}
			sample++
		}
		rel := filepath.Join("porcupine", fmt.Sprintf("%s-%s.html", k.Model, reports.TargetDirName(k.Key)))
		if err := os.MkdirAll(filepath.Join(dir, "porcupine"), 0o755); err != nil {
			continue
		}
		if err := rep.VisualizePath(k.Model, k.Key, filepath.Join(dir, rel)); err == nil {
			out[k.Model+"/"+k.Key] = rel
		}
	}
	return out
}

// gate says why a run that checked valid must not pass a release gate.
func gate(run *Run, rep *models.Report) []string {
	var why []string
	if rep.Definite < run.Config.MinOps {
		why = append(why, fmt.Sprintf("only %d operations ended ok or fail; the gate needs at least %d (--min-ops)", rep.Definite, run.Config.MinOps))
	}
	if run.CutShort {
		why = append(why, "the run was cut short (interrupted) before its main phase ended")
	}
	if !run.Complete {
		why = append(why, "the run did not complete its final phase (heal, recovery, final reads): "+strings.Join(run.RunErrors, "; "))
	}
	requested := namedNemeses(run.Config.Nemesis)
	for _, n := range requested {
		if why2, ok := run.NotApplicable[n]; ok {
			why = append(why, fmt.Sprintf("nemesis %s was requested but cannot act on this target: %s", n, why2))
			continue
		}
		if c, ok := run.Nemeses[n]; ok && c.Started == 0 {
			msg := fmt.Sprintf("nemesis %s was requested but never took effect", n)
			switch {
			case c.Error != "":
				msg += ": " + c.Error
			case c.Waited > 0:
				msg += ": " + nemesis.ErrBusy.Error() + " until the run ended (a longer --time gives it a turn)"
			}
			why = append(why, msg)
		}
	}
	return why
}

// namedNemeses lists explicitly named nemeses ("all" names none: it means
// whatever applies).
func namedNemeses(spec string) []string {
	var out []string
	for _, n := range strings.Split(spec, ",") {
		n = strings.TrimSpace(n)
		if n != "" && n != "all" && n != "none" {
			out = append(out, n)
		}
	}
	return out
}

// RunInfoOf describes a run for the report.
func RunInfoOf(run *Run, sem models.Semantics) reports.RunInfo {
	var nem []string
	for n := range run.Nemeses {
		nem = append(nem, n)
	}
	sort.Strings(nem)
	info := reports.RunInfo{RunID: filepath.Base(run.Dir), Target: run.Config.Target, Seed: int64(run.Config.Seed),
		Command: strings.Join(run.Command, " "), Start: run.Start, End: run.End, Nemeses: nem,
		Semantics: &sem, Config: run.Config}
	var na []string
	for n, why := range run.NotApplicable {
		na = append(na, fmt.Sprintf("nemesis %s not applicable: %s", n, why))
	}
	sort.Strings(na)
	info.Notes = append(info.Notes, na...)
	info.Notes = append(info.Notes, run.RunErrors...)
	return info
}
