package main

import (
	"fmt"
	"io"
	"path/filepath"

	"github.com/fencecheck/fencecheck/analysis"
	"github.com/fencecheck/fencecheck/models"
	"github.com/fencecheck/fencecheck/reports"
)

// printSummary prints the verdict, each checker's answer, the gate's
// reasons, the faults applied and failed to apply, and the anomalies in
// words, each with its cause.
func printSummary(w io.Writer, res *analysis.Result, dir string) {
	fmt.Fprintf(w, "\nverdict: %s", res.Verdict)
	if res.Reason != "" {
		fmt.Fprintf(w, " (%s)", res.Reason)
	}
	fmt.Fprintln(w)
	if c := res.Run.Completion(); c != "" {
		fmt.Fprintf(w, "run: %s\n", c)
	}
	fmt.Fprintf(w, "operations: %d (%d ok or fail)\n", res.Counts.Ops, res.Counts.Definite)
	for _, r := range res.Checks {
		if r.Model == models.ModelLease {
			continue // findings, listed below
		}
		line := fmt.Sprintf("  %-9s %-15s %-7s", r.Checker, r.Model, r.Verdict)
		if r.Reason != "" {
			line += " " + r.Reason
		}
		fmt.Fprintln(w, line)
	}
	for _, g := range res.GateReasons {
		fmt.Fprintf(w, "gate: %s\n", g)
	}
	for _, l := range analysis.FaultLines(res.Nemeses) {
		fmt.Fprintln(w, l)
	}
	anoms := res.Anomalies()
	shown := 0
	for _, a := range anoms {
		if a.Finding {
			continue
		}
		if shown == 0 {
			fmt.Fprintln(w, "anomalies:")
		}
		if shown == 10 {
			fmt.Fprintf(w, "  ... and more; see the report\n")
			break
		}
		fmt.Fprintf(w, "  - [%s] %s\n", a.Kind, a.Text)
		shown++
	}
	findings := 0
	for _, a := range anoms {
		if a.Finding && findings < 5 {
			if findings == 0 {
				fmt.Fprintln(w, "findings (not violations):")
			}
			fmt.Fprintf(w, "  - [%s] %s\n", a.Kind, a.Text)
			findings++
		}
	}
	if v := res.FirstViolation; v != nil {
		fmt.Fprintf(w, "time to detection: %s after the start", models.Secs(v.At))
		if v.Cause != nil {
			fmt.Fprintf(w, ", %s", v.Cause.Text)
		}
		fmt.Fprintln(w)
	}
	if dir != "" {
		fmt.Fprintf(w, "report: %s\n", filepath.Join(dir, reports.ReportFile))
	}
}
