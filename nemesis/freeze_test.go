package nemesis

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/history"
)

// A node frozen on a write is overtaken only if the store accepts a newer
// write on its key through another node meanwhile: the freeze takes a
// write sent while no other outage is live (its own is), and holds new
// outages back until a write on a key held in the frozen node is accepted
// elsewhere; none holds it past that.
func TestAFreezeOnAWriteHoldsOutagesUntilOvertaken(t *testing.T) {
	target := &frozenAdapters{frozen: map[string]time.Time{}}
	rec := history.NewRecorder(&bytes.Buffer{})
	acks := history.NewAcks()
	rec.Listen(acks.Observe)
	env := &Env{Target: target, Acks: acks, TTL: time.Second, claims: newClaims()}
	const own, crash = 1, 2
	require.True(t, env.claims.startOutage(own, time.Time{}), "the freeze's own outage")
	require.True(t, env.claims.startOutage(crash, time.Time{}), "a crash of the store is live")
	p := Plan{Nodes: []string{"a1"}, TakesOver: true, Outage: true, Params: &pauseParams{Mode: PauseNode, OnWrite: true}}
	started := make(chan *Fault, 1)
	go func() {
		f, err := (&pause{}).Start(context.Background(), env, p)
		assert.NoError(t, err)
		started <- f
	}()
	frozen := func() bool { target.mu.Lock(); defer target.mu.Unlock(); return !target.frozen["a1"].IsZero() }
	write := func(typ history.Type, key, node string) int64 {
		return rec.Record(history.Event{Process: 1, Type: typ, F: history.Write, Key: key, Node: node}).Index
	}
	time.Sleep(50 * time.Millisecond)
	// Contended for the first half of the wait: a write on a key granted
	// through a2.
	rec.Record(history.Event{Process: 2, Type: history.Ok, F: history.Acquire, Key: "k", Node: "a2"})
	write(history.Invoke, "k", "a1")
	time.Sleep(50 * time.Millisecond)
	assert.False(t, frozen(), "no freeze while the store's crash is live: nothing would overtake it")
	env.claims.release(crash)
	var w int64
	require.Eventually(t, func() bool {
		if !frozen() {
			rec.Record(history.Event{Process: 2, Type: history.Ok, F: history.Acquire, Key: "k", Node: "a2"})
			w = write(history.Invoke, "k", "a1")
		}
		return frozen()
	}, 2*time.Second, 5*time.Millisecond)
	f := <-started
	assert.Equal(t, true, f.Details["timed"])
	assert.Equal(t, w, f.Details["write_index"])

	// Held: a write accepted through a2 on another key does not end it,
	// nor one on the key through the frozen node.
	write(history.Ok, "other", "a2")
	write(history.Ok, "k", "a1")
	time.Sleep(20 * time.Millisecond)
	assert.False(t, env.claims.startOutage(3, time.Time{}), "outages wait while the frozen write awaits its newer one")
	// A key sent to the frozen node after the freeze is held there too.
	write(history.Invoke, "late", "a1")
	write(history.Ok, "late", "a2")
	assert.Eventually(t, func() bool { return env.claims.startOutage(4, time.Time{}) }, time.Second, time.Millisecond,
		"once a write on a held key is accepted through another node, outages start again")
	require.NoError(t, f.Stop(context.Background()))
}

// The hold ends with the freeze, whether or not the write was overtaken.
func TestAFreezeOnAWriteStopsHoldingWhenItEnds(t *testing.T) {
	target := &frozenAdapters{frozen: map[string]time.Time{}}
	rec := history.NewRecorder(&bytes.Buffer{})
	acks := history.NewAcks()
	rec.Listen(acks.Observe)
	env := &Env{Target: target, Acks: acks, TTL: time.Second, claims: newClaims()}
	require.True(t, env.claims.startOutage(1, time.Time{}))
	p := Plan{Nodes: []string{"a1"}, Outage: true, Params: &pauseParams{Mode: PauseNode, OnWrite: true}}
	started := make(chan *Fault, 1)
	go func() {
		f, err := (&pause{}).Start(context.Background(), env, p)
		assert.NoError(t, err)
		started <- f
	}()
	require.Eventually(t, func() bool {
		select {
		case f := <-started:
			started <- f
			return true
		default:
			rec.Record(history.Event{Process: 1, Type: history.Invoke, F: history.Write, Key: "k", Node: "a1"})
			return false
		}
	}, 3*time.Second, 5*time.Millisecond)
	f := <-started
	assert.False(t, env.claims.startOutage(2, time.Time{}))
	require.NoError(t, f.Stop(context.Background()))
	assert.True(t, env.claims.startOutage(3, time.Time{}), "the freeze's end ends the hold")
}

// A write answered, or stripped of its token on its way, before the freeze
// would come holds nothing valid in the node: the freeze passes it over
// and takes the next one.
func TestAFreezeOnAWritePassesOverOneAnsweredOrStripped(t *testing.T) {
	rec := history.NewRecorder(&bytes.Buffer{})
	acks := history.NewAcks()
	rec.Listen(acks.Observe)
	env := &Env{Acks: acks}
	got := make(chan map[string]any, 1)
	const after = 300 * time.Millisecond
	go func() {
		details := map[string]any{}
		_, err := awaitWriteSent(context.Background(), env, "a1", after, details)
		assert.NoError(t, err)
		got <- details
	}()
	time.Sleep(50 * time.Millisecond)
	rec.Record(history.Event{Process: 1, Type: history.Invoke, F: history.Write, Key: "k1", Value: "v1", Node: "a1"})
	time.Sleep(20 * time.Millisecond)
	rec.Record(history.Event{Process: 1, Type: history.Ok, F: history.Write, Key: "k1", Value: "v1", Node: "a1"})
	time.Sleep(after)
	rec.Record(history.Event{Process: 2, Type: history.Invoke, F: history.Write, Key: "k2", Value: "v2", Node: "a1"})
	time.Sleep(20 * time.Millisecond)
	rec.Record(history.Event{Process: history.NemesisProcess, Type: history.Info, F: history.Tamper, Key: "k2", Value: "v2", Node: "a1"})
	time.Sleep(after)
	w := rec.Record(history.Event{Process: 3, Type: history.Invoke, F: history.Write, Key: "k3", Value: "v3", Node: "a1"})
	d := <-got
	assert.Equal(t, true, d["timed"])
	assert.Equal(t, w.Index, d["write_index"], "neither the answered write nor the stripped one")
}
