package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/fencing"
	"github.com/fencecheck/fencecheck/harness"
	"github.com/fencecheck/fencecheck/harness/docker/dockertest"
)

type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) { w.t.Logf("%s", p); return len(p), nil }

// hostConn is a ZooKeeper client of the test's own, through the servers'
// published ports.
func hostConn(t *testing.T, tg *Target) *zk.Conn {
	t.Helper()
	var addrs []string
	for _, n := range tg.servers {
		a, err := tg.ServerAddr(n)
		require.NoError(t, err)
		addrs = append(addrs, a)
	}
	c, _, err := zk.Connect(addrs, 4*time.Second, zk.WithLogInfo(false))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

// One ensemble serves every subtest: starting three JVMs and two adapters
// is the expensive part, so the faults take turns on it, each leaving it
// healthy for the next.
func TestCluster(t *testing.T) {
	dockertest.Require(t)
	ctx := context.Background()
	tg := New(Options{Log: logWriter{t}})
	env := harness.Env{RunID: fmt.Sprintf("test-zk-%d", time.Now().UnixNano()%1e9), Dir: t.TempDir(), Log: logWriter{t}}
	begin := time.Now()
	eps, err := tg.Start(ctx, env)
	require.NoError(t, err)
	t.Logf("Start took %.1fs", time.Since(begin).Seconds())
	stopped := false
	defer func() {
		if !stopped {
			tg.Stop(ctx)
		}
	}()
	require.Len(t, eps.Issuers, 2)
	a1 := fencing.NewClient(eps.Issuers[0].URL, nil)
	a2 := fencing.NewClient(eps.Resources[1].URL, nil)
	opCtx := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, 5*time.Second) }

	t.Run("fencing through both adapters", func(t *testing.T) {
		c, cancel := opCtx()
		defer cancel()
		acq := a1.Acquire(c, "lock", "c1", time.Second)
		require.Equal(t, fencing.Ok, acq.Outcome, "%+v", acq)
		assert.Equal(t, time.Second, acq.TTL, "a 1 s session is within 2..20 ticks: granted as asked")
		held := a2.Acquire(c, "lock", "c2", time.Second)
		assert.Equal(t, fencing.Fail, held.Outcome)
		assert.Equal(t, "held", held.Error)

		w := a2.Write(c, "k", acq.Token, []byte("v1"))
		require.Equal(t, fencing.Ok, w.Outcome, "%+v", w)
		r := a1.Read(c, "k")
		require.Equal(t, fencing.Ok, r.Outcome, "%+v", r)
		assert.Equal(t, "v1", string(r.Value))
		assert.Equal(t, acq.Token, r.Token)
		stale := a1.Write(c, "k", acq.Token, []byte("again"))
		assert.Equal(t, fencing.Fail, stale.Outcome)
		assert.Equal(t, "stale", stale.Error)
		assert.Equal(t, acq.Token, stale.HighWater)
		require.Equal(t, fencing.Ok, a1.Release(c, "lock", "c1", acq.Token).Outcome)
		next := a2.Acquire(c, "lock", "c2", 30*time.Second)
		require.Equal(t, fencing.Ok, next.Outcome, "%+v", next)
		assert.Equal(t, 10*time.Second, next.TTL, "30 s is clamped to 20 ticks")
		require.Equal(t, fencing.Ok, a2.Release(c, "lock", "c2", next.Token).Outcome)
	})

	// The seeds' scenario with the session as the lease: the adapter that
	// holds A's session freezes past the session timeout, the ensemble
	// expires the session and deletes A's node, B takes the lock with a
	// newer token and writes, and A's late write is rejected.
	t.Run("session expiry under pause is fenced off", func(t *testing.T) {
		c, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		a := a1.Acquire(c, "seeds", "A", time.Second)
		require.Equal(t, fencing.Ok, a.Outcome, "%+v", a)
		require.NoError(t, tg.PauseNode(ctx, "adapter-1"))
		paused := time.Now()
		var b fencing.Result
		require.Eventually(t, func() bool {
			b = a2.Acquire(c, "seeds", "B", time.Second)
			return b.Outcome == fencing.Ok
		}, 10*time.Second, 50*time.Millisecond, "the frozen adapter's session must expire")
		t.Logf("B got the lock %.2f s after A's adapter froze (session timeout %s)", time.Since(paused).Seconds(), a.TTL)
		assert.GreaterOrEqual(t, time.Since(paused), a.TTL, "not before the session timeout")
		require.Equal(t, fencing.Ok, a2.Write(c, "seeds-k", b.Token, []byte("B")).Outcome)
		require.NoError(t, tg.ResumeNode(ctx, "adapter-1"))
		late := a1.Write(c, "seeds-k", a.Token, []byte("A, late"))
		assert.Equal(t, fencing.Fail, late.Outcome, "%+v", late)
		assert.Equal(t, "stale", late.Error)
		assert.Equal(t, b.Token, late.HighWater)
		// Just resumed, the adapter's client may still be reconnecting:
		// an indefinite answer (zk: connection closed) is asked again,
		// as a client would; the definite one must be "lost".
		var lost fencing.Result
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			lost = a1.Renew(c, "seeds", "A", a.Token, time.Second)
			if lost.Outcome != fencing.Info || time.Now().After(deadline) {
				break
			}
		}
		assert.Equal(t, "lost", lost.Error, "A's session is gone: %+v", lost)
		require.Equal(t, fencing.Ok, a2.Release(c, "seeds", "B", b.Token).Outcome)
	})

	leader, err := tg.Leader(ctx)
	require.NoError(t, err)

	// The JVM reads the wall clock through libc, where the preloaded skew
	// library shifts it: the leader stamps a znode's mtime an hour ahead.
	t.Run("clock step reaches the server's JVM", func(t *testing.T) {
		assert.Equal(t, []string{"zk-1", "zk-2", "zk-3"}, tg.ClockNodes())
		assert.Contains(t, tg.ClockUnreachable()["adapter-1"], "reads no clock")
		assert.Error(t, tg.SetClockOffset(ctx, "adapter-1", time.Hour))
		require.NoError(t, tg.SetClockOffset(ctx, leader, time.Hour))
		conn := hostConn(t, tg)
		p := fmt.Sprintf("/clock-probe-%d", time.Now().UnixNano())
		time.Sleep(50 * time.Millisecond) // the library re-reads the offset every 5 ms
		_, err := conn.Create(p, nil, 0, zk.WorldACL(zk.PermAll))
		require.NoError(t, err)
		_, st, err := conn.Get(p)
		require.NoError(t, err)
		ahead := time.Until(time.UnixMilli(st.Mtime))
		assert.InDelta(t, time.Hour.Seconds(), ahead.Seconds(), 30, "mtime is stamped by the leader's skewed clock")
		require.NoError(t, tg.SetClockOffset(ctx, leader, 0))
	})

	// A server cut off from the leader serves reads from its own copy for
	// a while (until it gives the leader up, syncLimit ticks later): a
	// stale answer read there may rest on an old mark, but must not report
	// it (the checkers read the mark as the register's state; a guided run
	// found a correct ensemble not linearizable on it). The adapter
	// confirms the mark with the leader first, so it answers the current
	// mark or fails.
	t.Run("a stale answer from a lagging server reports the current mark", func(t *testing.T) {
		leader, err := tg.Leader(ctx)
		require.NoError(t, err)
		var follower string
		var others []string
		for _, n := range tg.servers {
			if n != leader && follower == "" {
				follower = n
			} else {
				others = append(others, n)
			}
		}
		open := func(n string) *Store {
			addr, err := tg.ServerAddr(n)
			require.NoError(t, err)
			st, err := OpenStore(StoreOptions{Servers: []string{addr}, Timeout: 2 * time.Second})
			require.NoError(t, err)
			t.Cleanup(func() { st.Close() })
			return st
		}
		lagging, current := open(follower), open(leader)
		c, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		require.NoError(t, current.Write(c, "lag-k", 10, []byte("old")))
		require.Eventually(t, func() bool { _, m, err := lagging.Read(c, "lag-k"); return err == nil && m == 10 }, 5*time.Second, 20*time.Millisecond)
		require.NoError(t, tg.Partition(ctx, [][]string{{follower}, others}))
		defer func() { require.NoError(t, tg.HealPartition(ctx)) }()
		require.NoError(t, current.Write(c, "lag-k", 20, []byte("new")), "the leader and the third server are a quorum")
		g, err := lagging.get(c, lagging.resPath("lag-k"))
		require.NoError(t, err, "the cut server still serves reads")
		mark, _, err := decodeValue(g.data)
		require.NoError(t, err)
		require.EqualValues(t, 10, mark, "it lags: the precondition of the test")
		err = lagging.Write(c, "lag-k", 5, []byte("stale"))
		var stale *fencing.StaleError
		if errors.As(err, &stale) {
			assert.EqualValues(t, 20, stale.HighWater, "a stale answer reports the current mark")
		} else {
			assert.Error(t, err, "or it cannot confirm the mark and says so")
		}
	})

	// Transaction logs are fsynced before an answer: kill -9 of every
	// server at once loses nothing acknowledged.
	t.Run("kill -9 of the whole ensemble keeps acknowledged writes", func(t *testing.T) {
		c, cancel := context.WithTimeout(ctx, 10*time.Second)
		acq := a1.Acquire(c, "durable", "c1", time.Second)
		require.Equal(t, fencing.Ok, acq.Outcome, "%+v", acq)
		require.Equal(t, fencing.Ok, a1.Write(c, "durable-k", acq.Token, []byte("kept")).Outcome)
		cancel()
		for _, n := range tg.servers {
			require.NoError(t, tg.KillNode(ctx, n))
		}
		for _, n := range tg.servers {
			require.NoError(t, tg.StartNode(ctx, n, false))
		}
		for _, n := range tg.servers {
			require.NoError(t, tg.waitServing(ctx, n, 60*time.Second))
		}
		c, cancel = context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		var r fencing.Result
		require.Eventually(t, func() bool {
			r = a2.Read(c, "durable-k")
			return r.Outcome == fencing.Ok
		}, 20*time.Second, 100*time.Millisecond, "the adapters reconnect")
		assert.Equal(t, "kept", string(r.Value))
		assert.Equal(t, acq.Token, r.Token)
		// c1 fell silent for longer than its lease: the adapter let its
		// session expire, and the lock comes free.
		var next fencing.Result
		require.Eventually(t, func() bool {
			next = a2.Acquire(c, "durable", "c2", time.Second)
			return next.Outcome == fencing.Ok
		}, 20*time.Second, 100*time.Millisecond, "a silent holder's lock comes free: %+v", next)
		assert.Greater(t, tokenN(t, next.Token), tokenN(t, acq.Token), "a zxid of the new epoch")
		require.Equal(t, fencing.Ok, a2.Release(c, "durable", "c2", next.Token).Outcome)
	})

	require.NoError(t, tg.Stop(ctx))
	stopped = true
	require.NoError(t, tg.Stop(ctx), "Stop is idempotent")
	assert.Error(t, tg.HealPartition(ctx), "faults after Stop are errors, not panics")
	for _, n := range tg.Nodes() {
		_, err := os.Stat(filepath.Join(env.Dir, "logs", n.Name+".log"))
		assert.NoError(t, err, "log of %s saved", n.Name)
	}
	_, err = os.Stat(filepath.Dir(tg.Folder("zk-1")))
	assert.True(t, os.IsNotExist(err), "the servers' data is removed with the run: %v", err)
	c, n := dockertest.Leftovers(t, env.RunID)
	assert.Zero(t, c, "containers left after Stop")
	assert.Zero(t, n, "networks left after Stop")
}

func tokenN(t *testing.T, tok string) uint64 {
	t.Helper()
	n, err := strconv.ParseUint(tok, 10, 64)
	require.NoError(t, err)
	return n
}
