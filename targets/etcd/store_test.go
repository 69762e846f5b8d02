package etcd

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/fencing"
	"github.com/fencecheck/fencecheck/harness/docker"
	"github.com/fencecheck/fencecheck/harness/docker/dockertest"
)

// singleEtcd runs one etcd member in a container for the store tests and
// returns its client URL on 127.0.0.1.
func singleEtcd(t *testing.T) string {
	t.Helper()
	dockertest.Require(t)
	ctx := context.Background()
	tags, err := docker.EnsureImages(ctx, nil, docker.ImageEtcd)
	require.NoError(t, err)
	run := fmt.Sprintf("test-store-%d", time.Now().UnixNano()%1e9)
	rt, err := docker.New(ctx, run, docker.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, rt.Close(context.Background())) })
	nw, err := rt.Network(ctx)
	require.NoError(t, err)
	ip := nw.HostIP(0)
	c, err := rt.Run(ctx, docker.ContainerSpec{
		Node: "etcd", Image: tags[docker.ImageEtcd], IP: ip, Ports: []int{2379},
		Cmd: []string{"/usr/local/bin/etcd", "--data-dir", "/tmp/data",
			"--listen-client-urls", "http://0.0.0.0:2379", "--advertise-client-urls", "http://" + ip + ":2379"},
	})
	require.NoError(t, err)
	url := "http://" + c.Addr(2379)
	require.NoError(t, waitEtcdHealthy(ctx, url, 30*time.Second))
	return url
}

func openTestStore(t *testing.T, url string) *Store {
	s, err := OpenStore(StoreOptions{Endpoints: []string{url}, Prefix: fmt.Sprintf("/test-%d/", time.Now().UnixNano())})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

func TestStoreSemantics(t *testing.T) {
	url := singleEtcd(t)
	s := openTestStore(t, url)
	ctx := context.Background()

	t.Run("locks", func(t *testing.T) {
		tok, err := s.Acquire(ctx, "l1", "c1", 5*time.Second)
		require.NoError(t, err)
		_, err = s.Acquire(ctx, "l1", "c2", 5*time.Second)
		assert.ErrorIs(t, err, fencing.ErrHeld)
		other, err := s.Acquire(ctx, "l2", "c2", 5*time.Second)
		require.NoError(t, err)
		assert.Greater(t, other, tok, "tokens are global etcd revisions")

		assert.NoError(t, s.Renew(ctx, "l1", "c1", tok, 5*time.Second))
		assert.ErrorIs(t, s.Renew(ctx, "l1", "c2", tok, 5*time.Second), fencing.ErrLost, "wrong owner")
		assert.ErrorIs(t, s.Renew(ctx, "l1", "c1", tok+1, 5*time.Second), fencing.ErrLost, "wrong token")
		assert.ErrorIs(t, s.Release(ctx, "l1", "c1", tok+1), fencing.ErrLost)
		require.NoError(t, s.Release(ctx, "l1", "c1", tok))
		assert.ErrorIs(t, s.Release(ctx, "l1", "c1", tok), fencing.ErrLost, "released twice")
		assert.ErrorIs(t, s.Renew(ctx, "l1", "c1", tok, time.Second), fencing.ErrLost, "renew after release")

		again, err := s.Acquire(ctx, "l1", "c2", 5*time.Second)
		require.NoError(t, err)
		assert.Greater(t, again, other)
	})

	t.Run("lease expiry frees the lock", func(t *testing.T) {
		tok, err := s.Acquire(ctx, "short", "c1", time.Second)
		require.NoError(t, err)
		// etcd raises a 1 s lease to its minimum (about 2 s).
		var next uint64
		require.Eventually(t, func() bool {
			next, err = s.Acquire(ctx, "short", "c2", time.Second)
			return err == nil
		}, 10*time.Second, 200*time.Millisecond)
		assert.Greater(t, next, tok)
		assert.ErrorIs(t, s.Renew(ctx, "short", "c1", tok, time.Second), fencing.ErrLost)
	})

	t.Run("renew with a longer ttl keeps the token and lengthens the lease", func(t *testing.T) {
		tok, err := s.Acquire(ctx, "grow", "c1", time.Second)
		require.NoError(t, err)
		require.NoError(t, s.Renew(ctx, "grow", "c1", tok, 10*time.Second))
		time.Sleep(3500 * time.Millisecond) // past the first lease (etcd's minimum, about 2 s)
		_, err = s.Acquire(ctx, "grow", "c2", time.Second)
		assert.ErrorIs(t, err, fencing.ErrHeld, "the lease was lengthened")
		assert.NoError(t, s.Renew(ctx, "grow", "c1", tok, time.Second), "same token after the move")
		require.NoError(t, s.Release(ctx, "grow", "c1", tok))
	})

	t.Run("writes", func(t *testing.T) {
		_, _, err := s.Read(ctx, "k")
		assert.ErrorIs(t, err, fencing.ErrNotFound)
		require.NoError(t, s.Write(ctx, "k", 10, []byte("a")))
		v, tok, err := s.Read(ctx, "k")
		require.NoError(t, err)
		assert.Equal(t, "a", string(v))
		assert.Equal(t, uint64(10), tok)

		var stale *fencing.StaleError
		require.ErrorAs(t, s.Write(ctx, "k", 10, []byte("b")), &stale, "equal token is a replay")
		assert.Equal(t, uint64(10), stale.HighWater)
		require.ErrorAs(t, s.Write(ctx, "k", 9, []byte("c")), &stale)
		assert.Equal(t, uint64(10), stale.HighWater)
		// 100 > 10 numerically although "100" < "9" as text: padding matters.
		require.NoError(t, s.Write(ctx, "k", 100, []byte("d")))
		require.ErrorAs(t, s.Write(ctx, "k", 99, []byte("e")), &stale)
		assert.Equal(t, uint64(100), stale.HighWater)
		v, tok, err = s.Read(ctx, "k")
		require.NoError(t, err)
		assert.Equal(t, "d", string(v))
		assert.Equal(t, uint64(100), tok)
	})

	t.Run("concurrent writers: exactly one per token wins", func(t *testing.T) {
		var wg sync.WaitGroup
		results := make([]error, 8)
		for i := range results {
			wg.Add(1)
			go func() {
				defer wg.Done()
				results[i] = s.Write(ctx, "race", 7, []byte(fmt.Sprint(i)))
			}()
		}
		wg.Wait()
		accepted := 0
		for _, err := range results {
			if err == nil {
				accepted++
			} else {
				var stale *fencing.StaleError
				assert.ErrorAs(t, err, &stale)
			}
		}
		assert.Equal(t, 1, accepted)
	})
}
