package analysis

import (
	"fmt"
	"sort"

	"github.com/fencecheck/fencecheck/checkers"
)

// maxFindingExamples bounds the examples kept under a finding kind's line.
const maxFindingExamples = 3

// FindingKind is one kind of finding (an observation that is not a
// violation) summarised in a line: a valid run's twenty lease overlaps are
// one line with its count, a few examples folded under it, not twenty
// cards.
type FindingKind struct {
	Kind string `json:"kind"`
	// Count counts them all, those the checkers did not list included.
	Count int `json:"count"`
	// Line says it in one line: the kind, its count and what it means.
	Line string `json:"line"`
	// Examples are the earliest few, in words.
	Examples []checkers.Anomaly `json:"examples,omitempty"`
}

// findingKinds summarises the findings of checks, by kind.
func findingKinds(checks []checkers.Result) []FindingKind {
	byKind := map[string]*FindingKind{}
	for _, c := range checks {
		listed := map[string]int{}
		for _, a := range c.Anomalies {
			if !a.Finding {
				continue
			}
			f := byKind[a.Kind]
			if f == nil {
				f = &FindingKind{Kind: a.Kind}
				byKind[a.Kind] = f
			}
			listed[a.Kind]++
			if len(f.Examples) < maxFindingExamples {
				f.Examples = append(f.Examples, a)
			}
		}
		for k, n := range listed {
			if all, ok := c.KindCounts[k]; ok && all > n {
				n = all // the check counted those it did not list
			}
			byKind[k].Count += n
		}
	}
	out := make([]FindingKind, 0, len(byKind))
	for _, k := range sortedKeys(byKind) {
		f := byKind[k]
		checkers.SortAnomalies(f.Examples)
		f.Line = fmt.Sprintf("%s ×%d", k, f.Count)
		if w := findingMeaning[k]; w != "" {
			f.Line += ": " + w
		}
		out = append(out, *f)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Count > out[j].Count })
	return out
}

// findingMeaning says what a finding kind means, for the kinds no check's
// reason says it for.
var findingMeaning = map[string]string{
	checkers.KindTokensNotAuthenticated: "the resource accepted token numbers no issuer returned (tokens are not authenticated: anyone can forge one)",
	checkers.KindLeaseOverlap:           "clients that both believed they held a lock; fencing is what keeps the resource safe then",
}
