package fast

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/checkers/historytest"
	"github.com/fencecheck/fencecheck/checkers/porcupine"
	"github.com/fencecheck/fencecheck/history"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var (
	reject = checkers.Semantics{Equal: checkers.EqualReject, Scope: checkers.ScopePerLock}
	accept = checkers.Semantics{Equal: checkers.EqualAccept, Scope: checkers.ScopePerLock}
)

// fastRegister checks a history with the fast checker and returns the
// register's result.
func fastRegister(t *testing.T, b *historytest.Builder, sem checkers.Semantics) checkers.Result {
	t.Helper()
	res, err := CheckEvents(b.Events(), sem)
	require.NoError(t, err)
	require.Equal(t, checkers.ModelRegister, res[0].Model)
	require.Equal(t, checkers.CheckerFast, res[0].Checker)
	return res[0]
}

// invokeOf is the op ID (invoke index) of the operation invoked at callMS
// on key (unique in these tests).
func invokeOf(t *testing.T, b *historytest.Builder, key string, callMS int64) int64 {
	t.Helper()
	for _, e := range b.Events() {
		if e.Type == history.Invoke && e.Key == key && e.Time == callMS*1e6 {
			return e.Index
		}
	}
	t.Fatalf("no op invoked at %d ms on %s", callMS, key)
	return -1
}

func requireAnomaly(t *testing.T, r checkers.Result, kind string) checkers.Anomaly {
	t.Helper()
	require.Equal(t, checkers.Invalid, r.Verdict, "anomalies: %v", r.Anomalies)
	for _, a := range r.Anomalies {
		if a.Kind == kind {
			return a
		}
	}
	t.Fatalf("no %s anomaly in %v", kind, r.Anomalies)
	return checkers.Anomaly{}
}

func TestFastValidSequence(t *testing.T) {
	b := historytest.New().
		Read("k", 0, 5, "", "").
		Write("k", "1", "a", 10, 20).
		Read("k", 25, 30, "a", "1").
		WriteStale("k", "1", "b", 35, 40, "1").
		Write("k", "2", "c", 45, 50).
		WriteFail("k", "", "d", 55, 60, "missing-token").
		Read("k", 65, 70, "c", "2")
	for _, sem := range []checkers.Semantics{reject, accept} {
		r := fastRegister(t, b, sem)
		if sem.Equal == checkers.EqualReject {
			assert.Equal(t, checkers.Valid, r.Verdict, "%v", r.Anomalies)
			assert.Equal(t, 7, r.Ops)
			assert.Equal(t, 1, r.Keys)
		} else {
			// Under accept an equal token is not stale: the rejection of
			// token 1 at high-water 1 is false.
			requireAnomaly(t, r, checkers.KindFalseStaleRejection)
		}
	}
}

func TestFastStaleWriteAccepted(t *testing.T) {
	b := historytest.New().
		Write("k", "34", "new", 0, 10).
		Write("k", "33", "old", 20, 30)
	a := requireAnomaly(t, fastRegister(t, b, reject), checkers.KindStaleWriteAccepted)
	assert.ElementsMatch(t, []int64{invokeOf(t, b, "k", 0), invokeOf(t, b, "k", 20)}, a.Ops)
	assert.Equal(t, int64(30e6), a.At, "visible when the late write returned")
	assert.Contains(t, a.Text, "old")
	assert.Contains(t, a.Text, "token 33")
	// Concurrent, the older token may have gone first.
	c := historytest.New().Write("k", "34", "new", 0, 25).Write("k", "33", "old", 20, 30)
	assert.Equal(t, checkers.Valid, fastRegister(t, c, reject).Verdict)
}

func TestFastEqualTokens(t *testing.T) {
	b := historytest.New().
		Write("k", "5", "a", 0, 10).
		Write("k", "5", "b", 20, 30).
		Read("k", 40, 50, "b", "5")
	a := requireAnomaly(t, fastRegister(t, b, reject), checkers.KindReplayAccepted)
	assert.Len(t, a.Ops, 2)
	assert.Equal(t, checkers.Valid, fastRegister(t, b, accept).Verdict)
	// Concurrent equal tokens are a replay under reject too.
	c := historytest.New().Write("k", "5", "a", 0, 30).Write("k", "5", "b", 10, 20)
	requireAnomaly(t, fastRegister(t, c, reject), checkers.KindReplayAccepted)
}

