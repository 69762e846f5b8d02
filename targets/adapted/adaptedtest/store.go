package adaptedtest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/fencing"
)

// CheckStore holds a store backed by a real database to the fencing.Store
// contract, races included: the decisions must be the database's, so
// concurrent callers on one fresh lock or key must see exactly one winner.
// Names are prefixed with prefix, so the test can share a database.
func CheckStore(t *testing.T, s fencing.Store, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name := func(n string) string { return prefix + n }

	t.Run("locks", func(t *testing.T) {
		l := name("lock")
		t1, err := s.Acquire(ctx, l, "c1", time.Minute)
		require.NoError(t, err)
		assert.Equal(t, uint64(1), t1, "a new lock's first token")
		_, err = s.Acquire(ctx, l, "c2", time.Minute)
		require.ErrorIs(t, err, fencing.ErrHeld)
		_, err = s.Acquire(ctx, l, "c1", time.Minute)
		require.ErrorIs(t, err, fencing.ErrHeld, "not reentrant: the holder gets held too")
		assert.ErrorIs(t, s.Renew(ctx, l, "c2", t1, time.Minute), fencing.ErrLost, "wrong owner")
		assert.ErrorIs(t, s.Renew(ctx, l, "c1", t1+1, time.Minute), fencing.ErrLost, "wrong token")
		assert.ErrorIs(t, s.Release(ctx, l, "c1", 1<<64-1), fencing.ErrLost, "a token beyond any counter")
		require.NoError(t, s.Renew(ctx, l, "c1", t1, 100*time.Millisecond))
		time.Sleep(250 * time.Millisecond)
		assert.ErrorIs(t, s.Renew(ctx, l, "c1", t1, time.Minute), fencing.ErrLost, "the lease ran out")
		t2, err := s.Acquire(ctx, l, "c2", time.Minute)
		require.NoError(t, err, "an expired lease is free")
		assert.Equal(t, t1+1, t2, "a refused acquire burns no token")
		assert.ErrorIs(t, s.Release(ctx, l, "c1", t1), fencing.ErrLost, "the old holder")
		require.NoError(t, s.Release(ctx, l, "c2", t2))
		assert.ErrorIs(t, s.Release(ctx, l, "c2", t2), fencing.ErrLost, "released twice")
		t3, err := s.Acquire(ctx, l, "c3", time.Minute)
		require.NoError(t, err, "a released lock is free")
		assert.Equal(t, t2+1, t3)
		other, err := s.Acquire(ctx, name("other-lock"), "c1", time.Minute)
		require.NoError(t, err)
		assert.Equal(t, uint64(1), other, "tokens are per lock")
	})

	t.Run("writes", func(t *testing.T) {
		k := name("key")
		_, _, err := s.Read(ctx, k)
		require.ErrorIs(t, err, fencing.ErrNotFound)
		require.NoError(t, s.Write(ctx, k, 5, []byte("v5")))
		var stale *fencing.StaleError
		require.ErrorAs(t, s.Write(ctx, k, 5, []byte("replay")), &stale, "an equal token is a replay")
		assert.Equal(t, uint64(5), stale.HighWater)
		require.ErrorAs(t, s.Write(ctx, k, 4, []byte("old")), &stale)
		assert.Equal(t, uint64(5), stale.HighWater)
		require.NoError(t, s.Write(ctx, k, 9, []byte{0, 1, 2, 255}), "values are bytes")
		v, tok, err := s.Read(ctx, k)
		require.NoError(t, err)
		assert.Equal(t, []byte{0, 1, 2, 255}, v)
		assert.Equal(t, uint64(9), tok)
		require.NoError(t, s.Write(ctx, k, 1<<64-1, []byte("max")), "the whole uint64 range")
		require.ErrorAs(t, s.Write(ctx, k, 1<<63, []byte("big")), &stale)
		assert.Equal(t, uint64(1<<64-1), stale.HighWater)
	})

	t.Run("one winner per race", func(t *testing.T) {
		const n = 12
		var wg sync.WaitGroup
		results := make([]error, n)
		tokens := make([]uint64, n)
		var mu sync.Mutex
		written := 0
		// n acquires of one fresh lock, and n writes with one token to one
		// fresh key, all at once.
		for i := 0; i < n; i++ {
			wg.Add(2)
			go func() {
				defer wg.Done()
				tokens[i], results[i] = s.Acquire(ctx, name("race-lock"), fmt.Sprint("c", i), time.Minute)
			}()
			go func() {
				defer wg.Done()
				err := s.Write(ctx, name("race-key"), 3, []byte(fmt.Sprint("w", i)))
				var stale *fencing.StaleError
				switch {
				case err == nil:
					mu.Lock()
					written++
					mu.Unlock()
				case !errors.As(err, &stale) || stale.HighWater != 3:
					t.Errorf("write %d: %v", i, err)
				}
			}()
		}
		wg.Wait()
		won := 0
		for i, err := range results {
			if err == nil {
				won++
				assert.Equal(t, uint64(1), tokens[i])
			} else {
				assert.ErrorIs(t, err, fencing.ErrHeld)
			}
		}
		assert.Equal(t, 1, won, "exactly one acquire of a fresh lock wins")
		assert.Equal(t, 1, written, "exactly one write with token 3 gets into a fresh key: a second would be a replay")
		// Writes with growing tokens, one at a time afterwards, all get in.
		for tok := uint64(4); tok < 8; tok++ {
			require.NoError(t, s.Write(ctx, name("race-key"), tok, []byte(fmt.Sprint("t", tok))))
		}
		v, tok, err := s.Read(ctx, name("race-key"))
		require.NoError(t, err)
		assert.Equal(t, uint64(7), tok)
		assert.Equal(t, "t7", string(v))
	})
}
