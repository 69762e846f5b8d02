package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/fencing"
)

func newTestStore(t *testing.T) (*Store, *localRedis) {
	t.Helper()
	srv := startLocalRedis(t, nil)
	s := OpenStore(StoreOptions{Addr: srv.Addr})
	t.Cleanup(func() { _ = s.Close() })
	return s, srv
}

func TestAcquireIssuesGrowingTokensPerLock(t *testing.T) {
	s, _ := newTestStore(t)
	ctx := context.Background()

	t1, err := s.Acquire(ctx, "a", "c1", time.Minute)
	require.NoError(t, err)
	_, err = s.Acquire(ctx, "a", "c2", time.Minute)
	require.ErrorIs(t, err, fencing.ErrHeld, "a held lock must refuse another owner")
	require.NoError(t, s.Release(ctx, "a", "c1", t1))
	t2, err := s.Acquire(ctx, "a", "c2", time.Minute)
	require.NoError(t, err)
	assert.Greater(t, t2, t1)
	assert.Equal(t, t1+1, t2, "a refused acquire must not burn a token")

	// Scope is per lock: another lock has its own counter.
	tb, err := s.Acquire(ctx, "b", "c1", time.Minute)
	require.NoError(t, err)
	assert.Equal(t, uint64(1), tb)
}

func TestAcquireAfterExpiry(t *testing.T) {
	s, _ := newTestStore(t)
	ctx := context.Background()
	t1, err := s.Acquire(ctx, "a", "c1", 50*time.Millisecond)
	require.NoError(t, err)
	time.Sleep(120 * time.Millisecond)
	t2, err := s.Acquire(ctx, "a", "c2", time.Minute)
	require.NoError(t, err, "an expired lease is free")
	assert.Greater(t, t2, t1)
	assert.ErrorIs(t, s.Renew(ctx, "a", "c1", t1, time.Minute), fencing.ErrLost, "the expired holder lost its lease")
	assert.ErrorIs(t, s.Release(ctx, "a", "c1", t1), fencing.ErrLost)
}

func TestRenewAndReleaseNeedHolderAndToken(t *testing.T) {
	s, srv := newTestStore(t)
	ctx := context.Background()
	tok, err := s.Acquire(ctx, "a", "c1", 200*time.Millisecond)
	require.NoError(t, err)

	assert.ErrorIs(t, s.Renew(ctx, "a", "c2", tok, time.Minute), fencing.ErrLost, "wrong owner")
	assert.ErrorIs(t, s.Renew(ctx, "a", "c1", tok+1, time.Minute), fencing.ErrLost, "wrong token")
	assert.ErrorIs(t, s.Release(ctx, "a", "c2", tok), fencing.ErrLost, "wrong owner")
	assert.ErrorIs(t, s.Release(ctx, "a", "c1", tok-1), fencing.ErrLost, "wrong token")

	require.NoError(t, s.Renew(ctx, "a", "c1", tok, time.Minute))
	pttl, err := srv.client(t).PTTL(ctx, s.holderKey("a")).Result()
	require.NoError(t, err)
	assert.Greater(t, pttl, 30*time.Second, "renew must extend the lease to the new ttl")

	require.NoError(t, s.Release(ctx, "a", "c1", tok))
	assert.ErrorIs(t, s.Release(ctx, "a", "c1", tok), fencing.ErrLost, "a released lock is no longer held")
	_, err = s.Acquire(ctx, "a", "c2", time.Minute)
	require.NoError(t, err)
}

func TestWriteRejectsStaleAndEqualTokens(t *testing.T) {
	s, _ := newTestStore(t)
	ctx := context.Background()

	_, _, err := s.Read(ctx, "r")
	require.ErrorIs(t, err, fencing.ErrNotFound)

	require.NoError(t, s.Write(ctx, "r", 5, []byte("v5")))
	var stale *fencing.StaleError
	err = s.Write(ctx, "r", 5, []byte("v5-again"))
	require.True(t, errors.As(err, &stale), "equal token must be stale, got %v", err)
	assert.Equal(t, uint64(5), stale.HighWater)
	err = s.Write(ctx, "r", 4, []byte("v4"))
	require.True(t, errors.As(err, &stale), "older token must be stale, got %v", err)
	assert.Equal(t, uint64(5), stale.HighWater)

	// 10 > 9 although "10" < "9" as strings: the script compares lengths first.
	require.NoError(t, s.Write(ctx, "r", 9, []byte("v9")))
	require.NoError(t, s.Write(ctx, "r", 10, []byte("v10")))
	v, tok, err := s.Read(ctx, "r")
	require.NoError(t, err)
	assert.Equal(t, "v10", string(v))
	assert.Equal(t, uint64(10), tok)

	// Tokens above 2^53 must compare exactly (Lua numbers would round them).
	big := uint64(1)<<62 + 1
	require.NoError(t, s.Write(ctx, "r", big-1, []byte("big-1")))
	require.NoError(t, s.Write(ctx, "r", big, []byte("big")))
	err = s.Write(ctx, "r", big-1, []byte("late"))
	require.True(t, errors.As(err, &stale))
	assert.Equal(t, big, stale.HighWater)
	require.NoError(t, s.Write(ctx, "r", ^uint64(0), []byte("max")))

	// Binary values survive.
	bin := []byte{0, 1, 2, 0xff, '|'}
	require.NoError(t, s.Write(ctx, "bin", 1, bin))
	v, _, err = s.Read(ctx, "bin")
	require.NoError(t, err)
	assert.Equal(t, bin, v)
}

func TestConcurrentAcquiresNeverShareAToken(t *testing.T) {
	s, _ := newTestStore(t)
	ctx := context.Background()
	var mu sync.Mutex
	seen := map[uint64]string{}
	var wg sync.WaitGroup
	for c := 0; c < 8; c++ {
		wg.Add(1)
		go func(owner string) {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				tok, err := s.Acquire(ctx, "a", owner, time.Minute)
				if errors.Is(err, fencing.ErrHeld) {
					continue
				}
				if !assert.NoError(t, err) {
					return
				}
				mu.Lock()
				prev, dup := seen[tok]
				seen[tok] = owner
				mu.Unlock()
				assert.False(t, dup, "token %d issued to %s and %s", tok, prev, owner)
				assert.NoError(t, s.Write(ctx, "r", tok, []byte(owner+"-"+strconv.FormatUint(tok, 10))))
				assert.NoError(t, s.Release(ctx, "a", owner, tok))
			}
		}(fmt.Sprintf("c%d", c))
	}
	wg.Wait()
	require.NotEmpty(t, seen)
	_, tok, err := s.Read(ctx, "r")
	require.NoError(t, err)
	assert.Equal(t, uint64(len(seen)), tok, "tokens are 1..n with no gaps, and the last one wrote last")
}

func TestUnreachableRedisIsAnErrorNotARejection(t *testing.T) {
	s := OpenStore(StoreOptions{Addr: "127.0.0.1:1", Timeout: 200 * time.Millisecond})
	defer s.Close()
	ctx := context.Background()
	_, err := s.Acquire(ctx, "a", "c1", time.Second)
	require.Error(t, err)
	assert.NotErrorIs(t, err, fencing.ErrHeld)
	err = s.Write(ctx, "r", 1, []byte("x"))
	require.Error(t, err)
	var stale *fencing.StaleError
	assert.False(t, errors.As(err, &stale))
}
