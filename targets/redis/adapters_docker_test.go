package redis

import (
	"context"
	"encoding/json"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/checkers/overlap"
	"github.com/fencecheck/fencecheck/fencing"
	"github.com/fencecheck/fencecheck/harness"
	"github.com/fencecheck/fencecheck/history"
)

// startFull runs the whole target: Redis and the adapters.
func startFull(t *testing.T, ctx context.Context, target *Target) harness.Endpoints {
	t.Helper()
	env := testEnv(t)
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		assert.NoError(t, target.Stop(stopCtx))
	})
	eps, err := target.Start(ctx, env)
	require.NoError(t, err)
	require.Len(t, eps.Issuers, 2)
	require.Len(t, eps.Resources, 2)
	return eps
}

// opLog records client operations as a history, in the workload's format,
// so the test can hand it to the checkers.
type opLog struct {
	mu     sync.Mutex
	start  time.Time
	events []history.Event
}

func (l *opLog) add(e history.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e.Index = int64(len(l.events))
	e.Time = int64(time.Since(l.start))
	l.events = append(l.events, e)
}

func (l *opLog) do(proc int, inv history.Event, call func() fencing.Result) fencing.Result {
	inv.Process, inv.Type = proc, history.Invoke
	l.add(inv)
	res := call()
	done := history.Event{Process: proc, Type: history.Type(res.Outcome.String()), F: inv.F, Key: inv.Key,
		Node: inv.Node, Error: res.Error, HighWater: res.HighWater, Token: inv.Token, Value: inv.Value}
	if inv.F == history.Acquire {
		done.Token = res.Token
	}
	l.add(done)
	return res
}

func ttlExtra(ttl time.Duration) map[string]json.RawMessage {
	return map[string]json.RawMessage{"ttl_ms": json.RawMessage(strconv.FormatInt(ttl.Milliseconds(), 10))}
}

// A forward jump of Redis's clock ends a lease early: a second client gets
// the lock while the first still believes it holds it (a lease overlap),
// and only the token check keeps the first client's late write out.
func TestDockerClockJumpCausesLeaseOverlapThatFencingStops(t *testing.T) {
	requireDocker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	target := Durable()
	eps := startFull(t, ctx, target)
	a := fencing.NewClient(eps.Issuers[0].URL, nil)
	b := fencing.NewClient(eps.Issuers[1].URL, nil)
	log := &opLog{start: time.Now()}
	const ttl = 30 * time.Second
	opCtx := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, 5*time.Second) }
	acquire := func(proc int, c *fencing.Client, owner string) fencing.Result {
		cctx, cancel := opCtx()
		defer cancel()
		return log.do(proc, history.Event{F: history.Acquire, Key: "k", Node: c.BaseURL(), Extra: ttlExtra(ttl)},
			func() fencing.Result { return c.Acquire(cctx, "k", owner, ttl) })
	}
	write := func(proc int, c *fencing.Client, token, value string) fencing.Result {
		cctx, cancel := opCtx()
		defer cancel()
		return log.do(proc, history.Event{F: history.Write, Key: "k", Token: token, Value: value, Node: c.BaseURL()},
			func() fencing.Result { return c.Write(cctx, "k", token, []byte(value)) })
	}
	release := func(proc int, c *fencing.Client, owner, token string) fencing.Result {
		cctx, cancel := opCtx()
		defer cancel()
		return log.do(proc, history.Event{F: history.Release, Key: "k", Token: token, Node: c.BaseURL()},
			func() fencing.Result { return c.Release(cctx, "k", owner, token) })
	}

	ra := acquire(0, a, "A")
	require.Equal(t, fencing.Ok, ra.Outcome, "%+v", ra)
	require.Equal(t, fencing.Ok, write(0, a, ra.Token, "A-1").Outcome)
	rb := acquire(1, b, "B")
	require.Equal(t, fencing.Fail, rb.Outcome, "the lock is held for 30 s: %+v", rb)
	require.Equal(t, "held", rb.Error)

	// The clock nemesis steps Redis 60 s ahead: A's 30 s lease is gone in
	// Redis, while A's own clock says it has about 30 s left.
	require.NoError(t, target.SetClockOffset(ctx, RedisNode, 60*time.Second))
	waitSkew(t, redisClient(t, target), 60*time.Second)
	defer func() { _ = target.SetClockOffset(context.Background(), RedisNode, 0) }()

	rb = acquire(2, b, "B")
	require.Equal(t, fencing.Ok, rb.Outcome, "after the jump the lease has expired in Redis: %+v", rb)
	tokA, _ := strconv.ParseUint(ra.Token, 10, 64)
	tokB, _ := strconv.ParseUint(rb.Token, 10, 64)
	require.Greater(t, tokB, tokA)
	require.Equal(t, fencing.Ok, write(2, b, rb.Token, "B-1").Outcome)

	late := write(0, a, ra.Token, "A-2")
	assert.Equal(t, fencing.Fail, late.Outcome, "A's late write must be fenced off: %+v", late)
	assert.Equal(t, "stale", late.Error)
	assert.Equal(t, rb.Token, late.HighWater)
	assert.Equal(t, "lost", release(0, a, "A", ra.Token).Error, "A's lease is gone")
	assert.Equal(t, fencing.Ok, release(2, b, "B", rb.Token).Outcome)

	rep, err := overlap.Find(log.events, overlap.Options{})
	require.NoError(t, err)
	require.Len(t, rep.Overlaps, 1, "the jump must show as one lease overlap")
	o := rep.Overlaps[0]
	assert.Equal(t, ra.Token, o.OlderToken)
	assert.Equal(t, rb.Token, o.NewerToken)
	assert.Equal(t, 1, o.Rejected, "fencing rejected A's write during the overlap")
	t.Log(o.Text())
}

