package fencing

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeStore is a minimal correct Store for the HTTP layer's tests; leases
// never expire unless expired is set.
type fakeStore struct {
	mu      sync.Mutex
	counter uint64
	holder  map[string]string
	token   map[string]uint64
	hw      map[string]uint64
	val     map[string][]byte
	tov     map[string]uint64
	fail    error
}

func newFakeStore() *fakeStore {
	return &fakeStore{holder: map[string]string{}, token: map[string]uint64{}, hw: map[string]uint64{}, val: map[string][]byte{}, tov: map[string]uint64{}}
}

func (f *fakeStore) Acquire(_ context.Context, lock, owner string, _ time.Duration) (uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return 0, f.fail
	}
	if h, ok := f.holder[lock]; ok && h != owner {
		return 0, ErrHeld
	}
	f.counter++
	f.holder[lock], f.token[lock] = owner, f.counter
	return f.counter, nil
}

func (f *fakeStore) Renew(_ context.Context, lock, owner string, token uint64, _ time.Duration) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.holder[lock] != owner || f.token[lock] != token {
		return ErrLost
	}
	return nil
}

func (f *fakeStore) Release(_ context.Context, lock, owner string, token uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.holder[lock] != owner || f.token[lock] != token {
		return ErrLost
	}
	delete(f.holder, lock)
	return nil
}

func (f *fakeStore) Write(_ context.Context, key string, token uint64, value []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return f.fail
	}
	if token <= f.hw[key] {
		return &StaleError{HighWater: f.hw[key]}
	}
	f.hw[key], f.val[key], f.tov[key] = token, value, token
	return nil
}

func (f *fakeStore) WriteUnchecked(_ context.Context, key string, token uint64, value []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.val[key], f.tov[key] = value, token
	return nil
}

func (f *fakeStore) Read(_ context.Context, key string) ([]byte, uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v, ok := f.val[key]
	if !ok {
		return nil, 0, ErrNotFound
	}
	return v, f.tov[key], nil
}

func (f *fakeStore) Close() error { return nil }

type call struct {
	method, path, body string
	header             map[string]string
}

type answer struct {
	status int
	body   string
	header http.Header
}

