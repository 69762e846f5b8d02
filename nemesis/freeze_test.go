package nemesis

import (
	"bytes"
	"context"
	"encoding/json"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/history"
)

// A write answered, or stripped of its token on its way, before the freeze
// would come holds nothing valid in the node: the freeze passes it over
// and takes the next one.
func TestAFreezeOnAWritePassesOverOneAnsweredOrStripped(t *testing.T) {
	rec, acks := ackedRecorder(&bytes.Buffer{})
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

// A write sent late by intent (a straggler's after a restart, a woken
// holder's, an idle probe's) is passed over: its client goes no further
// with the key, so no newer write of its own overtakes it.
func TestAFreezeOnAWritePassesOverOneSentLateByIntent(t *testing.T) {
	rec, got := awaitingFreeze(t)
	for i, k := range []string{history.ExtraStraggler, history.ExtraStalled, history.ExtraIdle} {
		rec.Record(history.Event{Process: i + 1, Type: history.Invoke, F: history.Write, Key: "k", Node: "a1",
			Extra: map[string]json.RawMessage{k: json.RawMessage(`1`)}})
	}
	// A holder's write with its lease belief (its clock was off) is not late.
	w := rec.Record(history.Event{Process: 4, Type: history.Invoke, F: history.Write, Key: "k", Node: "a1",
		Extra: map[string]json.RawMessage{history.ExtraLeaseLeft: json.RawMessage(`400`)}})
	d := <-got
	assert.Equal(t, true, d["timed"])
	assert.Equal(t, w.Index, d["write_index"], "the first write its client goes on from")
}

// awaitingFreeze starts a freeze's wait for a write sent to a1, and gives
// the recorder to send writes through and the freeze's details once it
// took one.
func awaitingFreeze(t *testing.T) (*history.Recorder, chan map[string]any) {
	rec, acks := ackedRecorder(&bytes.Buffer{})
	env := &Env{Acks: acks}
	got := make(chan map[string]any, 1)
	go func() {
		details := map[string]any{}
		_, err := awaitWriteSent(context.Background(), env, "a1", 0, details)
		assert.NoError(t, err)
		got <- details
	}()
	time.Sleep(50 * time.Millisecond)
	return rec, got
}

// A freeze that holds a write is held past its drawn length until a write
// on its key with a newer token is accepted through another node, and at most its
// HoldFor more: the store's own faults often took the second the newer
// write needed (redis: a crash, a restart, a clock step back). The
// schedule records the length it had, so a replay holds it as long.
func TestAFreezeIsHeldUntilItsWriteIsOvertaken(t *testing.T) {
	for _, overtaken := range []bool{true, false} {
		target := &frozenAdapters{frozen: map[string]time.Time{}}
		var buf bytes.Buffer
		rec, acks := ackedRecorder(&buf)
		env := &Env{Target: target, Acks: acks, TTL: time.Second}
		s := NewScheduler(env, rec, 1, []Nemesis{&pause{}})
		s.Guide()
		p := Plan{Nodes: []string{"a1"}, TakesOver: true, Outage: true, Params: &pauseParams{Mode: PauseNode, OnWrite: true}}
		go func() {
			time.Sleep(50 * time.Millisecond)
			rec.Record(history.Event{Process: 1, Type: history.Invoke, F: history.Write, Key: "k", Node: "a1", Token: "5"})
		}()
		id, d := s.start(context.Background(), &pause{}, p, func() time.Duration { return 100 * time.Millisecond }, time.Time{})
		require.Positive(t, id)
		s.mu.Lock()
		s.active[id].fault.HoldFor = 400 * time.Millisecond
		s.mu.Unlock()
		go func() {
			time.Sleep(d + 100*time.Millisecond)
			// Neither a write on another key, nor one through the frozen
			// node, nor its writer's retry with the same token through the
			// other ends it: only a newer token's does.
			rec.Record(history.Event{Process: 2, Type: history.Ok, F: history.Write, Key: "k2", Node: "a2", Token: "9"})
			rec.Record(history.Event{Process: 3, Type: history.Ok, F: history.Write, Key: "k", Node: "a1", Token: "9"})
			rec.Record(history.Event{Process: 1, Type: history.Ok, F: history.Write, Key: "k", Node: "a2", Token: "5"})
			if overtaken {
				time.Sleep(100 * time.Millisecond)
				rec.Record(history.Event{Process: 4, Type: history.Ok, F: history.Write, Key: "k", Node: "a2", Token: "6"})
			}
		}()
		began := time.Now()
		require.True(t, sleep(context.Background(), d))
		require.True(t, s.holdOn(context.Background(), id))
		held := time.Since(began) - d
		s.endOrKeep(context.Background(), id)
		if overtaken {
			assert.True(t, held > 150*time.Millisecond && held < 350*time.Millisecond, "held %s: until the newer write", held)
			assert.Contains(t, buf.String(), `"made":true`)
		} else {
			assert.True(t, held >= 400*time.Millisecond && held < 550*time.Millisecond, "held %s: its HoldFor", held)
			assert.Contains(t, buf.String(), `"made":false`)
		}
		sched := s.Planned(time.Second, "pause")
		require.Len(t, sched.Faults, 1)
		assert.InDelta(t, float64(d+held), float64(sched.Faults[0].Duration), float64(20*time.Millisecond), "the schedule has the length it had")
	}
}

// A freeze on a write is refused, and nothing frozen, when the other node
// writes go through was taken while it waited for the write (a node pause
// of pause's own draws froze the other redis adapter 50 ms after the aimed
// freeze had taken the first): nothing could overtake the frozen write.
func TestAFreezeOnAWriteNeedsAnotherWritePathFree(t *testing.T) {
	for _, otherHeld := range []bool{true, false} {
		target := &frozenAdapters{frozen: map[string]time.Time{}}
		rec, acks := ackedRecorder(&bytes.Buffer{})
		env := &Env{Target: target, Acks: acks, TTL: time.Second}
		NewScheduler(env, rec, 1, []Nemesis{&pause{}})
		if otherHeld {
			require.True(t, env.claims.claimAll([]string{"a2"}, 99))
		}
		go func() {
			time.Sleep(50 * time.Millisecond)
			rec.Record(history.Event{Process: 1, Type: history.Invoke, F: history.Write, Key: "k", Node: "a1"})
		}()
		f, err := (&pause{}).Start(context.Background(), env, Plan{Nodes: []string{"a1"}, TakesOver: true, Outage: true,
			Params: &pauseParams{Mode: PauseNode, OnWrite: true}})
		target.mu.Lock()
		_, frozen := target.frozen["a1"]
		target.mu.Unlock()
		if otherHeld {
			assert.ErrorIs(t, err, ErrRefusedNow)
			assert.False(t, frozen)
			continue
		}
		require.NoError(t, err)
		assert.True(t, frozen)
		assert.NotNil(t, f.Made, "a freeze that holds a write watches for the newer one")
		require.NoError(t, f.Stop(context.Background()))
	}
}

// Under the guided schedule pause's own draws freeze no node that keeps
// state: those are the conductor's (two members frozen by turns held an
// etcd member's replacement 5 s). The stateless ones are still drawn, and
// every node is when the faults are drawn at random.
func TestGuidedPauseDrawsFreezeOnlyStatelessNodes(t *testing.T) {
	for _, guided := range []bool{true, false} {
		env := &Env{Target: &frozenAdapters{frozen: map[string]time.Time{}}, Holders: &holders{}, TTL: time.Second}
		s := NewScheduler(env, history.NewRecorder(&bytes.Buffer{}), 1, []Nemesis{&pause{}})
		if guided {
			s.Guide()
		}
		frozen := map[string]int{}
		rng := rand.New(rand.NewPCG(1, 2))
		for range 400 {
			p, err := (&pause{}).Draw(context.Background(), env, rng)
			require.NoError(t, err)
			if pp := p.Params.(*pauseParams); pp.Mode == PauseNode {
				frozen[p.Nodes[0]]++
			}
		}
		assert.Positive(t, frozen["a1"], "guided %v: %v", guided, frozen)
		assert.Positive(t, frozen["a2"], "guided %v: %v", guided, frozen)
		if guided {
			assert.Zero(t, frozen["db"], "the store is the conductor's: %v", frozen)
		} else {
			assert.Positive(t, frozen["db"], "%v", frozen)
		}
	}
}

// A freeze that waits for a write gives up, freezing nothing, when the
// main phase ends first: its start goes on past that end (a start is not
// cut short), and a freeze 2 s after the main phase held nothing a newer
// write could overtake (redis, seed 3).
func TestAFreezeOnAWriteGivesUpAtTheMainPhasesEnd(t *testing.T) {
	target := &frozenAdapters{frozen: map[string]time.Time{}}
	rec, acks := ackedRecorder(&bytes.Buffer{})
	env := &Env{Target: target, Acks: acks, TTL: time.Second}
	NewScheduler(env, rec, 1, []Nemesis{&pause{}})
	main, end := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, end)
	began := time.Now()
	_, err := (&pause{}).Start(withMainPhase(context.WithoutCancel(main), main), env, Plan{Nodes: []string{"a1"}, TakesOver: true, Outage: true,
		Params: &pauseParams{Mode: PauseNode, OnWrite: true}})
	assert.ErrorIs(t, err, ErrRefusedNow)
	assert.Less(t, time.Since(began), time.Second, "not its whole wait for a write")
	assert.Empty(t, target.frozen)
}
