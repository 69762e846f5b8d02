package main

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"

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
	if res.AnomalyCount > 0 {
		fmt.Fprintf(w, ": %s", res.AnomalyLine())
	}
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
	printRootCauses(w, res)
	if dir != "" && len(res.RootCauses) > 0 {
		fmt.Fprintf(w, "prove a cause: fencecheck shrink %s (the causes named are hypotheses; it keeps only the faults the failure needs)\n", dir)
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

// maxRootCauses bounds the root causes the summary prints (the report has
// them all); maxFindingLines the findings' examples.
const (
	maxRootCauses    = 10
	maxFindingSample = 2
)

// printRootCauses prints each root cause in its sentence, with the
// checkers that found it and its witness, and the findings a line per kind
// with an example or two.
func printRootCauses(w io.Writer, res *analysis.Result) {
	p := history.Printable
	if len(res.RootCauses) > 0 {
		fmt.Fprintf(w, "root causes (%s):\n", res.AnomalyLine())
	}
	for i, g := range res.RootCauses {
		if i == maxRootCauses {
			fmt.Fprintf(w, "  ... and %d more root causes; see the report\n", len(res.RootCauses)-i)
			break
		}
		fmt.Fprintf(w, "  %d. %s\n", i+1, p(g.Sentence))
		marks := strings.Join(g.Checkers, ", ")
		if len(g.Missed) > 0 {
			marks += "; not " + strings.Join(g.Missed, ", ")
		}
		fmt.Fprintf(w, "     found by: %s\n", p(marks))
		if a := firstInWords(g); a != nil {
			fmt.Fprintf(w, "     first: [%s] %s\n", p(a.Kind), p(a.Text))
		}
		for _, op := range res.WitnessOps(g.Witness) {
			if op != nil {
				fmt.Fprintf(w, "     witness: %s\n", p(opLine(op)))
			}
		}
	}
	if len(res.FindingKinds) > 0 {
		fmt.Fprintln(w, "findings (not violations):")
	}
	for _, f := range res.FindingKinds {
		fmt.Fprintf(w, "  - %s\n", p(f.Line))
		for i, a := range f.Examples {
			if i == maxFindingSample {
				break
			}
			fmt.Fprintf(w, "      e.g. %s\n", p(a.Text))
		}
	}
}

// firstInWords is the group's first anomaly in words of its witness's
// kind (the most precise report), else its first.
func firstInWords(g analysis.RootCause) *checkers.Anomaly {
	for i := range g.Listed {
		if g.Listed[i].Kind == g.WitnessKind {
			return &g.Listed[i]
		}
	}
	if len(g.Listed) > 0 {
		return &g.Listed[0]
	}
	return nil
}

// opLine is an operation in a line: "op 4105 p3 acquire lock x0 → ok token 1 (5.18–5.19 s)".
func opLine(op *history.Op) string {
	s := fmt.Sprintf("op %d p%d %s %s", op.ID, op.Process, op.F, op.Key)
	if op.F == history.Write && op.Token.Raw != "" {
		s += " token " + op.Token.Raw
	}
	if op.Value != "" {
		s += " value " + clipWords(op.Value, 60)
	}
	s += " → " + op.Outcome.String()
	if op.F != history.Write && op.Token.Raw != "" {
		s += " token " + op.Token.Raw
	}
	if op.Error != "" {
		s += " (" + op.Error + ")"
	}
	end := "never"
	if op.Completed != history.Never {
		end = checkers.Secs(op.Completed)
	}
	return s + fmt.Sprintf(" [%s – %s]", strings.TrimSuffix(checkers.Secs(op.Call), " s"), end)
}

func clipWords(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
