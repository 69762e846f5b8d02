package main

import (
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/fencecheck/fencecheck/models"
)

// printSummary prints the verdict, each checker's answer and the anomalies
// in words.
func printSummary(w io.Writer, rep *models.Report, verdict models.Verdict, gate []string, dir string) {
	fmt.Fprintf(w, "\nverdict: %s", verdict)
	if rep.Reason != "" {
		fmt.Fprintf(w, " (%s)", rep.Reason)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "operations: %d (%d ok or fail)\n", rep.Ops, rep.Definite)
	for _, r := range rep.Results {
		line := fmt.Sprintf("  %-9s %-15s %-7s", r.Checker, r.Model, r.Verdict)
		if r.Reason != "" {
			line += " " + r.Reason
		}
		fmt.Fprintln(w, line)
	}
	for _, g := range gate {
		fmt.Fprintf(w, "gate: %s\n", g)
	}
	anoms := rep.Anomalies()
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
	if rep.FirstInvalidAt >= 0 && verdict == models.Invalid {
		fmt.Fprintf(w, "time to detection: %.2f s after the start\n", time.Duration(rep.FirstInvalidAt).Seconds())
	}
	if dir != "" {
		fmt.Fprintf(w, "report: %s\n", filepath.Join(dir, "report.html"))
	}
}