// pause, restart and partition reach the nodes they name, and the adapters
// come back after each.
func TestDockerRedisTargetFaults(t *testing.T) {
	requireDocker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	target := Durable()
	eps := startFull(t, ctx, target)
	names := map[string]bool{}
	for _, n := range target.Nodes() {
		names[n.Name+"/"+n.Role] = true
	}
	assert.Equal(t, map[string]bool{"redis-1/redis": true, "adapter-1/adapter": true, "adapter-2/adapter": true}, names)
	c1 := fencing.NewClient(eps.Issuers[0].URL, nil)
	c2 := fencing.NewClient(eps.Issuers[1].URL, nil)
	n := 0
	acquire := func(c *fencing.Client, timeout time.Duration) fencing.Result {
		cctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		n++
		res := c.Acquire(cctx, "L"+strconv.Itoa(n), "o", time.Minute)
		return res
	}
	eventuallyOk := func(c *fencing.Client, what string) {
		t.Helper()
		require.Eventually(t, func() bool { return acquire(c, 2*time.Second).Outcome == fencing.Ok },
			60*time.Second, 200*time.Millisecond, "adapter never recovered after %s", what)
	}
	require.Equal(t, fencing.Ok, acquire(c1, 5*time.Second).Outcome)

	// Pause Redis: nothing is decided, so the outcome is unknown, not a failure.
	require.NoError(t, target.PauseNode(ctx, RedisNode))
	res := acquire(c1, 3*time.Second)
	assert.Equal(t, fencing.Info, res.Outcome, "a paused Redis gives unknown outcomes: %+v", res)
	require.NoError(t, target.ResumeNode(ctx, RedisNode))
	eventuallyOk(c1, "pause")
	require.NoError(t, target.ResumeNode(ctx, RedisNode), "resuming a running node is a no-op")

	// Cut adapter-1 off from Redis; adapter-2 is in no group and keeps going.
	require.NoError(t, target.Partition(ctx, [][]string{{RedisNode}, {"adapter-1"}}))
	res = acquire(c1, 3*time.Second)
	assert.Equal(t, fencing.Info, res.Outcome, "a partitioned adapter gives unknown outcomes: %+v", res)
	assert.Equal(t, fencing.Ok, acquire(c2, 5*time.Second).Outcome, "adapter-2 is not partitioned")
	require.NoError(t, target.HealPartition(ctx))
	eventuallyOk(c1, "heal")

	// Kill and restart an adapter: it is stateless and answers again.
	require.NoError(t, target.KillNode(ctx, "adapter-2"))
	res = acquire(c2, 2*time.Second)
	assert.NotEqual(t, fencing.Ok, res.Outcome)
	require.NoError(t, target.StartNode(ctx, "adapter-2", false))
	eventuallyOk(c2, "adapter restart")

	// Only Redis's clock matters to this store, so the clock nemesis is
	// pointed there; the adapters' clocks can still be set by name.
	require.Equal(t, []string{RedisNode}, target.ClockNodes())
	require.NoError(t, target.SetClockOffset(ctx, "adapter-1", 30*time.Second))
	eventuallyOk(c1, "adapter clock step")
	require.NoError(t, target.SetClockOffset(ctx, "adapter-1", 0))
}
