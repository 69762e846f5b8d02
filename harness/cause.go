package harness

import (
	"fmt"
	"strings"

	"github.com/fencecheck/fencecheck/harness/history"
	"github.com/fencecheck/fencecheck/models"
)

// faultStart is one nemesis start event, kept to name causes.
type faultStart struct {
	name, nodes, mode string
	at                int64
}

func faultStarts(events []history.Event) []faultStart {
	var out []faultStart
	for _, e := range events {
		if e.Process != history.NemesisProcess || strings.Trim(string(e.Extra["action"]), `"`) != "start" {
			continue
		}
		out = append(out, faultStart{name: e.F, nodes: e.Node, mode: strings.Trim(string(e.Extra["mode"]), `"`), at: e.Time})
	}
	return out
}

// nameCauses appends to each violation the fault that started last before
// the history showed it ("after the restart of redis-1 at 14.20 s"), so a
// reader sees at once which fault exposed the bug. It names the fault, it
// does not prove causation: the words say "after", not "because".
func nameCauses(results []models.Result, faults []history.Event) {
	starts := faultStarts(faults)
	if len(starts) == 0 {
		return
	}
	for i := range results {
		for j := range results[i].Anomalies {
			a := &results[i].Anomalies[j]
			if a.Finding || a.At <= 0 {
				continue
			}
			var last *faultStart
			for k := range starts {
				if starts[k].at <= a.At {
					last = &starts[k]
				}
			}
			if last == nil {
				continue
			}
			what := last.name
			if last.mode != "" {
				what += " (" + last.mode + ")"
			}
			if last.nodes != "" {
				what += " of " + last.nodes
			}
			a.Text += fmt.Sprintf(" — %.2f s after the %s that began at %.2f s", float64(a.At-last.at)/1e9, what, float64(last.at)/1e9)
		}
	}
}
