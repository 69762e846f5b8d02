package nemesis

import (
	"bytes"
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/history"
)

// The guide's clock aim is a step back timed by a grant: never a strobe
// (two grants two periods apart inside it, which a crash of the one node
// took away) nor a step forward, always on a node keeping issuer state.
func TestTheClockAimStepsBackOnAGrant(t *testing.T) {
	env := &Env{Target: newFakeClocks("n1", "n2"), ClientClock: newFakeClocks("client")}
	a := aimedFault(t, env, atTarget(map[string]int{"issuer-clock-back-regrant": 0}), []Nemesis{clock{}})
	require.NotNil(t, a.plan, "the aim makes its own plan")
	rng := rand.New(rand.NewPCG(3, 3))
	for range 30 {
		p, err := a.plan(context.Background(), env, rng, a.nodes)
		require.NoError(t, err)
		cp := p.Params.(*clockParams)
		assert.Equal(t, "step", cp.Mode)
		assert.True(t, cp.OnGrant)
		assert.LessOrEqual(t, cp.OffsetMS, -clockMinOffset.Milliseconds(), "back, at its start")
		assert.True(t, a.nodes[p.Nodes[0]], "an issuer's clock first")
		assert.True(t, a.hits(p, a.nodes))
		require.NoError(t, clock{}.CheckPlan(env, p))
	}
	strobe := Plan{Nodes: []string{"n1"}, Params: &clockParams{Mode: "strobe", OffsetsMS: []int64{-900, 0}, PeriodMS: 80, OnGrant: true}}
	assert.Error(t, clock{}.CheckPlan(env, strobe), "on_grant times a step only")
}

// A step timed by a grant takes the first grant made while no fault holds
// its node (another node's does not matter) and no other fault holds
// outages back for a takeover (a step back would keep it from coming), steps, and holds new outages back until a lock sent for after the
// step is granted: the step falls between two grants with the node
// serving on both sides. While it waits for its grant it holds nothing
// back (held then, the crashes waited seconds).
func TestAStepOnAGrantFallsBetweenTwoGrants(t *testing.T) {
	var buf bytes.Buffer
	rec, acks := ackedRecorder(&buf)
	clocks := newFakeClocks("n1")
	env := &Env{Target: clocks, Acks: acks, claims: newClaims()}
	op := func(typ history.Type, f, key string) int64 {
		return rec.Record(history.Event{Process: 1, Type: typ, F: f, Key: key, Node: "n1"}).Index
	}
	stepped := func() bool { return clocks.current("n1") != 0 }

	const crash, freeze = 7, 6
	require.True(t, env.claims.claimAll([]string{"n1"}, crash))
	require.True(t, env.claims.startOutage(crash, time.Time{}), "a crash of the node is live")
	require.True(t, env.claims.claimAll([]string{"a1"}, freeze))
	require.True(t, env.claims.startOutage(freeze, time.Time{}), "and a freeze of another node, which keeps no step waiting")
	p := Plan{Nodes: []string{"n1"}, Params: &clockParams{Mode: "step", OffsetMS: -5000, OnGrant: true}}
	type started struct {
		f   *Fault
		err error
	}
	done := make(chan started, 1)
	go func() {
		f, err := clock{}.Start(context.Background(), env, p)
		done <- started{f, err}
	}()
	// While the crash is live, a grant does not time the step.
	time.Sleep(50 * time.Millisecond)
	op(history.Ok, history.Acquire, "k")
	time.Sleep(50 * time.Millisecond)
	assert.False(t, stepped(), "no step while the node's crash is live")
	env.claims.release(crash)
	_, _, unhushOther := env.claims.hush(context.Background(), 0)
	time.Sleep(20 * time.Millisecond)
	op(history.Ok, history.Acquire, "k")
	time.Sleep(50 * time.Millisecond)
	assert.False(t, stepped(), "no step while another fault holds outages back for a takeover")
	unhushOther()
	require.True(t, env.claims.startOutage(crash+1, time.Time{}), "waiting for its grant, it holds no outage back")
	env.claims.release(crash + 1)

	// Once the node is whole, a write is no grant; an acquire answered is.
	var grant int64
	require.Eventually(t, func() bool {
		op(history.Ok, history.Write, "k")
		if stepped() {
			return true
		}
		grant = op(history.Ok, history.Acquire, "k")
		time.Sleep(5 * time.Millisecond)
		return stepped()
	}, 3*time.Second, time.Millisecond)
	s := <-done
	require.NoError(t, s.err)
	assert.Equal(t, true, s.f.Details["timed"])
	assert.Equal(t, true, s.f.Details["on_grant"])
	assert.Equal(t, grant, s.f.Details["grant_index"], "the step came right after this grant")
	assert.Equal(t, -5*time.Second, clocks.current("n1"))

	// Until a lock sent for after the step is granted, no outage starts:
	// an acquire answered that was sent before does not end the hold.
	op(history.Ok, history.Acquire, "old")
	time.Sleep(20 * time.Millisecond)
	assert.False(t, env.claims.startOutage(8, time.Time{}), "a crash waits for the grant after the step")
	var regrant int64
	require.Eventually(t, func() bool {
		op(history.Invoke, history.Acquire, "k2")
		regrant = op(history.Ok, history.Acquire, "k2")
		time.Sleep(5 * time.Millisecond)
		return env.claims.startOutage(9, time.Time{})
	}, 3*time.Second, time.Millisecond, "outages start again once a lock was granted after the step")
	env.claims.release(9)

	require.NoError(t, s.f.Stop(context.Background()))
	assert.Zero(t, clocks.current("n1"))
	got, ok := s.f.StopDetails["regrant_index"].(int64)
	require.True(t, ok, "the stop records the grant after the step")
	assert.Greater(t, got, grant)
	assert.LessOrEqual(t, got, regrant)
}

// Without a feed of acknowledgements the step is made at once, untimed,
// and holds nothing back.
func TestAStepOnAGrantWithoutAFeedStepsUntimed(t *testing.T) {
	clocks := newFakeClocks("n1")
	env := &Env{Target: clocks, claims: newClaims()}
	p := Plan{Nodes: []string{"n1"}, Params: &clockParams{Mode: "step", OffsetMS: -3000, OnGrant: true}}
	f, err := clock{}.Start(context.Background(), env, p)
	require.NoError(t, err)
	assert.Equal(t, false, f.Details["timed"])
	assert.Equal(t, -3*time.Second, clocks.current("n1"))
	assert.Eventually(t, func() bool { return env.claims.startOutage(1, time.Time{}) }, time.Second, time.Millisecond)
	require.NoError(t, f.Stop(context.Background()))
	assert.Zero(t, clocks.current("n1"))
}
