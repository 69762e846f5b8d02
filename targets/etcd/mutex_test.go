package etcd

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencecheck/fencecheck/fencing"
)

func openTestMutexStore(t *testing.T, url, prefix string) *MutexStore {
	s, err := OpenMutexStore(StoreOptions{Endpoints: []string{url}, Prefix: prefix})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

// The etcd-mutex issuer against one real etcd, two stores standing for two
// adapters.
func TestMutexStore(t *testing.T) {
	url := singleEtcd(t)
	t.Run("semantics", func(t *testing.T) { testMutexSemantics(t, url) })
	t.Run("lost with its session", func(t *testing.T) { testMutexLostWithItsSession(t, url) })
}

// Try-lock semantics, the lease etcd really granted, tokens that are the
// mutex keys' create revisions, and the resource half shared with Store.
func testMutexSemantics(t *testing.T, url string) {
	prefix := fmt.Sprintf("/test-%d/", time.Now().UnixNano())
	x := openTestMutexStore(t, url, prefix)
	y := openTestMutexStore(t, url, prefix) // a second adapter
	ctx := context.Background()

	t1, granted, err := x.AcquireLease(ctx, "l", "c1", time.Second)
	require.NoError(t, err)
	assert.Equal(t, 2*time.Second, granted, "etcd raises a 1 s lease to its minimum (1.5 s, in whole seconds)")
	_, err = y.Acquire(ctx, "l", "c2", time.Second)
	assert.ErrorIs(t, err, fencing.ErrHeld, "another session holds the mutex")
	_, err = x.Acquire(ctx, "l", "c3", time.Second)
	assert.ErrorIs(t, err, fencing.ErrHeld, "each acquire is its own session, even on one adapter")

	// The token is the mutex key's create revision.
	resp, err := x.res.cli.Get(ctx, x.mutexPrefix("l")+"/", clientv3.WithFirstCreate()...)
	require.NoError(t, err)
	require.Len(t, resp.Kvs, 1)
	assert.Equal(t, t1, uint64(resp.Kvs[0].CreateRevision))

	// Renew holds for the session's TTL; only the holder may renew.
	g, err := x.RenewLease(ctx, "l", "c1", t1, 5*time.Second)
	require.NoError(t, err)
	assert.Equal(t, granted, g, "a session's TTL does not change on renew")
	_, err = x.RenewLease(ctx, "l", "c2", t1, time.Second)
	assert.ErrorIs(t, err, fencing.ErrLost)
	assert.ErrorIs(t, y.Release(ctx, "l", "c1", t1), fencing.ErrLost, "the session lives in the adapter that acquired")

	// The session's keep-alive holds the lock past its TTL while the holder
	// is heard from.
	time.Sleep(1500 * time.Millisecond)
	_, err = x.RenewLease(ctx, "l", "c1", t1, time.Second)
	require.NoError(t, err)
	time.Sleep(1500 * time.Millisecond)
	_, err = y.Acquire(ctx, "l", "c2", time.Second)
	assert.ErrorIs(t, err, fencing.ErrHeld, "kept alive by its session")

	require.NoError(t, x.Write(ctx, "k", t1, []byte("v1")))
	require.NoError(t, x.Release(ctx, "l", "c1", t1))
	assert.ErrorIs(t, x.Release(ctx, "l", "c1", t1), fencing.ErrLost)
	t2, err := y.Acquire(ctx, "l", "c2", time.Second)
	require.NoError(t, err)
	assert.Greater(t, t2, t1)
	var stale *fencing.StaleError
	assert.ErrorAs(t, y.Write(ctx, "k", t1, []byte("again")), &stale, "the resource is Store's")
	require.NoError(t, y.Write(ctx, "k", t2, []byte("v2")))
	v, tok, err := x.Read(ctx, "k")
	require.NoError(t, err)
	assert.Equal(t, "v2", string(v))
	assert.Equal(t, t2, tok)
	require.NoError(t, y.Release(ctx, "l", "c2", t2))

	// A holder that falls silent is a process that died holding the lock:
	// after one lease its session stops its keep-alives and etcd expires
	// the lease one TTL later.
	_, err = y.Acquire(ctx, "l", "silent", time.Second)
	require.NoError(t, err)
	silent := time.Now()
	for {
		if _, err = x.Acquire(ctx, "l", "next", time.Second); err == nil {
			break
		}
		require.ErrorIs(t, err, fencing.ErrHeld)
		require.Less(t, time.Since(silent), 8*time.Second, "a silent holder's lock must come free")
		time.Sleep(50 * time.Millisecond)
	}
	assert.GreaterOrEqual(t, time.Since(silent), granted+granted/2, "the lock outlived one idle lease plus most of its TTL")
}

// Jepsen's finding, at the store: a session whose keep-alives stop (its
// process paused; Orphan stops them just as a freeze would) loses the mutex
// on etcd's clock while its holder was told nothing. Another client then
// takes the lock with a newer token, and only the resource's check stops
// the old holder's late write.
func testMutexLostWithItsSession(t *testing.T, url string) {
	prefix := fmt.Sprintf("/test-%d/", time.Now().UnixNano())
	x := openTestMutexStore(t, url, prefix)
	y := openTestMutexStore(t, url, prefix)
	ctx := context.Background()

	t1, granted, err := x.AcquireLease(ctx, "l", "old", time.Second)
	require.NoError(t, err)
	acquired := time.Now()
	x.mu.Lock()
	h := x.holders[holderKey{"l", t1}]
	x.mu.Unlock()
	require.NotNil(t, h)
	h.session.Orphan() // the holder's process freezes: no more keep-alives

	var t2 uint64
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if t2, err = y.Acquire(ctx, "l", "new", time.Second); err == nil {
			break
		}
		require.ErrorIs(t, err, fencing.ErrHeld)
		time.Sleep(50 * time.Millisecond)
	}
	require.NoError(t, err, "the lock must come free once etcd expires the frozen session's lease")
	t.Logf("the new holder got the lock %.2f s after the old one (lease granted: %s)", time.Since(acquired).Seconds(), granted)
	assert.Greater(t, t2, t1)
	require.NoError(t, y.Write(ctx, "k", t2, []byte("new")))
	var stale *fencing.StaleError
	require.ErrorAs(t, x.Write(ctx, "k", t1, []byte("old, late")), &stale, "the old holder's token is fenced off")
	assert.Equal(t, t2, stale.HighWater)
}
