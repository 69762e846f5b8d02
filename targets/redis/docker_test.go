package redis

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/harness"
	"github.com/fencecheck/fencecheck/harness/docker/dockertest"
	"github.com/fencecheck/fencecheck/harness/nodes"
)

// testLog forwards progress lines to the test log.
type testLog struct{ t *testing.T }

func (w testLog) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func testEnv(t *testing.T) harness.Env {
	return harness.Env{
		RunID: fmt.Sprintf("test-redis-%d", rand.Uint32()),
		Dir:   t.TempDir(),
		Log:   testLog{t},
	}
}

// requireDocker demands Docker (failing in CI, skipping only locally), plus
// the host tools the Redis image is assembled from.
func requireDocker(t *testing.T) {
	t.Helper()
	dockertest.Require(t)
	requireTool(t, "redis-server", "redis-server")
	requireTool(t, "gcc", "gcc libc6-dev")
}

// startRedisOnly runs the target's Redis container without adapters, for
// tests of Redis itself under the target's faults.
func startRedisOnly(t *testing.T, ctx context.Context, target *Target) harness.Env {
	t.Helper()
	env := testEnv(t)
	// The target's own table, cut to its first row: Redis.
	target.Cluster = nodes.Must(nodes.New(target.Name(), Semantics, target.table()[:1], nodes.Options{}))
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		assert.NoError(t, target.Stop(stopCtx))
	})
	_, err := target.Start(ctx, env)
	require.NoError(t, err)
	return env
}

func redisClient(t *testing.T, target *Target) *goredis.Client {
	t.Helper()
	addr, err := target.RedisAddr()
	require.NoError(t, err)
	c := goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestDockerClockNemesisMovesRedisTime(t *testing.T) {
	requireDocker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	target := Durable()
	env := startRedisOnly(t, ctx, target)
	require.Contains(t, target.ClockNodes(), RedisNode)
	c := redisClient(t, target)

	waitSkew(t, c, 0)
	require.NoError(t, c.Set(ctx, "lease", "c1", 60*time.Second).Err())
	require.NoError(t, target.SetClockOffset(ctx, RedisNode, 120*time.Second))
	waitSkew(t, c, 120*time.Second)
	_, err := c.Get(ctx, "lease").Result()
	assert.ErrorIs(t, err, goredis.Nil, "a 60 s key must expire at once after a +120 s jump")

	require.NoError(t, target.SetClockOffset(ctx, RedisNode, -45*time.Second))
	waitSkew(t, c, -45*time.Second)
	require.NoError(t, target.SetClockOffset(ctx, RedisNode, 0))
	waitSkew(t, c, 0)

	require.ErrorContains(t, target.SetClockOffset(ctx, "nope", time.Second), "no node")

	require.NoError(t, target.Stop(ctx))
	logText, err := os.ReadFile(filepath.Join(env.Dir, "logs", RedisNode+".log"))
	require.NoError(t, err)
	assert.Contains(t, string(logText), "Ready to accept connections")
}

// counterAfterRestart acquires a lock n times, kills Redis with SIGKILL,
// starts it again and returns the next token.
func counterAfterRestart(t *testing.T, target *Target, n int, wipe bool) uint64 {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	startRedisOnly(t, ctx, target)
	addr, err := target.RedisAddr()
	require.NoError(t, err)
	s := OpenStore(StoreOptions{Addr: addr})
	defer s.Close()
	var last uint64
	for i := 0; i < n; i++ {
		last, err = s.Acquire(ctx, "L", "c1", time.Minute)
		require.NoError(t, err)
		require.NoError(t, s.Write(ctx, "L", last, []byte(fmt.Sprint("v", last))))
		require.NoError(t, s.Release(ctx, "L", "c1", last))
	}
	require.Equal(t, uint64(n), last)

	require.NoError(t, target.KillNode(ctx, RedisNode))
	_, err = s.Acquire(ctx, "L", "c1", time.Minute)
	require.Error(t, err, "Redis is down: the acquire must fail with an error (info), not a rejection")
	require.NoError(t, target.StartNode(ctx, RedisNode, wipe))

	var next uint64
	require.Eventually(t, func() bool {
		next, err = s.Acquire(ctx, "L", "c2", time.Minute)
		return err == nil
	}, 30*time.Second, 100*time.Millisecond, "acquire after restart: %v", err)
	return next
}

func TestDockerDurableRedisKeepsCounterAcrossKill(t *testing.T) {
	requireDocker(t)
	next := counterAfterRestart(t, Durable(), 7, false)
	assert.Equal(t, uint64(8), next, "appendfsync always on a host folder keeps the counter across kill -9")
}

func TestDockerVolatileRedisLosesCounterOnKill(t *testing.T) {
	requireDocker(t)
	next := counterAfterRestart(t, VolatileTarget(), 7, false)
	assert.Equal(t, uint64(1), next, "without persistence the counter starts again: the token went back from 7 to 1")
}

func TestDockerWipedRedisLosesCounter(t *testing.T) {
	requireDocker(t)
	next := counterAfterRestart(t, Durable(), 3, true)
	assert.Equal(t, uint64(1), next, "a wiped data folder is a counter reset even with AOF")
}
