package reports

import (
	"slices"
	"strconv"
	"strings"

	"github.com/fencecheck/fencecheck/analysis"
	"github.com/fencecheck/fencecheck/checkers"
)

// The page's root causes and finding lines: what analysis grouped and
// counted (analysis/rootcause.go, analysis/findings.go), laid out as one
// card per root cause (its sentence, count, the checkers' marks, the
// witness's operations, the anomalies folded under it) and one line per
// finding kind with examples folded. Nothing here counts or groups.

type rootCauseView struct {
	N          int
	Sentence   string
	Count      int
	Kinds      string
	Marks      []markView
	Witness    anomalyView
	WitnessIDs string
	Listed     []anomalyView
	// Unlisted counts the group's violations whose words the checkers did
	// not list (results.json counts them in root_causes).
	Unlisted int
}

type markView struct {
	Checker string
	Agrees  bool
}

type findingView struct {
	Line     string
	Count    int
	Examples []anomalyView
}

// rootCauseViews renders the analysis's root causes.
func rootCauseViews(an *analysis.Result) []rootCauseView {
	out := make([]rootCauseView, 0, len(an.RootCauses))
	for i, g := range an.RootCauses {
		v := rootCauseView{N: i + 1, Sentence: clip(g.Sentence, 2000), Count: g.Count}
		var kinds []string
		for k, n := range g.Kinds {
			kinds = append(kinds, clip(k, 60)+" ×"+strconv.Itoa(n))
		}
		slices.Sort(kinds)
		v.Kinds = strings.Join(kinds, ", ")
		for _, c := range g.Checkers {
			v.Marks = append(v.Marks, markView{Checker: clip(c, 60), Agrees: true})
		}
		for _, c := range g.Missed {
			v.Marks = append(v.Marks, markView{Checker: clip(c, 60)})
		}
		w := checkers.Anomaly{Kind: g.WitnessKind, Model: g.Model, Key: g.Key, Ops: g.Witness, At: g.At}
		v.Witness = anomalyFor(an, checkers.Result{Model: g.Model}, w, 0)
		v.WitnessIDs = v.Witness.OpIDs
		for j, a := range g.Listed {
			v.Listed = append(v.Listed, anomalyFor(an, checkers.Result{Checker: checkerOf(an, a), Model: g.Model}, a, j+1))
		}
		v.Unlisted = max(0, g.Count-len(g.Listed))
		out = append(out, v)
	}
	return out
}

// checkerOf names the checker that listed a (its result holds it).
func checkerOf(an *analysis.Result, a checkers.Anomaly) string {
	for _, c := range an.Checks {
		for _, b := range c.Anomalies {
			if b.Kind == a.Kind && b.At == a.At && b.Key == a.Key && b.Text == a.Text {
				return c.Checker
			}
		}
	}
	return ""
}

func findingViews(an *analysis.Result) []findingView {
	out := make([]findingView, 0, len(an.FindingKinds))
	for _, f := range an.FindingKinds {
		v := findingView{Line: clip(f.Line, 600), Count: f.Count}
		for j, a := range f.Examples {
			v.Examples = append(v.Examples, anomalyFor(an, checkers.Result{Checker: checkerOf(an, a), Model: a.Model}, a, j+1))
		}
		out = append(out, v)
	}
	return out
}
