package redis

import (
	"context"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/fencing"
	"github.com/fencecheck/fencecheck/nemesis/timewarp"
)

// skewedRedis starts a local redis-server under the skew library, with its
// offset file at the returned path.
func skewedRedis(t *testing.T) (*localRedis, string) {
	t.Helper()
	requireTool(t, "gcc", "gcc libc6-dev")
	lib, err := timewarp.BuildPreload(context.Background(), t.TempDir())
	require.NoError(t, err)
	clockFile := tempFile(t, "offset")
	require.NoError(t, fencing.WriteClockOffset(clockFile, 0))
	srv := startLocalRedis(t, []string{"LD_PRELOAD=" + lib, timewarp.PreloadFileEnv + "=" + clockFile, timewarp.PreloadRefreshEnv + "=2"})
	return srv, clockFile
}

// serverSkew is Redis's TIME minus the host's wall clock.
func serverSkew(t *testing.T, c *goredis.Client) time.Duration {
	t.Helper()
	before := time.Now()
	server, err := c.Time(context.Background()).Result()
	require.NoError(t, err)
	after := time.Now()
	return server.Sub(before.Add(after.Sub(before) / 2))
}

// waitSkew polls until Redis's TIME is want away from the host's clock: the
// library re-reads its file every few milliseconds.
func waitSkew(t *testing.T, c *goredis.Client, want time.Duration) {
	t.Helper()
	var got time.Duration
	require.Eventually(t, func() bool {
		got = serverSkew(t, c)
		return (got - want).Abs() < 200*time.Millisecond
	}, 5*time.Second, 10*time.Millisecond, "redis TIME skew: want %v, last saw %v", want, got)
}

func TestSkewLibraryMovesRedisTime(t *testing.T) {
	srv, clockFile := skewedRedis(t)
	c := srv.client(t)

	waitSkew(t, c, 0)
	require.NoError(t, fencing.WriteClockOffset(clockFile, time.Hour))
	waitSkew(t, c, time.Hour)
	require.NoError(t, fencing.WriteClockOffset(clockFile, -90*time.Second))
	waitSkew(t, c, -90*time.Second)
	require.NoError(t, fencing.WriteClockOffset(clockFile, 1500*time.Millisecond))
	waitSkew(t, c, 1500*time.Millisecond)
	require.NoError(t, fencing.WriteClockOffset(clockFile, 0))
	waitSkew(t, c, 0)
}

func TestForwardJumpExpiresKeysAtOnce(t *testing.T) {
	srv, clockFile := skewedRedis(t)
	c := srv.client(t)
	ctx := context.Background()

	require.NoError(t, c.Set(ctx, "lease", "c1", 60*time.Second).Err())
	require.NoError(t, c.Set(ctx, "control", "c1", 300*time.Second).Err())
	ttl, err := c.TTL(ctx, "lease").Result()
	require.NoError(t, err)
	require.Greater(t, ttl, 50*time.Second)

	require.NoError(t, fencing.WriteClockOffset(clockFile, 120*time.Second))
	waitSkew(t, c, 120*time.Second)
	_, err = c.Get(ctx, "lease").Result()
	assert.ErrorIs(t, err, goredis.Nil, "a 60 s key must expire at once when Redis's clock jumps 120 s ahead")
	ttl, err = c.TTL(ctx, "control").Result()
	require.NoError(t, err)
	assert.InDelta(t, 180, ttl.Seconds(), 5, "a 300 s key has 180 s left after the jump")

	// The store's lease is a Redis TTL too: the jump frees the lock early.
	s := OpenStore(StoreOptions{Addr: srv.Addr})
	defer s.Close()
	t1, err := s.Acquire(ctx, "L", "c1", 60*time.Second)
	require.NoError(t, err)
	require.NoError(t, fencing.WriteClockOffset(clockFile, 240*time.Second))
	waitSkew(t, c, 240*time.Second)
	t2, err := s.Acquire(ctx, "L", "c2", 60*time.Second)
	require.NoError(t, err, "c1's 60 s lease is gone after a 120 s jump")
	assert.Greater(t, t2, t1)
}

func TestMissingOrGarbledOffsetFile(t *testing.T) {
	srv, clockFile := skewedRedis(t)
	c := srv.client(t)
	require.NoError(t, fencing.WriteClockOffset(clockFile, time.Hour))
	waitSkew(t, c, time.Hour)
	// A garbled file keeps the offset in force (a half-written file reads
	// like this)...
	require.NoError(t, writeRaw(clockFile, "12ab\n"))
	time.Sleep(50 * time.Millisecond)
	waitSkew(t, c, time.Hour)
	// ...and a removed file means no skew.
	require.NoError(t, removeFile(clockFile))
	waitSkew(t, c, 0)
}
