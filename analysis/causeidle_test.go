package analysis

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/checkers/historytest"
)

func checkBuilt(t *testing.T, b *historytest.Builder) *Result {
	t.Helper()
	rep, err := Check(context.Background(), b.Events(), Options{MinOps: -1})
	require.NoError(t, err)
	require.Equal(t, checkers.Invalid, rep.Verdict, rep.Reason)
	return rep
}

// A resource that forgets an idle key's mark, with no fault anywhere: the
// cause is the idle time, and one root cause holds every key it struck.
func TestIdleTimeExplainsAStaleWriteNoFaultExplains(t *testing.T) {
	rep := checkBuilt(t, historytest.New().
		OnNode("res").Write("k1", "2", "a", 0, 10).
		OnNode("res").Write("k2", "4", "a", 5, 15).
		Fault("clock", "issuer", 100, 200). // cannot lose a mark
		OnNode("res").Write("k1", "1", "b", 3500, 3510).
		OnNode("res").Write("k2", "3", "b", 3600, 3610))
	a := directAnomaly(t, rep, checkers.KindStaleWriteAccepted)
	require.NotNil(t, a.Cause)
	assert.True(t, a.Cause.Explains)
	assert.Equal(t, -1, a.Cause.Fault, "no fault is named")
	assert.Empty(t, a.Cause.Nemesis)
	assert.Equal(t, int64(3_490_000_000), a.Cause.Idle)
	assert.Equal(t, "can be explained by idle time (a resource that forgets a key's mark after idle time, by an expiry or an eviction, does this): the key had no write that may have taken effect for 3.49 s (0.01–3.50 s) since the overwritten write", a.Cause.Text)

	require.Len(t, rep.RootCauses, 1, "the idle time is one root cause over both keys")
	g := rep.RootCauses[0]
	assert.Equal(t, 2, g.Count)
	assert.Equal(t, 2, g.Keys)
	assert.Contains(t, g.Sentence, "on 2 keys (stale-write-accepted ×2); they can be explained by idle time")
	assert.True(t, strings.HasSuffix(g.Sentence, "("+IdleHypothesis+")"), g.Sentence)

	// Shorter than the shortest idle scale: only the last fault event.
	rep = checkBuilt(t, historytest.New().
		OnNode("res").Write("k1", "2", "a", 0, 10).
		Fault("clock", "issuer", 100, 200).
		OnNode("res").Write("k1", "1", "b", 900, 910))
	a = directAnomaly(t, rep, checkers.KindStaleWriteAccepted)
	require.NotNil(t, a.Cause)
	assert.False(t, a.Cause.Explains)
	assert.Zero(t, a.Cause.Idle)
	assert.Contains(t, a.Cause.Text, "the last fault event before it")
}

// A stale token rejected after the restart proves the mark outlived it: the
// restart no longer explains the later acceptance, the idle time does. A
// rejection by another node proves nothing of this one.
func TestARejectionAfterTheFaultsNarrowsTheWindow(t *testing.T) {
	build := func(rejectedOn string) *historytest.Builder {
		return historytest.New().
			OnNode("res").Write("k", "5", "a", 0, 10).
			Fault("restart", "res", 100, 300).
			OnNode(rejectedOn).WriteStale("k", "4", "b", 500, 510, "5").
			OnNode("res").Write("k", "4", "c", 3600, 3610)
	}
	a := directAnomaly(t, checkBuilt(t, build("res")), checkers.KindStaleWriteAccepted)
	require.NotNil(t, a.Cause)
	assert.Equal(t, -1, a.Cause.Fault)
	assert.Equal(t, "can be explained by idle time (a resource that forgets a key's mark after idle time, by an expiry or an eviction, does this): the key had no write that may have taken effect for 3.59 s (0.01–3.60 s) since the overwritten write, and the resource still rejected token 4 at 0.50 s, after every fault that can lose a mark had ended", a.Cause.Text)

	a = directAnomaly(t, checkBuilt(t, build("res-2")), checkers.KindStaleWriteAccepted)
	require.NotNil(t, a.Cause)
	assert.Equal(t, "restart", a.Cause.Nemesis, "another node's rejection says nothing of res's mark")
	// The quiet time after the restart is named after it: a resource that
	// forgets idle keys would do this too.
	assert.Equal(t, "can be explained by the restart of res (0.10–0.30 s) since the overwritten write, or by idle time (a resource that forgets a key's mark after idle time, by an expiry or an eviction, does this): the key had no write that may have taken effect for 3.30 s (0.30–3.60 s) since the overwritten write", a.Cause.Text)

	a = directAnomaly(t, checkBuilt(t, historytest.New().
		Write("k", "5", "a", 0, 10).
		Fault("restart", "res", 100, 300).
		WriteStale("k", "4", "b", 500, 510, "5").
		Write("k", "4", "c", 3600, 3610)), checkers.KindStaleWriteAccepted)
	require.NotNil(t, a.Cause)
	assert.Equal(t, "restart", a.Cause.Nemesis, "a history that names no node: the rejection may be another replica's")

	// A holder's pause makes a write late; it cannot have the resource
	// accept it once the resource showed it still knew the mark, and it
	// comes after the idle time without that.
	holders := map[string]any{"mode": "holder"}
	a = directAnomaly(t, checkBuilt(t, build("res").FaultWith("pause", "client", 3000, 3550, holders)), checkers.KindStaleWriteAccepted)
	require.NotNil(t, a.Cause)
	assert.Equal(t, -1, a.Cause.Fault)
	assert.Empty(t, a.Cause.Also, "after the rejection, a delay explains nothing")
	a = directAnomaly(t, checkBuilt(t, build("res-2").FaultWith("pause", "client", 3000, 3550, holders)), checkers.KindStaleWriteAccepted)
	require.NotNil(t, a.Cause)
	assert.Equal(t, "restart", a.Cause.Nemesis, "a fault that loses state goes before idle time")
	a = directAnomaly(t, checkBuilt(t, historytest.New().
		OnNode("res").Write("k", "5", "a", 0, 10).
		FaultWith("pause", "client", 3000, 3550, holders).
		OnNode("res").Write("k", "4", "c", 3600, 3610)), checkers.KindStaleWriteAccepted)
	require.NotNil(t, a.Cause)
	assert.Equal(t, -1, a.Cause.Fault)
	assert.Equal(t, "can be explained by idle time (a resource that forgets a key's mark after idle time, by an expiry or an eviction, does this): the key had no write that may have taken effect for 3.59 s (0.01–3.60 s) since the overwritten write, or by the pause (holder) of client (3.00–3.55 s)", a.Cause.Text)
	require.Len(t, a.Cause.Also, 1)
	assert.Equal(t, "pause", a.Cause.Also[0].Nemesis)

	// A fault after the rejection still explains it, in the narrowed window.
	a = directAnomaly(t, checkBuilt(t, build("res").Fault("restart", "res", 3000, 3200)), checkers.KindStaleWriteAccepted)
	require.NotNil(t, a.Cause)
	assert.Equal(t, "can be explained by the restart of res (3.00–3.20 s) since the resource last rejected a token at least as new (4, at 0.50 s), or by idle time (a resource that forgets a key's mark after idle time, by an expiry or an eviction, does this): the key had no write that may have taken effect for 2.99 s (0.01–3.00 s) since the overwritten write", a.Cause.Text)
	assert.Zero(t, a.Cause.Idle, "a fault that can lose state is the cause; idle time one more hypothesis")
}

