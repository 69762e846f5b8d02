package main

import (
	"fmt"
	"io"
	"path/filepath"

	"github.com/fencecheck/fencecheck/analysis"
	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/history"
	"github.com/fencecheck/fencecheck/reports"
)

// printSummary prints the verdict, each checker's answer, the gate's
// reasons, the faults applied and failed to apply, and the anomalies in
// words, each with its cause.
//
// Every string that may carry the system under test's bytes (reasons,
// anomaly texts, causes) is shown through history.Printable: escape
// sequences reach the terminal escaped.
func printSummary(w io.Writer, res *analysis.Result, dir string) {
	p := history.Printable
	fmt.Fprintf(w, "\nverdict: %s", p(string(res.Verdict)))
	if res.Reason != "" {
		fmt.Fprintf(w, " (%s)", p(res.Reason))
	}
	fmt.Fprintln(w)
	if c := res.Run.Completion(); c != "" {
		fmt.Fprintf(w, "run: %s\n", p(c))
	}
	fmt.Fprintf(w, "operations: %d (%d ok or fail)\n", res.Counts.Ops, res.Counts.Definite)
	for _, r := range res.Checks {
		if r.Model == checkers.ModelLease {
			continue // findings, listed below
		}
		line := fmt.Sprintf("  %-9s %-15s %-7s", r.Checker, r.Model, r.Verdict)
		if r.Reason != "" {
			line += " " + p(r.Reason)
		}
		fmt.Fprintln(w, line)
	}
	for _, g := range res.GateReasons {
		fmt.Fprintf(w, "gate: %s\n", p(g))
	}
	for _, n := range res.Notes {
		fmt.Fprintf(w, "note: %s\n", p(n))
	}
	for _, l := range analysis.FaultLines(res.Nemeses) {
		fmt.Fprintln(w, p(l))
	}
	fmt.Fprintln(w, res.LateWrites.Line())
	for _, l := range res.Coverage.Lines() {
		fmt.Fprintln(w, p(l))
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
		fmt.Fprintf(w, "  - [%s] %s\n", p(a.Kind), p(a.Text))
		shown++
	}
	findings := 0
	for _, a := range anoms {
		if a.Finding && findings < 5 {
			if findings == 0 {
				fmt.Fprintln(w, "findings (not violations):")
			}
			fmt.Fprintf(w, "  - [%s] %s\n", p(a.Kind), p(a.Text))
			findings++
		}
	}
	if v := res.FirstViolation; v != nil {
		fmt.Fprintf(w, "time to detection: %s after the start", checkers.Secs(v.At))
		if v.Cause != nil {
			fmt.Fprintf(w, ", %s", p(v.Cause.Text))
		}
		fmt.Fprintln(w)
	}
	if dir != "" {
		fmt.Fprintf(w, "report: %s\n", filepath.Join(dir, reports.ReportFile))
	}
}
