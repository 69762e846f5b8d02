package analysis

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/checkers/historytest"
	"github.com/fencecheck/fencecheck/history"
)

// nameCausesOf runs the cause rule over results with the given fault events
// (the anomalies name no operation of a history: only the fallback applies).
func nameCausesOf(results []checkers.Result, faults []history.Event) {
	var p faultPairer
	for _, e := range faults {
		p.add(e)
	}
	r := &Result{Checks: results, Faults: p.periods(0)}
	nameCauses(r)
}

func TestNameCausesPointsAtTheLastFaultBefore(t *testing.T) {
	start := func(f, node string, at int64) history.Event {
		return history.Event{Process: history.NemesisProcess, Type: history.Info, F: f, Node: node, Time: at,
			Extra: map[string]json.RawMessage{"action": json.RawMessage(`"start"`)}}
	}
	faults := []history.Event{start("pause", "n1", 1e9), start("restart", "redis-1", 14_000_000_000),
		start("clock", "redis-1", 20e9)}
	res := []checkers.Result{{Anomalies: []checkers.Anomaly{
		{Kind: "token-regression", Text: "token 2 after token 48", At: 14_200_000_000},
		{Kind: "lease-overlap", Text: "overlap", At: 15e9, Finding: true},
		{Kind: "stale-read", Text: "early", At: 5e8},
	}}}
	nameCausesOf(res, faults)
	assert.Equal(t, "token 2 after token 48 — the last fault event before it: the restart of redis-1 began at 14.00 s, 0.20 s before", res[0].Anomalies[0].Text)
	c := res[0].Anomalies[0].Cause
	require.NotNil(t, c)
	assert.False(t, c.Explains, "no operation to place it: only the last fault event before it")
	assert.Equal(t, "restart", c.Nemesis)
	assert.Equal(t, int64(200_000_000), c.Delay)
	assert.Equal(t, "overlap", res[0].Anomalies[1].Text, "findings are left alone")
	assert.Equal(t, "early", res[0].Anomalies[2].Text, "nothing to name before the first fault")
	assert.Nil(t, res[0].Anomalies[2].Cause)
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
	res := []checkers.Result{{Anomalies: []checkers.Anomaly{
		{Kind: "stale-read", Text: "read of nothing", At: 3_540_000_000},
		{Kind: "stale-read", Text: "during the delay", At: 3_000_000_000},
	}}}
	nameCausesOf(res, faults)
	assert.Equal(t, "read of nothing — the last fault event before it: the restart of reference (2.50–3.50 s) ended 0.04 s before", res[0].Anomalies[0].Text)
	assert.Equal(t, "during the delay — the last fault event before it: the delay of reference began at 2.59 s, 0.41 s before", res[0].Anomalies[1].Text)
}

