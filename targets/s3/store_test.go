package s3

import (
	"crypto/md5"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/fencing"
)

// fakeGateway is a bucket store in memory, ETag the body's MD5 as S3's for
// a simple PUT; ignoreConditions makes it a store that drops If-Match and
// If-None-Match (the docker tests hold the real gateway).
type fakeGateway struct {
	mu               sync.Mutex
	objects          map[string][]byte
	ignoreConditions bool
	// denyCreate refuses to create the bucket (403), as a store does to a
	// key without that right; the bucket exists all the same.
	denyCreate bool
}

func etagOf(b []byte) string { s := md5.Sum(b); return `"` + hex.EncodeToString(s[:]) + `"` }

func (g *fakeGateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.mu.Lock()
	defer g.mu.Unlock()
	cur, exists := g.objects[r.URL.Path]
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		if !exists && r.URL.Path != "/b" {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		w.Header().Set("ETag", etagOf(cur))
		w.Write(cur)
	case http.MethodPut:
		if r.URL.Path == "/b" {
			if g.denyCreate {
				w.WriteHeader(http.StatusForbidden)
			}
			return
		}
		if !g.ignoreConditions {
			im, inm := r.Header.Get("If-Match"), r.Header.Get("If-None-Match")
			if (im != "" && (!exists || im != etagOf(cur))) || (inm == "*" && exists) {
				w.WriteHeader(http.StatusPreconditionFailed)
				return
			}
		}
		data, _ := io.ReadAll(r.Body)
		g.objects[r.URL.Path] = data
		w.Header().Set("ETag", etagOf(data))
	}
}

func fakeBucket(t *testing.T, g *fakeGateway, mode WriteMode) *Bucket {
	g.objects = map[string][]byte{}
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)
	b, err := NewBucket(BucketOptions{Endpoint: srv.URL, Bucket: "b", Mode: mode})
	require.NoError(t, err)
	return b
}

func TestFrame(t *testing.T) {
	token, value, err := unframe(frame(1<<64-1, []byte("a\nb")))
	require.NoError(t, err)
	assert.Equal(t, uint64(1<<64-1), token)
	assert.Equal(t, "a\nb", string(value))
	_, _, err = unframe([]byte("someone else's object"))
	assert.ErrorContains(t, err, "not written by fencecheck")
	assert.NotEqual(t, etagOf(frame(5, []byte("v"))), etagOf(frame(6, []byte("v"))), "the ETag names the token")
}

// overtake writes token 9 between token 8's check and its PUT.
func overtake(t *testing.T, b *Bucket) (error, uint64) {
	ctx := t.Context()
	require.NoError(t, b.Write(ctx, "k", 1, []byte("v1")))
	var once sync.Once
	b.beforePut = func(key string) {
		once.Do(func() {
			hook := b.beforePut
			b.beforePut = nil
			require.NoError(t, b.Write(ctx, key, 9, []byte("v9")))
			b.beforePut = hook
		})
	}
	err := b.Write(ctx, "k", 8, []byte("v8"))
	_, token, rerr := b.Read(ctx, "k")
	require.NoError(t, rerr)
	return err, token
}

func TestOvertakenWrite(t *testing.T) {
	var stale *fencing.StaleError
	err, token := overtake(t, fakeBucket(t, &fakeGateway{}, Conditional))
	require.ErrorAs(t, err, &stale, "the lost race is read again: token 8 is stale")
	assert.EqualValues(t, 9, stale.HighWater)
	assert.EqualValues(t, 9, token)

	err, token = overtake(t, fakeBucket(t, &fakeGateway{}, Unconditional))
	assert.NoError(t, err)
	assert.EqualValues(t, 8, token, "the check-then-act race: token 9's write is lost")

	// A store that ignores If-Match turns the conditional write into the
	// unconditional one, and nothing in its answers shows it.
	err, token = overtake(t, fakeBucket(t, &fakeGateway{ignoreConditions: true}, Conditional))
	assert.NoError(t, err)
	assert.EqualValues(t, 8, token)
}

// With credentials every request carries a SigV4 signature over its body's
// hash; without, none (the anonymous gateway of the target).
func TestSigning(t *testing.T) {
	var mu sync.Mutex
	var auths []string
	g := &fakeGateway{objects: map[string][]byte{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		auths = append(auths, r.Header.Get("Authorization")+" "+r.Header.Get("X-Amz-Content-Sha256"))
		mu.Unlock()
		g.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	b, err := NewBucket(BucketOptions{Endpoint: srv.URL, Bucket: "b", Credentials: &Credentials{AccessKeyID: "AKID", SecretAccessKey: "secret"}})
	require.NoError(t, err)
	require.NoError(t, b.Write(t.Context(), "k", 1, []byte("v")))
	require.NotEmpty(t, auths)
	for _, a := range auths {
		assert.Regexp(t, `^AWS4-HMAC-SHA256 Credential=AKID/\d{8}/us-east-1/s3/aws4_request, SignedHeaders=\S+, Signature=[0-9a-f]{64} [0-9a-f]{64}$`, a)
	}
}

// A key that may not create the bucket uses the one that exists.
func TestExistingBucket(t *testing.T) {
	b := fakeBucket(t, &fakeGateway{denyCreate: true}, Conditional)
	require.NoError(t, b.Write(t.Context(), "k", 1, []byte("v")))
	require.NoError(t, b.Health(t.Context()))
}
