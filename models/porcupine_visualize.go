package models

import (
	"fmt"
	"io"
	"os"

	"github.com/anishathalye/porcupine"
)

// Visualize writes Porcupine's HTML visualization of one key of one model
// (ModelRegister with a resource key, ModelIssuer with a lock name, or "" for
// scope=global) to w: every operation on a timeline per client, the longest
// linearizations found, fault periods and the anomalies found on that key.
// The search is re-run (verbosely) within the check's timeout, so a key that
// timed out shows partial linearizations only.
func (r *Report) Visualize(model, key string, w io.Writer) error {
	k := r.porcupine[pkKey(model, key)]
	if k == nil {
		return fmt.Errorf("porcupine did not check %s %q", model, key)
	}
	m := k.porcupineModel(nil)
	_, info := porcupine.CheckOperationsVerbose(m, k.operations(k.writes, k.reads, k.acquires), r.timeout)
	var notes []porcupine.Annotation
	for _, f := range r.faults {
		notes = append(notes, porcupine.Annotation{Tag: "faults", Start: f.start, End: f.end,
			Description: f.name, Details: f.detail, BackgroundColor: "#fde2c8"})
	}
	for _, res := range r.Results {
		for _, a := range res.Anomalies {
			if a.Model != model || a.Key != key || a.At == Never {
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
