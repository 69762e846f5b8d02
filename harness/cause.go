package harness

import (
	"fmt"
	"strings"

	"github.com/fencecheck/fencecheck/harness/history"
	"github.com/fencecheck/fencecheck/models"
)

// faultPeriod is one nemesis fault, from its start event to its stop event
// (stop is -1 while it was still live when the history ended), kept to name
// causes.
type faultPeriod struct {
	name, nodes, mode string
	start, stop       int64
}

func faultPeriods(events []history.Event) []faultPeriod {
	var out []faultPeriod
	byID := map[string]int{}
	for _, e := range events {
		if e.Process != history.NemesisProcess {
			continue
		}
		id := string(e.Extra["id"])
		switch strings.Trim(string(e.Extra["action"]), `"`) {
		case "start":
			out = append(out, faultPeriod{name: e.F, nodes: e.Node, mode: strings.Trim(string(e.Extra["mode"]), `"`), start: e.Time, stop: -1})
			if id != "" {
				byID[id] = len(out) - 1
			}
		case "stop":
			if i, ok := byID[id]; ok && id != "" {
				out[i].stop = e.Time
				delete(byID, id)
			}
		}
	}
	return out
}

// nameCauses appends to each violation the fault event (a start, or an end:
// a node coming back from a restart) that came last before the history
// showed it ("after the restart of redis-1 (14.00-15.00 s) ended"), so a
// reader sees at once which fault exposed the bug. It names the fault, it
// does not prove causation: the words say "after", not "because".
func nameCauses(results []models.Result, faults []history.Event) {
	periods := faultPeriods(faults)
	if len(periods) == 0 {
		return
	}
	for i := range results {
		for j := range results[i].Anomalies {
			a := &results[i].Anomalies[j]
			if a.Finding || a.At <= 0 {
				continue
			}
			var last *faultPeriod
			lastAt, ended := int64(-1), false
			for k := range periods {
				p := &periods[k]
				if p.stop >= 0 && p.stop <= a.At && p.stop >= lastAt {
					last, lastAt, ended = p, p.stop, true
				}
				if p.start <= a.At && p.start > lastAt {
					last, lastAt, ended = p, p.start, false
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
			if ended {
				a.Text += fmt.Sprintf(" — %.2f s after the %s (%.2f–%.2f s) ended", float64(a.At-lastAt)/1e9, what, float64(last.start)/1e9, float64(last.stop)/1e9)
			} else {
				a.Text += fmt.Sprintf(" — %.2f s after the %s that began at %.2f s", float64(a.At-lastAt)/1e9, what, float64(last.start)/1e9)
			}
		}
	}
}