func TestFastMissingAndMalformedTokens(t *testing.T) {
	b := historytest.New().Write("k", "", "a", 0, 10)
	requireAnomaly(t, fastRegister(t, b, reject), checkers.KindMissingTokenAccepted)
	b = historytest.New().Write("k", "x1", "a", 0, 10)
	requireAnomaly(t, fastRegister(t, b, accept), checkers.KindMalformedTokenAccepted)
	// The proxy stripped the token; the resource accepted the write anyway.
	b = historytest.New().Write("k", "7", "a", 0, 10).Strip("k", "a", "", "remove", 5)
	a := requireAnomaly(t, fastRegister(t, b, reject), checkers.KindMissingTokenAccepted)
	assert.Contains(t, a.Text, "strip proxy")
	// An unknown-outcome tokenless write is fine until someone reads it.
	b = historytest.New().WriteInfo("k", "", "a", 0, 10)
	assert.Equal(t, checkers.Valid, fastRegister(t, b, reject).Verdict)
	b.Read("k", 20, 30, "a", "")
	requireAnomaly(t, fastRegister(t, b, reject), checkers.KindMissingTokenAccepted)
	// Authenticated targets must not accept unsealed tokens.
	b = historytest.New().Write("k", "9", "a", 0, 10)
	requireAnomaly(t, fastRegister(t, b, checkers.Semantics{Equal: checkers.EqualReject, Authenticated: true}), checkers.KindForgedTokenAccepted)
	b = historytest.New().Write("k", "9.abc", "a", 0, 10)
	assert.Equal(t, checkers.Valid, fastRegister(t, b, checkers.Semantics{Equal: checkers.EqualReject, Authenticated: true}).Verdict)
}

func TestFastStaleRead(t *testing.T) {
	b := historytest.New().
		Write("k", "1", "a", 0, 10).
		Write("k", "2", "b", 20, 30).
		Read("k", 40, 50, "a", "1")
	for _, sem := range []checkers.Semantics{reject, accept} {
		a := requireAnomaly(t, fastRegister(t, b, sem), checkers.KindStaleRead)
		assert.ElementsMatch(t, []int64{invokeOf(t, b, "k", 0), invokeOf(t, b, "k", 20), invokeOf(t, b, "k", 40)}, a.Ops)
		assert.Equal(t, int64(50e6), a.At)
	}
	// A read of nothing after a write completed is stale too.
	c := historytest.New().Write("k", "1", "a", 0, 10).Read("k", 20, 30, "", "")
	requireAnomaly(t, fastRegister(t, c, reject), checkers.KindStaleRead)
}

func TestFastReadsOfWrongValues(t *testing.T) {
	b := historytest.New().Read("k", 0, 10, "ghost", "3")
	requireAnomaly(t, fastRegister(t, b, reject), checkers.KindPhantomRead)
	b = historytest.New().WriteStale("k", "1", "a", 0, 10, "5").Read("k", 20, 30, "a", "1")
	requireAnomaly(t, fastRegister(t, b, reject), checkers.KindReadOfRejectedWrite)
	b = historytest.New().Write("k", "1", "a", 0, 10).Read("k", 20, 30, "a", "2")
	requireAnomaly(t, fastRegister(t, b, reject), checkers.KindReadTokenMismatch)
	b = historytest.New().Read("k", 0, 10, "a", "1").Write("k", "1", "a", 20, 30)
	requireAnomaly(t, fastRegister(t, b, reject), checkers.KindFutureRead)
}

func TestFastInfoWrites(t *testing.T) {
	// Observed info write: it took effect.
	b := historytest.New().
		WriteInfo("k", "1", "a", 0, 10).
		Read("k", 20, 30, "a", "1")
	assert.Equal(t, checkers.Valid, fastRegister(t, b, reject).Verdict)
	// Observed, but a newer accepted write had completed before the read.
	b.Write("k", "2", "b", 12, 15)
	requireAnomaly(t, fastRegister(t, b, reject), checkers.KindStaleRead)
	// Observed info write with an older token than one accepted before it
	// was even invoked.
	c := historytest.New().
		Write("k", "5", "new", 0, 10).
		WriteInfo("k", "4", "late", 20, 30).
		Read("k", 40, 50, "late", "4")
	requireAnomaly(t, fastRegister(t, c, reject), checkers.KindStaleWriteAccepted)
}

// (These rejections report no high-water: the threshold rules alone.)
func TestFastStaleRejectionsAndInfoWrites(t *testing.T) {
	// No write could have raised the high-water to 5.
	b := historytest.New().Write("k", "3", "a", 0, 10).WriteStale("k", "5", "b", 20, 30, "")
	a := requireAnomaly(t, fastRegister(t, b, reject), checkers.KindFalseStaleRejection)
	assert.Equal(t, int64(30e6), a.At)
	// An unknown-outcome write with token 6 invoked before the rejection
	// returned may have: valid.
	b.WriteInfo("k", "6", "c", 25, 40)
	assert.Equal(t, checkers.Valid, fastRegister(t, b, reject).Verdict)
	// Invoked only after the rejection: it cannot justify it.
	c := historytest.New().Write("k", "3", "a", 0, 10).WriteStale("k", "5", "b", 20, 30, "").WriteInfo("k", "6", "c", 35, 40)
	requireAnomaly(t, fastRegister(t, c, reject), checkers.KindFalseStaleRejection)
	// Equal tokens: stale under reject, not under accept.
	d := historytest.New().Write("k", "5", "a", 0, 10).WriteStale("k", "5", "b", 20, 30, "")
	assert.Equal(t, checkers.Valid, fastRegister(t, d, reject).Verdict)
	requireAnomaly(t, fastRegister(t, d, accept), checkers.KindFalseStaleRejection)
}