func do(t *testing.T, h http.Handler, c call) answer {
	t.Helper()
	req := httptest.NewRequest(c.method, c.path, strings.NewReader(c.body))
	for k, v := range c.header {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return answer{status: rec.Code, body: rec.Body.String(), header: rec.Header()}
}

func errWord(t *testing.T, a answer) string {
	t.Helper()
	var e ErrorBody
	require.NoError(t, json.Unmarshal([]byte(a.body), &e), "error body must be JSON: %q", a.body)
	assert.NotEmpty(t, e.Message, "every error carries a message")
	return e.Error
}

func tok(v string) map[string]string { return map[string]string{TokenHeader: v} }

func TestServerStatusCodes(t *testing.T) {
	h := NewServer(newFakeStore(), ServerOptions{})
	// Setup: c1 holds l1 with token 1; key k has high-water 5.
	require.Equal(t, 200, do(t, h, call{method: "POST", path: "/v1/locks/l1/acquire", body: `{"owner":"c1","ttl_ms":2000}`}).status)
	require.Equal(t, 204, do(t, h, call{method: "PUT", path: "/v1/resources/k", body: "v5", header: tok("5")}).status)

	big := strings.Repeat("x", MaxBodyBytes+1)
	name129 := strings.Repeat("a", 129)
	for _, tc := range []struct {
		name   string
		call   call
		status int
		word   string
	}{
		{"health", call{method: "GET", path: "/v1/health"}, 200, ""},
		{"health wrong method", call{method: "POST", path: "/v1/health"}, 405, ErrWordMethod},
		{"acquire held", call{method: "POST", path: "/v1/locks/l1/acquire", body: `{"owner":"c2","ttl_ms":2000}`}, 409, ErrWordHeld},
		{"acquire free", call{method: "POST", path: "/v1/locks/l2/acquire", body: `{"owner":"c2","ttl_ms":1}`}, 200, ""},
		{"acquire no ttl", call{method: "POST", path: "/v1/locks/l3/acquire", body: `{"owner":"c2"}`}, 400, ErrWordBadRequest},
		{"acquire zero ttl", call{method: "POST", path: "/v1/locks/l3/acquire", body: `{"owner":"c2","ttl_ms":0}`}, 400, ErrWordBadRequest},
		{"acquire negative ttl", call{method: "POST", path: "/v1/locks/l3/acquire", body: `{"owner":"c2","ttl_ms":-5}`}, 400, ErrWordBadRequest},
		{"acquire huge ttl", call{method: "POST", path: "/v1/locks/l3/acquire", body: `{"owner":"c2","ttl_ms":86400001}`}, 400, ErrWordBadRequest},
		{"acquire fractional ttl", call{method: "POST", path: "/v1/locks/l3/acquire", body: `{"owner":"c2","ttl_ms":1.5}`}, 400, ErrWordBadRequest},
		{"acquire no owner", call{method: "POST", path: "/v1/locks/l3/acquire", body: `{"ttl_ms":100}`}, 400, ErrWordBadRequest},
		{"acquire bad json", call{method: "POST", path: "/v1/locks/l3/acquire", body: `{"owner":`}, 400, ErrWordBadRequest},
		{"acquire GET", call{method: "GET", path: "/v1/locks/l3/acquire"}, 405, ErrWordMethod},
		{"acquire body too large", call{method: "POST", path: "/v1/locks/l3/acquire", body: big}, 413, ErrWordTooLarge},
		{"unknown lock op", call{method: "POST", path: "/v1/locks/l3/steal", body: `{}`}, 404, ErrWordNoRoute},
		{"lock name too long", call{method: "POST", path: "/v1/locks/" + name129 + "/acquire", body: `{"owner":"c","ttl_ms":5}`}, 400, ErrWordBadName},
		{"lock name bad char", call{method: "POST", path: "/v1/locks/a%21b/acquire", body: `{"owner":"c","ttl_ms":5}`}, 400, ErrWordBadName},
		{"renew ok", call{method: "POST", path: "/v1/locks/l1/renew", body: `{"owner":"c1","token":"1","ttl_ms":2000}`}, 200, ""},
		{"renew lost (owner)", call{method: "POST", path: "/v1/locks/l1/renew", body: `{"owner":"c9","token":"1","ttl_ms":2000}`}, 409, ErrWordLost},
		{"renew lost (token)", call{method: "POST", path: "/v1/locks/l1/renew", body: `{"owner":"c1","token":"7","ttl_ms":2000}`}, 409, ErrWordLost},
		{"renew missing token", call{method: "POST", path: "/v1/locks/l1/renew", body: `{"owner":"c1","ttl_ms":2000}`}, 428, ErrWordMissingToken},
		{"renew malformed token", call{method: "POST", path: "/v1/locks/l1/renew", body: `{"owner":"c1","token":"x1","ttl_ms":2000}`}, 400, ErrWordMalformedToken},
		{"renew no ttl", call{method: "POST", path: "/v1/locks/l1/renew", body: `{"owner":"c1","token":"1"}`}, 400, ErrWordBadRequest},
		{"release lost", call{method: "POST", path: "/v1/locks/l1/release", body: `{"owner":"c2","token":"1"}`}, 409, ErrWordLost},
		{"write newer", call{method: "PUT", path: "/v1/resources/k", body: "v6", header: tok("6")}, 204, ""},
		{"write equal is a replay", call{method: "PUT", path: "/v1/resources/k", body: "again", header: tok("6")}, 409, ErrWordStale},
		{"write older", call{method: "PUT", path: "/v1/resources/k", body: "old", header: tok("3")}, 409, ErrWordStale},
		{"write missing token", call{method: "PUT", path: "/v1/resources/k", body: "x"}, 428, ErrWordMissingToken},
		{"write empty token", call{method: "PUT", path: "/v1/resources/k", body: "x", header: tok("")}, 428, ErrWordMissingToken},
		{"write malformed token", call{method: "PUT", path: "/v1/resources/k", body: "x", header: tok("12abc")}, 400, ErrWordMalformedToken},
		{"write negative token", call{method: "PUT", path: "/v1/resources/k", body: "x", header: tok("-7")}, 400, ErrWordMalformedToken},
		{"write leading zero", call{method: "PUT", path: "/v1/resources/k", body: "x", header: tok("07")}, 400, ErrWordMalformedToken},
		{"write overflow", call{method: "PUT", path: "/v1/resources/k", body: "x", header: tok("18446744073709551616")}, 400, ErrWordMalformedToken},
		{"write body too large", call{method: "PUT", path: "/v1/resources/k", body: big, header: tok("100")}, 413, ErrWordTooLarge},
		{"write bad name", call{method: "PUT", path: "/v1/resources/a%2Fb", body: "x", header: tok("100")}, 400, ErrWordBadName},
		{"write name too long", call{method: "PUT", path: "/v1/resources/" + name129, body: "x", header: tok("100")}, 400, ErrWordBadName},
		{"write empty name", call{method: "PUT", path: "/v1/resources/", body: "x", header: tok("100")}, 400, ErrWordBadName},
		{"resource wrong method", call{method: "DELETE", path: "/v1/resources/k"}, 405, ErrWordMethod},
		{"read never written", call{method: "GET", path: "/v1/resources/nothing"}, 404, ErrWordNotFound},
		{"unknown path", call{method: "GET", path: "/v2/whatever"}, 404, ErrWordNoRoute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := do(t, h, tc.call)
			assert.Equal(t, tc.status, a.status, a.body)
			if tc.word != "" {
				assert.Equal(t, tc.word, errWord(t, a))
				assert.Equal(t, "application/json", a.header.Get("Content-Type"))
			}
			if tc.status == 405 {
				assert.NotEmpty(t, a.header.Get("Allow"))
			}
		})
	}
}

