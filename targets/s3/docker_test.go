//go:build seaweedfs

package s3

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/fencing"
	"github.com/fencecheck/fencecheck/harness"
	"github.com/fencecheck/fencecheck/harness/docker/dockertest"
	"github.com/fencecheck/fencecheck/targets/conform"
)

type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

type hostAddrer interface {
	HostAddr(node, port string) (string, error)
}

// startTarget starts a target for the whole test and stops it at cleanup,
// then asserts that nothing of it is left.
func startTarget(t *testing.T, o Options) (harness.Target, harness.Endpoints) {
	t.Helper()
	dockertest.Require(t)
	if testing.Short() {
		t.Skip("SeaweedFS (compiled from source the first time: about 11 minutes on two cores) and etcd; make s3-check runs it")
	}
	o.Log = logWriter{t}
	target := New(o)
	env := harness.Env{RunID: fmt.Sprintf("test-%s-%d", target.Name(), time.Now().UnixNano()%1e9), Dir: t.TempDir(), Log: logWriter{t}}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		assert.NoError(t, target.Stop(ctx))
		c, nets := dockertest.Leftovers(t, env.RunID)
		assert.Zero(t, c, "containers left after the test")
		assert.Zero(t, nets, "networks left after the test")
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	begin := time.Now()
	eps, err := target.Start(ctx, env)
	require.NoError(t, err)
	t.Logf("%s started in %.1fs (the first start on a machine compiles SeaweedFS)", target.Name(), time.Since(begin).Seconds())
	return target, eps
}

func opCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// One SeaweedFS (and one etcd member) serves every check of the resource
// itself: the gateway's own answer to If-Match, then the bucket's write
// from this process, then the adapters' Fencing API.
func TestSeaweedFS(t *testing.T) {
	target, eps := startTarget(t, Options{Members: 1})
	addr, err := target.(hostAddrer).HostAddr(FilerNode, "s3")
	require.NoError(t, err)
	endpoint := "http://" + addr
	buckets := 0
	// Each check has a bucket of its own.
	bucket := func(t *testing.T, mode WriteMode) *Bucket {
		buckets++
		b, err := NewBucket(BucketOptions{Endpoint: endpoint, Bucket: "test-" + strconv.Itoa(buckets), Mode: mode, Timeout: 10 * time.Second})
		require.NoError(t, err)
		require.NoError(t, b.Health(opCtx(t)))
		return b
	}

	// SeaweedFS syncs nothing by default; the target's filer holds the rule
	// that syncs every write under /buckets/.
	t.Run("the filer syncs the buckets", func(t *testing.T) {
		filer, err := target.(hostAddrer).HostAddr(FilerNode, "")
		require.NoError(t, err)
		resp, err := http.Get("http://" + filer + "/etc/seaweedfs/filer.conf")
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		assert.JSONEq(t, filerConf, string(b))
	})

	// What the target stands on: a PUT whose If-Match names another ETag
	// is refused with 412, as is If-None-Match: * on a key that exists.
	t.Run("the gateway honours If-Match and If-None-Match on PUT", func(t *testing.T) {
		b := bucket(t, Conditional)
		ctx := opCtx(t)
		u := b.objectURL("k")
		put := func(h http.Header, body string) *http.Response {
			resp, _, err := b.do(ctx, http.MethodPut, u, []byte(body), h)
			require.NoError(t, err)
			return resp
		}
		first := put(http.Header{"If-None-Match": {"*"}}, "one")
		require.Equal(t, http.StatusOK, first.StatusCode)
		etag := first.Header.Get("ETag")
		require.NotEmpty(t, etag)
		assert.Equal(t, http.StatusPreconditionFailed, put(http.Header{"If-None-Match": {"*"}}, "two").StatusCode, "If-None-Match: * on a key that exists")
		assert.Equal(t, http.StatusPreconditionFailed, put(http.Header{"If-Match": {`"0123456789abcdef0123456789abcdef"`}}, "two").StatusCode, "If-Match on another ETag")
		assert.Equal(t, http.StatusOK, put(http.Header{"If-Match": {etag}}, "two").StatusCode, "If-Match on the current ETag")
		assert.Equal(t, http.StatusPreconditionFailed, put(http.Header{"If-Match": {etag}}, "three").StatusCode, "If-Match on the ETag just replaced")
	})

	t.Run("stale and equal tokens are rejected with the mark", func(t *testing.T) {
		b := bucket(t, Conditional)
		ctx := opCtx(t)
		_, _, err := b.Read(ctx, "k")
		assert.ErrorIs(t, err, fencing.ErrNotFound)
		require.NoError(t, b.Write(ctx, "k", 5, []byte("v5")))
		var stale *fencing.StaleError
		require.ErrorAs(t, b.Write(ctx, "k", 3, []byte("v3")), &stale)
		assert.EqualValues(t, 5, stale.HighWater)
		require.ErrorAs(t, b.Write(ctx, "k", 5, []byte("again")), &stale, "an equal token is a replay")
		assert.EqualValues(t, 5, stale.HighWater)
		max := uint64(1<<64 - 1)
		require.NoError(t, b.Write(ctx, "k", max, []byte("max")), "tokens are unsigned 64-bit")
		v, token, err := b.Read(ctx, "k")
		require.NoError(t, err)
		assert.Equal(t, "max", string(v))
		assert.Equal(t, max, token)
		require.ErrorAs(t, b.Write(ctx, "k", 6, []byte("late")), &stale)
		assert.Equal(t, max, stale.HighWater)
	})

	// A newer write lands between a write's check and its PUT: the
	// conditional PUT is refused, the write reads again and answers stale;
	// the unconditional one overwrites the newer token (the race itself).
	overtaken := func(t *testing.T, mode WriteMode) (error, uint64, *Bucket) {
		b := bucket(t, mode)
		ctx := opCtx(t)
		require.NoError(t, b.Write(ctx, "k", 1, []byte("v1")))
		var once sync.Once
		b.beforePut = func(key string) {
			once.Do(func() {
				other, err := NewBucket(BucketOptions{Endpoint: endpoint, Bucket: b.bucket, Mode: Conditional})
				require.NoError(t, err)
				require.NoError(t, other.Write(ctx, key, 9, []byte("v9")))
			})
		}
		werr := b.Write(ctx, "k", 8, []byte("v8"))
		_, token, err := b.Read(ctx, "k")
		require.NoError(t, err)
		return werr, token, b
	}
	t.Run("a PUT overtaken between check and write is read again, never accepted", func(t *testing.T) {
		err, token, b := overtaken(t, Conditional)
		var stale *fencing.StaleError
		require.ErrorAs(t, err, &stale)
		assert.EqualValues(t, 9, stale.HighWater)
		assert.EqualValues(t, 9, token, "the newer write stays")
		assert.EqualValues(t, 1, b.LostRaces())
	})
	t.Run("unconditional: the overtaken PUT overwrites the newer token", func(t *testing.T) {
		err, token, _ := overtaken(t, Unconditional)
		assert.NoError(t, err, "the check passed before the newer write landed")
		assert.EqualValues(t, 8, token, "token 9's write is lost under token 8's")
	})

	// Writers race with distinct, growing tokens on one key: every
	// acknowledged write was the newest when it landed, so the object ends
	// with the largest acknowledged token, and some PUTs lost races.
	t.Run("concurrent writers", func(t *testing.T) {
		b := bucket(t, Conditional)
		ctx := opCtx(t)
		var next, maxAcked atomic.Uint64
		var wg sync.WaitGroup
		var acked, stale atomic.Int64
		for w := 0; w < 8; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 20; i++ {
					token := next.Add(1)
					err := b.Write(ctx, "hot", token, []byte(strconv.FormatUint(token, 10)))
					var se *fencing.StaleError
					switch {
					case err == nil:
						acked.Add(1)
						for m := maxAcked.Load(); token > m && !maxAcked.CompareAndSwap(m, token); m = maxAcked.Load() {
						}
					case assert.ErrorAs(t, err, &se):
						stale.Add(1)
						assert.Greater(t, se.HighWater, token-1, "a stale answer names a newer mark")
					}
				}
			}()
		}
		wg.Wait()
		v, token, err := b.Read(ctx, "hot")
		require.NoError(t, err)
		t.Logf("%d acknowledged, %d stale, %d lost races read again", acked.Load(), stale.Load(), b.LostRaces())
		assert.Equal(t, maxAcked.Load(), token, "the largest acknowledged token is the object's")
		assert.Equal(t, strconv.FormatUint(token, 10), string(v))
	})

	// The adapters (etcd's locks, this bucket's writes) meet the Fencing
	// API's contract.
	t.Run("conformance", func(t *testing.T) {
		rep, err := conform.Check(opCtx(t), eps, conform.Options{Semantics: Semantics})
		require.NoError(t, err)
		var sb strings.Builder
		rep.Print(&sb)
		assert.True(t, rep.Conformant(), "%s", sb.String())
	})
}