// The case the rule was made for: a reference whose counter resets on
// restart, restarted at 2.25–2.88 s and caught at 4.05 s. A holder pause
// began at 2.78 s and a partition of the same node ended at 4.04 s: "the
// fault that started last" named the pause, "the last fault event" the
// partition; only the restart between the two acquires explains a token
// that went back, and every rendering names it.
func TestCauseOfACounterResetIsTheRestartBetweenTheAcquires(t *testing.T) {
	b := historytest.New().
		OnNode("reference").Acquire("l1", 2000, 2010, "48").
		Fault("restart", "reference", 2250, 2880).
		Fault("pause", "client", 2780, 3300).
		Fault("partition", "reference", 3500, 4040).
		OnNode("reference").Write("l1", "48", "a", 2020, 2030).
		OnNode("reference").Acquire("l1", 3900, 4050, "2")
	rep, err := Check(context.Background(), b.Events(), Options{MinOps: -1})
	require.NoError(t, err)
	require.Equal(t, checkers.Invalid, rep.Verdict, rep.Reason)
	// Every fault that can explain it is named, the likeliest first: the
	// restart (loses state) before the partition (separates); the pause of
	// the client cannot reset a counter.
	const want = "can be explained by the restart of reference (2.25–2.88 s), or the partition of reference (3.50–4.04 s) between the acquires"

	a := directAnomaly(t, rep, checkers.KindTokenRegression)
	assert.True(t, strings.HasSuffix(a.Text, " — "+want), a.Text)
	require.NotNil(t, a.Cause)
	assert.True(t, a.Cause.Explains)
	assert.Equal(t, "restart", a.Cause.Nemesis)
	assert.Equal(t, "reference", a.Cause.Node)
	assert.Equal(t, int64(2_250_000_000), a.Cause.Start)
	assert.Equal(t, int64(2_880_000_000), a.Cause.Stop)
	assert.Equal(t, int64(4_050_000_000-2_250_000_000), a.Cause.Delay)
	assert.Equal(t, "restart", rep.Faults[a.Cause.Fault].Nemesis)
	require.Len(t, a.Cause.Also, 1)
	assert.Equal(t, "partition", a.Cause.Also[0].Nemesis)

	// The first violation (time to detection, after_fault, the summary)
	// carries the same cause, and so does every checker's anomaly.
	require.NotNil(t, rep.FirstViolation)
	assert.Equal(t, int64(4_050_000_000), rep.FirstViolation.At)
	require.NotNil(t, rep.FirstViolation.Cause)
	assert.Equal(t, want, rep.FirstViolation.Cause.Text)
	for _, an := range rep.Anomalies() {
		if an.Finding {
			continue
		}
		require.NotNil(t, an.Cause, an.Text)
		assert.Equal(t, "restart", an.Cause.Nemesis, "%s: %s", an.Kind, an.Text)
		assert.NotContains(t, an.Text, "pause")
	}
}

func TestCauseOfLostState(t *testing.T) {
	// The resource forgets its high-water mark on restart: the old holder's
	// write is accepted afterwards.
	b := historytest.New().
		OnNode("res-1").Write("r1", "2", "a", 100, 110).
		Fault("restart", "res-2", 150, 300).
		Fault("restart", "res-1", 200, 400).
		Fault("delay", "res-1", 410, 600).
		OnNode("res-1").Write("r1", "1", "b", 500, 510)
	rep, err := Check(context.Background(), b.Events(), Options{MinOps: -1})
	require.NoError(t, err)
	a := directAnomaly(t, rep, checkers.KindStaleWriteAccepted)
	require.NotNil(t, a.Cause)
	assert.True(t, a.Cause.Explains)
	assert.Equal(t, "can be explained by the restart of res-1 (0.20–0.40 s), or the restart of res-2 (0.15–0.30 s), or the delay of res-1 (0.41–0.60 s) since the overwritten write", a.Cause.Text,
		"a restart of the node the writes went to, before a restart elsewhere, then the delay")

	// A stale read after the node lost the newer value.
	b = historytest.New().
		OnNode("n1").Write("r1", "1", "a", 0, 10).
		OnNode("n1").Write("r1", "2", "b", 20, 30).
		Fault("restart", "n1", 40, 60).
		OnNode("n1").Read("r1", 70, 80, "a", "1")
	rep, err = Check(context.Background(), b.Events(), Options{MinOps: -1})
	require.NoError(t, err)
	a = directAnomaly(t, rep, checkers.KindStaleRead)
	require.NotNil(t, a.Cause)
	assert.Equal(t, "can be explained by the restart of n1 (0.04–0.06 s) since the overwritten write", a.Cause.Text)

	// No fault that can explain it: the words say it is only the last one.
	b = historytest.New().
		OnNode("n1").Write("r1", "2", "a", 0, 10).
		Fault("clock", "n1", 15, 18).
		OnNode("n1").Write("r1", "1", "b", 20, 30)
	rep, err = Check(context.Background(), b.Events(), Options{MinOps: -1})
	require.NoError(t, err)
	a = directAnomaly(t, rep, checkers.KindStaleWriteAccepted)
	require.NotNil(t, a.Cause)
	assert.False(t, a.Cause.Explains)
	assert.Equal(t, "the last fault event before it: the clock of n1 (0.01–0.02 s) ended 0.01 s before", a.Cause.Text)
}