func TestServerBodies(t *testing.T) {
	h := NewServer(newFakeStore(), ServerOptions{})
	a := do(t, h, call{method: "POST", path: "/v1/locks/r1/acquire", body: `{"owner":"c7","ttl_ms":2000}`})
	require.Equal(t, 200, a.status)
	assert.JSONEq(t, `{"token":"1","ttl_ms":2000}`, a.body)

	a = do(t, h, call{method: "POST", path: "/v1/locks/r1/renew", body: `{"owner":"c7","token":"1","ttl_ms":3000}`})
	require.Equal(t, 200, a.status)
	assert.JSONEq(t, `{"token":"1","ttl_ms":3000}`, a.body)

	a = do(t, h, call{method: "PUT", path: "/v1/resources/r1", body: "c7-1", header: tok("43")})
	require.Equal(t, 204, a.status)
	assert.Empty(t, a.body)

	a = do(t, h, call{method: "PUT", path: "/v1/resources/r1", body: "c8-1", header: tok("42")})
	require.Equal(t, 409, a.status)
	var e ErrorBody
	require.NoError(t, json.Unmarshal([]byte(a.body), &e))
	assert.Equal(t, ErrorBody{Error: "stale", HighWater: "43", Message: e.Message}, e)

	a = do(t, h, call{method: "GET", path: "/v1/resources/r1"})
	require.Equal(t, 200, a.status)
	assert.Equal(t, "c7-1", a.body)
	assert.Equal(t, "43", a.header.Get(TokenHeader))

	a = do(t, h, call{method: "POST", path: "/v1/locks/r1/release", body: `{"owner":"c7","token":"1"}`})
	require.Equal(t, 200, a.status)
	// Released: another owner may take it, with a newer token.
	a = do(t, h, call{method: "POST", path: "/v1/locks/r1/acquire", body: `{"owner":"c8","ttl_ms":2000}`})
	require.Equal(t, 200, a.status)
	assert.JSONEq(t, `{"token":"2","ttl_ms":2000}`, a.body)
}

// grantingStore grants leases of its own length whatever was asked, as a
// ZooKeeper session's negotiated timeout does.
type grantingStore struct {
	*fakeStore
	granted time.Duration
}

