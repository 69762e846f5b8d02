package workloads

import (
	"bytes"
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/history"
)

// The idle probes' time scales fit in the run: a 30 s run reaches 20 s
// (each 20 s probe starts early enough for its late write and new grant),
// a 10 s run only 1 s and 5 s, a 90 s run also two thirds of it.
func TestIdleSlotsFitTheirTimeScalesInTheRun(t *testing.T) {
	scales := func(main time.Duration) map[time.Duration]int {
		out := map[time.Duration]int{}
		for _, s := range idleSlots("ns", main) {
			out[s.idle]++
			assert.LessOrEqual(t, s.offset+s.idle+idleMargin, main, "slot %s of %s fits in %s", s.key, s.idle, main)
		}
		return out
	}
	assert.Equal(t, map[time.Duration]int{1250 * time.Millisecond: 2, 5500 * time.Millisecond: 4, 20500 * time.Millisecond: 5}, scales(30*time.Second))
	assert.Equal(t, map[time.Duration]int{1250 * time.Millisecond: 2, 5500 * time.Millisecond: 4}, scales(10*time.Second))
	assert.Equal(t, 2, scales(90 * time.Second)[60*time.Second])

	// Each scale but the shortest has one ladder, its soonest slot.
	ladders := map[time.Duration]time.Duration{}
	for _, s := range idleSlots("ns", 90*time.Second) {
		if s.ladder {
			assert.NotContains(t, ladders, s.idle, "one ladder a scale")
			ladders[s.idle] = s.offset
		}
	}
	assert.Equal(t, map[time.Duration]time.Duration{5500 * time.Millisecond: 200 * time.Millisecond,
		20500 * time.Millisecond: 200 * time.Millisecond, 60 * time.Second: 200 * time.Millisecond}, ladders)

	// "all" has the probes, on keys of their own; a list names them.
	w, err := NewFenced(Config{Clients: 2, Keys: 1, Issuers: []Conn{newFenceConn(false)}, Resources: []Conn{newFenceConn(false)}, Duration: 30 * time.Second})
	require.NoError(t, err)
	assert.Len(t, w.idle, 11)
	assert.Contains(t, w.Keys(), "i10")
	assert.Contains(t, w.KeysInWords(), "idle probes 11")
	w, err = NewFenced(Config{Clients: 2, Keys: 1, Issuers: []Conn{newFenceConn(false)}, Resources: []Conn{newFenceConn(false)}, Profile: "steady"})
	require.NoError(t, err)
	assert.Empty(t, w.idle, "a list without idle keeps its meaning")
	w, err = NewFenced(Config{Clients: 2, Keys: 1, Issuers: []Conn{newFenceConn(false)}, Resources: []Conn{newFenceConn(false)}, Profile: "idle"})
	require.NoError(t, err)
	assert.NotEmpty(t, w.idle)
	assert.Equal(t, []string{"steady", "steady"}, w.Mix(), "idle takes no writer")
}

// A probe writes two tokens, leaves the key and its lock alone for its idle
// time, writes late with the older token (a fencing resource rejects it as
// stale; one that forgot the mark meanwhile accepts it) and has the lock
// granted again.
func TestAnIdleProbeWritesLateWithTheOlderTokenAndIsGrantedAgain(t *testing.T) {
	for _, forget := range []bool{false, true} {
		conn := newFenceConn(forget)
		w, err := NewFenced(Config{Clients: 1, Keys: 1, TTL: 50 * time.Millisecond, OpTimeout: time.Second, Seed: 1,
			Issuers: []Conn{conn}, Resources: []Conn{conn}, Profile: "steady"})
		require.NoError(t, err)
		var buf bytes.Buffer
		rec := history.NewRecorder(&buf)
		ctx, cancel := context.WithCancel(context.Background())
		slot := idleSlot{key: "i0", idle: 300 * time.Millisecond}
		done := make(chan struct{})
		go func() {
			defer close(done)
			w.idler(ctx, rec, 0, slot, time.Now().Add(slot.idle+idleMargin+100*time.Millisecond))
		}()
		time.Sleep(150 * time.Millisecond)
		if forget {
			conn.restart() // during the idle time
		}
		<-done
		cancel()
		require.NoError(t, rec.Close())
		evs, err := history.ReadAll(&buf)
		require.NoError(t, err)
		var writes, lates, acquires []history.Event
		for _, e := range evs {
			switch {
			case e.F == history.Write && e.Type != history.Invoke:
				writes = append(writes, e)
			case e.F == history.Write && e.Extra[history.ExtraIdle] != nil:
				lates = append(lates, e)
			case e.F == history.Acquire && e.Type == history.Ok:
				acquires = append(acquires, e)
			}
		}
		require.Len(t, lates, 1, "one round fits")
		require.Len(t, writes, 4, "two holders' writes, the late one, the new grant's")
		require.Len(t, acquires, 3)
		assert.Equal(t, writes[0].Token, lates[0].Token, "the late write carries the first holder's token")
		assert.Less(t, tokenN(t, lates[0].Token), tokenN(t, writes[1].Token), "older than the mark")
		assert.Less(t, writes[1].Time+int64(slot.idle), lates[0].Time, "after the idle time")
		if forget {
			assert.Equal(t, history.Ok, writes[2].Type, "a resource that forgot the mark takes it")
		} else {
			assert.Equal(t, "stale", writes[2].Error)
		}
		assert.Greater(t, tokenN(t, acquires[2].Token), tokenN(t, acquires[1].Token), "granted again, newer")
	}
}