// A write accepted without its token is explained by the strip fault whose
// proxy took the token away.
func TestCauseOfAStrippedToken(t *testing.T) {
	b := historytest.New().
		Write("r1", "1", "a", 0, 10).
		Fault("strip", "reference", 15, 40).
		Fault("restart", "reference", 16, 17).
		Write("r1", "7", "b", 20, 30).Strip("r1", "b", "", "remove", 25)
	rep, err := Check(context.Background(), b.Events(), Options{MinOps: -1})
	require.NoError(t, err)
	a := directAnomaly(t, rep, checkers.KindMissingTokenAccepted)
	require.NotNil(t, a.Cause)
	assert.True(t, a.Cause.Explains)
	assert.Equal(t, "can be explained by the strip of reference (0.01–0.04 s) tampering with this write's token", a.Cause.Text)

	// The client sent no token itself: no strip explains that.
	b = historytest.New().
		Fault("strip", "reference", 15, 40).
		Write("r1", "", "b", 20, 30)
	rep, err = Check(context.Background(), b.Events(), Options{MinOps: -1})
	require.NoError(t, err)
	a = directAnomaly(t, rep, checkers.KindMissingTokenAccepted)
	require.NotNil(t, a.Cause)
	assert.False(t, a.Cause.Explains)
}

// A power loss can explain all a kill can, and more: where both fit it is
// named first; both are named.
func TestCausePowerLossBeforeRestart(t *testing.T) {
	b := historytest.New().
		OnNode("reference").Acquire("l1", 0, 10, "7").
		Fault("power-loss", "reference", 100, 200).
		Fault("restart", "reference", 300, 400).
		OnNode("reference").Acquire("l1", 500, 510, "1")
	rep, err := Check(context.Background(), b.Events(), Options{MinOps: -1})
	require.NoError(t, err)
	a := directAnomaly(t, rep, checkers.KindTokenRegression)
	require.NotNil(t, a.Cause)
	assert.Equal(t, "power-loss", a.Cause.Nemesis)
	assert.Contains(t, a.Cause.Text, "can be explained by the power-loss of reference (0.10–0.20 s), or the restart of reference (0.30–0.40 s)")
	require.Len(t, rep.RootCauses, 1)
	assert.Contains(t, rep.RootCauses[0].Sentence, "a hypothesis: `fencecheck shrink RUN_DIR`")
}

// A full disk fails the writes: it explains a counter that went back (a
// store that took a failed write for done), after the faults that lose
// state and before a pause of a client, which cannot.
func TestCauseDiskFullFailsWrites(t *testing.T) {
	b := historytest.New().
		OnNode("reference").Acquire("l1", 0, 10, "7").
		Fault("pause", "client", 50, 150).
		Fault("disk-full", "reference", 100, 600).
		OnNode("reference").Acquire("l1", 500, 510, "7")
	rep, err := Check(context.Background(), b.Events(), Options{MinOps: -1})
	require.NoError(t, err)
	a := directAnomaly(t, rep, checkers.KindDuplicateToken)
	require.NotNil(t, a.Cause)
	assert.True(t, a.Cause.Explains, a.Cause.Text)
	assert.Equal(t, "disk-full", a.Cause.Nemesis)
	assert.Empty(t, a.Cause.Also, "the pause cannot explain it")
}

// A partition is named by its sides, as its start event's groups say.
func TestCauseNamesAPartitionsSides(t *testing.T) {
	f := Fault{Nemesis: "partition", Node: "issuer-1,issuer-2,etcd-1",
		Details: map[string]json.RawMessage{"mode": json.RawMessage(`"issuers"`), "groups": json.RawMessage(`[["issuer-1"],["issuer-2","etcd-1"]]`)}}
	assert.Equal(t, "the partition (issuers) {issuer-1} | {issuer-2, etcd-1}", f.what())
}