func (g grantingStore) AcquireLease(ctx context.Context, lock, owner string, ttl time.Duration) (uint64, time.Duration, error) {
	t, err := g.Acquire(ctx, lock, owner, ttl)
	return t, g.granted, err
}

func (g grantingStore) RenewLease(ctx context.Context, lock, owner string, token uint64, ttl time.Duration) (time.Duration, error) {
	return g.granted, g.Renew(ctx, lock, owner, token, ttl)
}

// The answers say the lease the store granted, not the one asked for.
func TestServerAnswersGrantedLease(t *testing.T) {
	h := NewServer(grantingStore{fakeStore: newFakeStore(), granted: 4 * time.Second}, ServerOptions{})
	a := do(t, h, call{method: "POST", path: "/v1/locks/r1/acquire", body: `{"owner":"c7","ttl_ms":1000}`})
	require.Equal(t, 200, a.status)
	assert.JSONEq(t, `{"token":"1","ttl_ms":4000}`, a.body)
	a = do(t, h, call{method: "POST", path: "/v1/locks/r1/renew", body: `{"owner":"c7","token":"1","ttl_ms":1000}`})
	require.Equal(t, 200, a.status)
	assert.JSONEq(t, `{"token":"1","ttl_ms":4000}`, a.body)
	a = do(t, h, call{method: "POST", path: "/v1/locks/r1/renew", body: `{"owner":"c8","token":"1","ttl_ms":1000}`})
	assert.Equal(t, 409, a.status)
	assert.Equal(t, ErrWordLost, errWord(t, a))
}

func TestServerStoreFailureIs5xx(t *testing.T) {
	fs := newFakeStore()
	fs.fail = errors.New("disk on fire")
	h := NewServer(fs, ServerOptions{})
	a := do(t, h, call{method: "PUT", path: "/v1/resources/k", body: "x", header: tok("1")})
	assert.Equal(t, 500, a.status)
	assert.Equal(t, ErrWordInternal, errWord(t, a))
	fs.fail = context.DeadlineExceeded
	a = do(t, h, call{method: "POST", path: "/v1/locks/l/acquire", body: `{"owner":"c","ttl_ms":5}`})
	assert.Equal(t, 503, a.status)
}

func TestServerSealing(t *testing.T) {
	key := []byte("secret")
	sealer := NewSealer(key)
	h := NewServer(newFakeStore(), ServerOptions{SealKey: key})

	a := do(t, h, call{method: "POST", path: "/v1/locks/r1/acquire", body: `{"owner":"c7","ttl_ms":2000}`})
	require.Equal(t, 200, a.status)
	var lr LockResponse
	require.NoError(t, json.Unmarshal([]byte(a.body), &lr))
	assert.Equal(t, sealer.Seal(1), lr.Token)
	assert.Regexp(t, `^1\.[0-9a-f]{64}$`, lr.Token)

	renew := `{"owner":"c7","token":"` + lr.Token + `","ttl_ms":2000}`
	assert.Equal(t, 200, do(t, h, call{method: "POST", path: "/v1/locks/r1/renew", body: renew}).status)
	a = do(t, h, call{method: "POST", path: "/v1/locks/r1/renew", body: `{"owner":"c7","token":"1","ttl_ms":2000}`})
	assert.Equal(t, 403, a.status)

	other := NewSealer([]byte("other key")).Seal(1000)
	for _, tc := range []struct {
		name, token string
		status      int
		word        string
	}{
		{"unsealed forgery", "1000", 403, ErrWordForged},
		{"wrong key", other, 403, ErrWordForged},
		{"seal of another number", "1000." + strings.SplitN(sealer.Seal(999), ".", 2)[1], 403, ErrWordForged},
		{"garbled seal", "1000.!!", 400, ErrWordMalformedToken},
		{"sealed", sealer.Seal(1000), 204, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := do(t, h, call{method: "PUT", path: "/v1/resources/k", body: tc.name, header: tok(tc.token)})
			assert.Equal(t, tc.status, a.status, a.body)
			if tc.word != "" {
				assert.Equal(t, tc.word, errWord(t, a))
			}
		})
	}
	a = do(t, h, call{method: "GET", path: "/v1/resources/k"})
	require.Equal(t, 200, a.status)
	assert.Equal(t, sealer.Seal(1000), a.header.Get(TokenHeader), "reads hand out the sealed form")
}

