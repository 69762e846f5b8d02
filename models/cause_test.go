package models

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/fencecheck/fencecheck/history"
)

func TestNameCausesPointsAtTheLastFaultBefore(t *testing.T) {
	start := func(f, node string, at int64) history.Event {
		return history.Event{Process: history.NemesisProcess, Type: history.Info, F: f, Node: node, Time: at,
			Extra: map[string]json.RawMessage{"action": json.RawMessage(`"start"`)}}
	}
	faults := []history.Event{start("pause", "n1", 1e9), start("restart", "redis-1", 14_000_000_000),
		start("clock", "redis-1", 20e9)}
	res := []Result{{Anomalies: []Anomaly{
		{Kind: "token-regression", Text: "token 2 after token 48", At: 14_200_000_000},
		{Kind: "lease-overlap", Text: "overlap", At: 15e9, Finding: true},
		{Kind: "stale-read", Text: "early", At: 5e8},
	}}}
	nameCauses(res, faults)
	assert.Equal(t, "token 2 after token 48 — 0.20 s after the restart of redis-1 that began at 14.00 s", res[0].Anomalies[0].Text)
	assert.Equal(t, "overlap", res[0].Anomalies[1].Text, "findings are left alone")
	assert.Equal(t, "early", res[0].Anomalies[2].Text, "nothing to name before the first fault")
}

// A node coming back is an event too: a violation right after a restart
// ended names that restart, not a fault that began earlier and is still on.
func TestNameCausesNamesAFaultThatJustEnded(t *testing.T) {
	ev := func(f, action, id string, at int64) history.Event {
		return history.Event{Process: history.NemesisProcess, Type: history.Info, F: f, Node: "reference", Time: at,
			Extra: map[string]json.RawMessage{"action": json.RawMessage(`"` + action + `"`), "id": json.RawMessage(id)}}
	}
	faults := []history.Event{ev("restart", "start", "1", 2_500_000_000), ev("delay", "start", "2", 2_590_000_000),
		ev("restart", "stop", "1", 3_500_000_000), ev("delay", "stop", "2", 4_700_000_000)}
	res := []Result{{Anomalies: []Anomaly{
		{Kind: "stale-read", Text: "read of nothing", At: 3_540_000_000},
		{Kind: "stale-read", Text: "during the delay", At: 3_000_000_000},
	}}}
	nameCauses(res, faults)
	assert.Equal(t, "read of nothing — 0.04 s after the restart of reference (2.50–3.50 s) ended", res[0].Anomalies[0].Text)
	assert.Equal(t, "during the delay — 0.41 s after the delay of reference that began at 2.59 s", res[0].Anomalies[1].Text)
}

// nameCauses runs Report.NameCauses over results with the given fault events.
func nameCauses(results []Result, faults []history.Event) {
	r := &Report{Results: results}
	r.AnnotateFaults(faults, 0)
	r.NameCauses()
}