// A ladder probe writes late every ladderStep as its key sits idle, each
// write rejected as stale, up to its idle time; where the server forgets
// the mark meanwhile, the next step's write is taken and the ladder stops
// there, long before its idle time.
func TestALadderProbeWritesLateAsTheIdleTimeGrows(t *testing.T) {
	for _, forgetAt := range []time.Duration{0, 1100 * time.Millisecond} {
		conn := newFenceConn(forgetAt > 0)
		w, err := NewFenced(Config{Clients: 1, Keys: 1, TTL: 50 * time.Millisecond, OpTimeout: time.Second, Seed: 1,
			Issuers: []Conn{conn}, Resources: []Conn{conn}, Profile: "steady"})
		require.NoError(t, err)
		var buf bytes.Buffer
		rec := history.NewRecorder(&buf)
		slot := idleSlot{key: "i0", idle: 2 * time.Second, ladder: true}
		done := make(chan struct{})
		go func() {
			defer close(done)
			w.idler(context.Background(), rec, 0, slot, time.Now().Add(slot.idle+idleMargin+100*time.Millisecond))
		}()
		if forgetAt > 0 {
			time.Sleep(forgetAt)
			conn.restart() // the mark forgotten, about a second into the idle time
		}
		<-done
		require.NoError(t, rec.Close())
		evs, err := history.ReadAll(&buf)
		require.NoError(t, err)
		var idles []int
		var last history.Event // the last late write's completion
		late := map[int]bool{} // processes whose open write is late
		for _, e := range evs {
			switch {
			case e.F == history.Write && e.Type == history.Invoke && e.Extra[history.ExtraIdle] != nil:
				n, err := strconv.Atoi(string(e.Extra[history.ExtraIdle]))
				require.NoError(t, err)
				idles = append(idles, n)
				late[e.Process] = true
			case e.F == history.Write && e.Type != history.Invoke && late[e.Process]:
				last = e
				late[e.Process] = false
			}
		}
		if forgetAt == 0 {
			assert.Equal(t, []int{500, 750, 1000, 1250, 1500, 1750, 2000}, idles, "a write every step, the last after the whole idle time")
			assert.Equal(t, "stale", last.Error)
			continue
		}
		require.NotEmpty(t, idles)
		assert.Equal(t, history.Ok, last.Type, "the step after the server forgot is taken")
		assert.Less(t, idles[len(idles)-1], 1500, "found within a step or two of forgetting, not after the whole idle time: %v", idles)
		assert.Equal(t, 500, idles[0])
	}
}

// Under the guided schedule a probe of a short scale starts its rounds only
// in a calm phase that can hold one (nemesis.CalmFollower): nothing before
// the phase, the whole round, late write included, inside it.
func TestAnIdleProbeFollowsCalmPhases(t *testing.T) {
	conn := newFenceConn(false)
	w, err := NewFenced(Config{Clients: 1, Keys: 1, TTL: 50 * time.Millisecond, OpTimeout: time.Second, Seed: 1,
		Issuers: []Conn{conn}, Resources: []Conn{conn}, Profile: "steady"})
	require.NoError(t, err)
	w.FollowCalm()
	var buf bytes.Buffer
	rec := history.NewRecorder(&buf)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	slot := idleSlot{key: "i0", idle: 300 * time.Millisecond}
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.idler(ctx, rec, 0, slot, time.Time{})
	}()
	time.Sleep(200 * time.Millisecond)
	w.Calm(time.Now().Add(time.Second)) // too short for a round: 300 ms + calmRoundMargin
	time.Sleep(300 * time.Millisecond)
	calmAt := time.Duration(rec.Since(time.Now()))
	began := time.Now()
	w.Calm(time.Now().Add(slot.idle + calmRoundMargin + 200*time.Millisecond))
	time.Sleep(slot.idle + calmRoundMargin + 200*time.Millisecond)
	cancel()
	<-done
	require.NoError(t, rec.Close())
	evs, err := history.ReadAll(&buf)
	require.NoError(t, err)
	var lates, stale int
	for _, e := range evs {
		assert.GreaterOrEqual(t, time.Duration(e.Time), calmAt, "%s %s at %d: no probe operation before a calm phase that holds a round", e.Type, e.F, e.Time)
		if e.F == history.Write && e.Type == history.Invoke && e.Extra[history.ExtraIdle] != nil {
			lates++
		}
		if e.F == history.Write && e.Error == "stale" {
			stale++
		}
	}
	assert.Equal(t, 1, lates, "one round fits in the calm phase")
	assert.Equal(t, 1, stale, "its late write is rejected as stale")
	assert.False(t, w.CalmNeeded().Before(began.Add(slot.idle+calmLateMargin)), "the round said how long it needs the calm phase")
}

func tokenN(t *testing.T, s string) uint64 {
	n, err := strconv.ParseUint(s, 10, 64)
	require.NoError(t, err)
	return n
}