func TestServerUnsealedIgnoresSeal(t *testing.T) {
	// Without a key the seal is opaque: only the number orders tokens.
	h := NewServer(newFakeStore(), ServerOptions{})
	assert.Equal(t, 204, do(t, h, call{method: "PUT", path: "/v1/resources/k", body: "a", header: tok("5.whatever")}).status)
	assert.Equal(t, 409, do(t, h, call{method: "PUT", path: "/v1/resources/k", body: "b", header: tok("5.other")}).status)
}

func TestServerBugMissingAsZero(t *testing.T) {
	correct := NewServer(newFakeStore(), ServerOptions{})
	buggy := NewServer(newFakeStore(), ServerOptions{Bugs: ServerBugs{MissingAsZero: true}})
	for _, h := range []http.Handler{correct, buggy} {
		require.Equal(t, 204, do(t, h, call{method: "PUT", path: "/v1/resources/k", body: "v9", header: tok("9")}).status)
	}
	assert.Equal(t, 428, do(t, correct, call{method: "PUT", path: "/v1/resources/k", body: "none"}).status)
	assert.Equal(t, 204, do(t, buggy, call{method: "PUT", path: "/v1/resources/k", body: "none"}).status)
	assert.Equal(t, 204, do(t, buggy, call{method: "PUT", path: "/v1/resources/k", body: "empty", header: tok("")}).status)
	a := do(t, buggy, call{method: "GET", path: "/v1/resources/k"})
	assert.Equal(t, "empty", a.body)
	assert.Equal(t, "0", a.header.Get(TokenHeader))
	// Only missing tokens are affected: a stale token is still rejected.
	assert.Equal(t, 409, do(t, buggy, call{method: "PUT", path: "/v1/resources/k", body: "old", header: tok("3")}).status)
	assert.Equal(t, 400, do(t, buggy, call{method: "PUT", path: "/v1/resources/k", body: "bad", header: tok("x")}).status)
}

func TestServerBugAcceptForged(t *testing.T) {
	key := []byte("k")
	buggy := NewServer(newFakeStore(), ServerOptions{SealKey: key, Bugs: ServerBugs{AcceptForged: true}})
	a := do(t, buggy, call{method: "POST", path: "/v1/locks/r1/acquire", body: `{"owner":"c7","ttl_ms":2000}`})
	require.Equal(t, 200, a.status)
	assert.Contains(t, a.body, `"1.`, "tokens are still sealed")
	assert.Equal(t, 204, do(t, buggy, call{method: "PUT", path: "/v1/resources/k", body: "f", header: tok("1000000")}).status)
	// The check on the number stays.
	assert.Equal(t, 409, do(t, buggy, call{method: "PUT", path: "/v1/resources/k", body: "g", header: tok("5")}).status)
	// The issuer still verifies seals on renew.
	assert.Equal(t, 403, do(t, buggy, call{method: "POST", path: "/v1/locks/r1/renew", body: `{"owner":"c7","token":"1","ttl_ms":5}`}).status)
}

func TestServerOverHTTP(t *testing.T) {
	// A real listener: the body limit and HEAD path behave over the wire too.
	ts := httptest.NewServer(NewServer(newFakeStore(), ServerOptions{}))
	defer ts.Close()
	req, _ := http.NewRequest("PUT", ts.URL+"/v1/resources/k", strings.NewReader(strings.Repeat("y", MaxBodyBytes+10)))
	req.Header.Set(TokenHeader, "1")
	resp, err := ts.Client().Do(req)
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, 413, resp.StatusCode, string(b))
	// Exactly 1 MiB is allowed.
	req, _ = http.NewRequest("PUT", ts.URL+"/v1/resources/k", strings.NewReader(strings.Repeat("y", MaxBodyBytes)))
	req.Header.Set(TokenHeader, "1")
	resp, err = ts.Client().Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, 204, resp.StatusCode)
}