// The choice of unknown-outcome writes is exact: here one must be taken
// (it alone justifies a rejection) and another must not (it would push an
// accepted write past its return), and a greedy rule in either direction
// gets one of them wrong.
func TestFastInfoChoiceIsExact(t *testing.T) {
	mustTake := historytest.New().
		WriteStale("k", "1", "s", 0, 45, "").
		WriteInfo("k", "2", "u", 40, 100).
		Write("k", "3", "w", 46, 50)
	assert.Equal(t, checkers.Valid, fastRegister(t, mustTake, reject).Verdict)
	mustSkip := historytest.New().
		WriteStale("k", "1", "s", 0, 70, "").
		WriteInfo("k", "2", "u", 60, 100).
		Write("k", "3", "w", 0, 50)
	assert.Equal(t, checkers.Valid, fastRegister(t, mustSkip, reject).Verdict)
	// Both at once on one key, in token order.
	both := historytest.New().
		WriteStale("k", "1", "s1", 0, 45, "").
		WriteInfo("k", "2", "u1", 40, 100).
		Write("k", "3", "w1", 46, 50).
		WriteStale("k", "4", "s2", 52, 170, "").
		WriteInfo("k", "5", "u2", 160, 200).
		Write("k", "6", "w2", 52, 150)
	assert.Equal(t, checkers.Valid, fastRegister(t, both, reject).Verdict)
}

// Equal tokens (accept): the write called first cannot go first when the
// other's read returned before its own read began.
func TestFastEqualTokenGroupOrder(t *testing.T) {
	b := historytest.New().
		Write("k", "2", "e1", 1, 20).
		Read("k", 10, 15, "e1", "2").
		Write("k", "2", "e2", 5, 6).
		WriteStale("k", "1", "s", 0, 3, "")
	requireAnomaly(t, fastRegister(t, b, accept), checkers.KindFalseStaleRejection)
	ok := historytest.New().
		Write("k", "2", "e1", 1, 20).
		Read("k", 10, 15, "e1", "2").
		Write("k", "2", "e2", 5, 6).
		WriteStale("k", "1", "s", 0, 7, "")
	assert.Equal(t, checkers.Valid, fastRegister(t, ok, accept).Verdict)
	// Two equal-token writes each read after the other's read returned.
	cyc := historytest.New().
		Write("k", "2", "x", 0, 5).
		Write("k", "2", "y", 0, 5).
		Read("k", 10, 11, "x", "2").
		Read("k", 12, 13, "y", "2").
		Read("k", 14, 15, "x", "2")
	requireAnomaly(t, fastRegister(t, cyc, accept), checkers.KindNotLinearizable)
}

func TestFastIssuer(t *testing.T) {
	issuer := func(b *historytest.Builder, sem checkers.Semantics) checkers.Result {
		res, err := CheckEvents(b.Events(), sem)
		require.NoError(t, err)
		require.Equal(t, checkers.ModelIssuer, res[1].Model)
		return res[1]
	}
	b := historytest.New().
		Acquire("l", 0, 10, "1").
		Acquire("l", 20, 30, "2").
		AcquireFail("l", 25, 26).
		AcquireInfo("l", 31, 40).
		Acquire("m", 35, 45, "1")
	assert.Equal(t, checkers.Valid, issuer(b, reject).Verdict)
	g := issuer(b, checkers.Semantics{Equal: checkers.EqualReject, Scope: checkers.ScopeGlobal})
	a := requireAnomaly(t, g, checkers.KindTokenRegression)
	assert.Equal(t, int64(45e6), a.At)
	b.Acquire("l", 50, 60, "2")
	requireAnomaly(t, issuer(b, reject), checkers.KindDuplicateToken)
	c := historytest.New().Acquire("l", 0, 10, "3").Acquire("l", 5, 15, "3")
	requireAnomaly(t, issuer(c, reject), checkers.KindDuplicateToken)
	d := historytest.New().Acquire("l", 0, 10, "")
	requireAnomaly(t, issuer(d, reject), checkers.KindInvalidTokenIssued)
}

