package models

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/fencecheck/fencecheck/history"
)

// Visualize writes Porcupine's HTML visualization of one key of one model
// (ModelRegister with a resource key, ModelIssuer with a lock name, or "" for
// scope=global) to w: every operation on a timeline per client, the longest
// linearizations found, fault periods and the anomalies found on that key.
// The search is re-run (verbosely) within the check's timeout, or within
// VisualizeUnknownBudget for a key Porcupine could not decide: such a key
// shows partial linearizations only. Keys are cut into segments (see
// porcupine.go); each is one partition of the visualization.
func (r *Report) Visualize(model, key string, w io.Writer) error {
	k := r.porcupine[pkKey(model, key)]
	if k == nil {
		return fmt.Errorf("porcupine did not check %s %q", model, key)
	}
	budget := r.timeout
	if k.result.Verdict == Unknown {
		budget = min(budget, VisualizeUnknownBudget)
	}
	m := k.porcupineModel(nil)
	_, info := porcupine.CheckOperationsVerbose(m, k.operations(k.writes, k.reads, k.acquires), budget)
	var notes []porcupine.Annotation
	for _, f := range r.faults {
		notes = append(notes, porcupine.Annotation{Tag: "faults", Start: f.start, End: f.end,
			Description: f.name, Details: f.detail, BackgroundColor: "#fde2c8"})
	}
	for _, res := range r.Results {
		for _, a := range res.Anomalies {
			if a.Model != model || a.Key != key || a.At == history.Never {
				continue
			}
			color := "#f7c6c6"
			if a.Finding {
				color = "#fff3b0"
			}
			notes = append(notes, porcupine.Annotation{Tag: "anomalies (" + res.Checker + ")", Start: a.At,
				Description: a.Kind, Details: a.Text, BackgroundColor: color})
		}
	}
	info.AddAnnotations(notes)
	return porcupine.Visualize(m, info, w)
}

// VisualizeUnknownBudget bounds the search behind the visualization of a key
// Porcupine could not decide: it would only time out again.
var VisualizeUnknownBudget = 10 * time.Second

// VisualizePath writes Visualize's output to a file.
func (r *Report) VisualizePath(model, key, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := r.Visualize(model, key, f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
