package porcupine

import (
	"fmt"
	"io"
	"time"

	porc "github.com/anishathalye/porcupine"
	"github.com/fencecheck/fencecheck/checkers"
)

// Visualize writes Porcupine's HTML visualization of one key of one model
// (checkers.ModelRegister with a resource key, checkers.ModelIssuer with a lock
// name, or "" for scope=global) of the last Check to w: every operation on a
// timeline per client, the longest linearizations found, and the given
// annotations (fault periods, anomalies). The search is re-run (verbosely)
// within the check's timeout, or within VisualizeUnknownBudget for a key
// Porcupine could not decide: such a key shows partial linearizations only.
// Keys are cut into segments (see operations.go); each is one partition of
// the visualization.
func (c *Checker) Visualize(model, key string, notes []checkers.Annotation, w io.Writer) error {
	k := c.key(model, key)
	if k == nil {
		return fmt.Errorf("porcupine did not check %s %q", model, key)
	}
	budget := c.timeout()
	if k.result.Verdict == checkers.Unknown {
		budget = min(budget, VisualizeUnknownBudget)
	}
	m := k.porcupineModel(nil)
	_, info := porc.CheckOperationsVerbose(m, k.operations(k.writes, k.reads, k.acquires), budget)
	out := make([]porc.Annotation, 0, len(notes))
	for _, n := range notes {
		out = append(out, porc.Annotation{Tag: n.Tag, Start: n.Start, End: n.End,
			Description: n.Description, Details: n.Details, BackgroundColor: n.Color})
	}
	info.AddAnnotations(out)
	return porc.Visualize(m, info, w)
}

// VisualizeUnknownBudget bounds the search behind the visualization of a key
// Porcupine could not decide: it would only time out again.
var VisualizeUnknownBudget = 10 * time.Second