// Acceptance: a planted stale read in a contended history with unknown-
// outcome writes (50 clients on one key, 10% info) is found by the fast
// checker, while Porcupine alone cannot answer in its budget. (At 20 clients
// Porcupine often finds a late planted read by itself.)
func TestFastFindsPlantedStaleReadPorcupineCannot(t *testing.T) {
	h := historytest.Simulate(historytest.SimConfig{Seed: 7, Ops: 3000, Keys: 1, ClientsPerKey: 50, InfoRate: 0.1, Tick: 1_000_000, MaxDur: 40})
	require.True(t, h.PlantStaleRead())
	events := h.Events()
	res, err := CheckEvents(events, reject)
	require.NoError(t, err)
	requireAnomaly(t, res[0], checkers.KindStaleRead)

	ops, err := history.Pair(events)
	require.NoError(t, err)
	for _, r := range porcupine.New(time.Second).Check(context.Background(), history.OpsOf(ops), reject) {
		if r.Model == checkers.ModelRegister {
			assert.Equal(t, checkers.Unknown, r.Verdict, "porcupine is not expected to decide 3000 operations of 50 clients on one key in 1 s")
		}
	}
	// Through the analysis with both checkers, the fast answer decides:
	// analysis's TestFastDecidesWherePorcupineCannot.
	// The same history unplanted is valid.
	h = historytest.Simulate(historytest.SimConfig{Seed: 7, Ops: 3000, Keys: 1, ClientsPerKey: 50, InfoRate: 0.1, Tick: 1_000_000, MaxDur: 40})
	res, err = CheckEvents(h.Events(), reject)
	require.NoError(t, err)
	assert.Equal(t, checkers.Valid, res[0].Verdict, "%v", res[0].Anomalies)
}

func TestFastStreamMatchesInMemory(t *testing.T) {
	h := historytest.Simulate(historytest.SimConfig{Seed: 3, Ops: 5000, Keys: 4, ClientsPerKey: 5, InfoRate: 0.05, Acquires: true})
	h.PlantStaleRead()
	var buf bytes.Buffer
	require.NoError(t, h.WriteJSONL(&buf))
	events, err := history.ReadAll(bytes.NewReader(buf.Bytes()))
	require.NoError(t, err)
	require.Equal(t, h.Events(), events, "the JSONL writer and Events agree")
	var read int64
	streamed, err := CheckReader(bytes.NewReader(buf.Bytes()), reject, func(n int64) { read = n })
	require.NoError(t, err)
	inMemory, err := CheckEvents(events, reject)
	require.NoError(t, err)
	for i := range streamed {
		streamed[i].Duration, inMemory[i].Duration = 0, 0
	}
	assert.Equal(t, inMemory, streamed)
	assert.Equal(t, int64(buf.Len()), read, "progress reaches the end")
	assert.Equal(t, checkers.Invalid, streamed[0].Verdict)
	assert.Equal(t, checkers.Valid, streamed[1].Verdict)
}

func TestFastSimulationIsValid(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		for _, sem := range []checkers.Semantics{reject, accept, {Equal: checkers.EqualReject, Scope: checkers.ScopeGlobal}} {
			h := historytest.Simulate(historytest.SimConfig{Seed: seed, Ops: 2000, Keys: 3, ClientsPerKey: 8, InfoRate: 0.1, MissingTokenRate: 0.02, Semantics: sem, Acquires: true})
			res, err := CheckEvents(h.Events(), sem)
			require.NoError(t, err)
			for _, r := range res {
				require.Equal(t, checkers.Valid, r.Verdict, "seed %d %+v %s: %v", seed, sem, r.Model, r.Anomalies)
			}
		}
	}
}

// The Checker the analysis runs: both models, complete, and an interrupted
// check is unknown, never valid. (Through the analysis: its
// TestFastThroughTheAnalysis.)
func TestFastChecker(t *testing.T) {
	b := historytest.New().Write("k", "2", "a", 0, 10).Write("k", "1", "b", 20, 30)
	for i := 0; i < 10; i++ {
		b.Read("k", int64(40+10*i), int64(45+10*i), "b", "1")
	}
	ops, err := b.Ops()
	require.NoError(t, err)
	c := New()
	assert.Equal(t, checkers.CheckerFast, c.Name())
	res := c.Check(context.Background(), history.OpsOf(ops), reject)
	require.Len(t, res, 2)
	assert.Equal(t, checkers.Invalid, res[0].Verdict)
	for _, r := range res {
		assert.True(t, r.Complete, "the fast checker decides both models")
		assert.Equal(t, checkers.CheckerFast, r.Checker)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res = c.Check(ctx, history.OpsOf(ops), reject)
	assert.Equal(t, checkers.Unknown, res[0].Verdict)
}
