package harness

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/fencecheck/fencecheck/harness/history"
	"github.com/fencecheck/fencecheck/models"
)

func TestNameCausesPointsAtTheLastFaultBefore(t *testing.T) {
	start := func(f, node string, at int64) history.Event {
		return history.Event{Process: history.NemesisProcess, Type: history.Info, F: f, Node: node, Time: at,
			Extra: map[string]json.RawMessage{"action": json.RawMessage(`"start"`)}}
	}
	faults := []history.Event{start("pause", "n1", 1e9), start("restart", "redis-1", 14_000_000_000),
		start("clock", "redis-1", 20e9)}
	res := []models.Result{{Anomalies: []models.Anomaly{
		{Kind: "token-regression", Text: "token 2 after token 48", At: 14_200_000_000},
		{Kind: "lease-overlap", Text: "overlap", At: 15e9, Finding: true},
		{Kind: "stale-read", Text: "early", At: 5e8},
	}}}
	nameCauses(res, faults)
	assert.Equal(t, "token 2 after token 48 — 0.20 s after the restart of redis-1 that began at 14.00 s", res[0].Anomalies[0].Text)
	assert.Equal(t, "overlap", res[0].Anomalies[1].Text, "findings are left alone")
	assert.Equal(t, "early", res[0].Anomalies[2].Text, "nothing to name before the first fault")
}