// An issuer that forgets a free lock's counter: the regrant after the idle
// time is named as that, not as the last fault event.
func TestIdleTimeExplainsARegrantNoFaultExplains(t *testing.T) {
	rep := checkBuilt(t, historytest.New().
		OnNode("iss").Acquire("l1", 0, 10, "7").
		OnNode("iss").Release("l1", "7", 20, 30).
		Fault("strip", "client", 100, 200).
		OnNode("iss").Acquire("l1", 5000, 5010, "1"))
	a := directAnomaly(t, rep, checkers.KindTokenRegression)
	require.NotNil(t, a.Cause)
	assert.True(t, a.Cause.Explains)
	assert.Equal(t, -1, a.Cause.Fault)
	assert.Equal(t, "can be explained by idle time (an issuer that forgets a free lock's counter after idle time does this): the lock had no grant, renewal or release for 4.97 s (0.03–5.00 s) between the acquires", a.Cause.Text)

	// A restart between the grants is the likelier cause, and is named.
	rep = checkBuilt(t, historytest.New().
		OnNode("iss").Acquire("l1", 0, 10, "7").
		OnNode("iss").Release("l1", "7", 20, 30).
		Fault("restart", "iss", 100, 200).
		OnNode("iss").Acquire("l1", 5000, 5010, "1"))
	a = directAnomaly(t, rep, checkers.KindTokenRegression)
	require.NotNil(t, a.Cause)
	assert.Equal(t, "restart", a.Cause.Nemesis)
	assert.Zero(t, a.Cause.Idle)
}

// The idle-time rule's look-back has a budget for the whole analysis; once
// spent, the fault rule alone names causes (a history of millions with a
// violation on most writes must not take minutes).
func TestTheIdleRuleStopsAtItsBudget(t *testing.T) {
	defer func(old int64) { maxCauseScan = old }(maxCauseScan)
	maxCauseScan = 0
	rep := checkBuilt(t, historytest.New().
		OnNode("res").Write("k0", "9", "x", 0, 5).
		OnNode("res").Write("k1", "2", "a", 0, 10).
		OnNode("res").Write("k1", "1", "b", 3500, 3510))
	a := directAnomaly(t, rep, checkers.KindStaleWriteAccepted)
	assert.Nil(t, a.Cause, "no fault and no budget: nothing named")
}

// After a mark or a counter was forgotten, the violations that follow are
// the same forgetting: the idle time inside their windows names them, and
// they join the first one's root cause.
func TestViolationsAfterTheForgettingJoinItsRootCause(t *testing.T) {
	rep := checkBuilt(t, historytest.New().
		OnNode("iss").Acquire("l1", 0, 10, "7").
		OnNode("iss").Release("l1", "7", 20, 30).
		OnNode("iss").Acquire("l1", 5000, 5010, "1").
		OnNode("iss").Release("l1", "1", 5020, 5030).
		OnNode("iss").Acquire("l1", 5100, 5110, "2").
		OnNode("res").Write("k", "5", "a", 0, 10).
		OnNode("res").Write("k", "3", "b", 3600, 3610).
		OnNode("res").Write("k", "4", "c", 3700, 3710))
	require.Len(t, rep.RootCauses, 2, "%+v", rep.RootCauses)
	for _, g := range rep.RootCauses {
		assert.Equal(t, 2, g.Count, g.Sentence)
		require.NotNil(t, g.Cause)
		assert.Positive(t, g.Cause.Idle, g.Sentence)
	}
}
