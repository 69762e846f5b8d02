package conform

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/fencing"
	"github.com/fencecheck/fencecheck/harness"
)

// store is a small correct fencing.Store (no leases expire) with switches
// that break the contract the way the reference's bug switches do.
type store struct {
	mu          sync.Mutex
	counter     uint64
	holder      map[string]string
	token       map[string]uint64
	hw, tov     map[string]uint64
	val         map[string][]byte
	acceptEqual bool
}

func newStore() *store {
	return &store{holder: map[string]string{}, token: map[string]uint64{}, hw: map[string]uint64{}, tov: map[string]uint64{}, val: map[string][]byte{}}
}

func (s *store) Acquire(_ context.Context, lock, owner string, _ time.Duration) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if h, ok := s.holder[lock]; ok && h != owner {
		return 0, fencing.ErrHeld
	}
	s.counter++
	s.holder[lock], s.token[lock] = owner, s.counter
	return s.counter, nil
}

func (s *store) Renew(_ context.Context, lock, owner string, token uint64, _ time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.holder[lock] != owner || s.token[lock] != token {
		return fencing.ErrLost
	}
	return nil
}

func (s *store) Release(_ context.Context, lock, owner string, token uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.holder[lock] != owner || s.token[lock] != token {
		return fencing.ErrLost
	}
	delete(s.holder, lock)
	return nil
}

func (s *store) Write(_ context.Context, key string, token uint64, value []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	hw := s.hw[key]
	if token < hw || (token == hw && !s.acceptEqual && hw != 0) {
		return &fencing.StaleError{HighWater: hw}
	}
	s.hw[key], s.tov[key], s.val[key] = token, token, append([]byte(nil), value...)
	return nil
}

func (s *store) WriteUnchecked(_ context.Context, key string, token uint64, value []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tov[key], s.val[key] = token, append([]byte(nil), value...)
	return nil
}

func (s *store) Read(_ context.Context, key string) ([]byte, uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.val[key]
	if !ok {
		return nil, 0, fencing.ErrNotFound
	}
	return v, s.tov[key], nil
}

func (s *store) Close() error { return nil }

func serve(t *testing.T, h http.Handler) harness.Endpoints {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	ep := harness.Endpoint{Node: "n1", URL: srv.URL}
	return harness.Endpoints{Issuers: []harness.Endpoint{ep}, Resources: []harness.Endpoint{ep}}
}

func check(t *testing.T, eps harness.Endpoints, sem checkers.Semantics) *Report {
	t.Helper()
	rep, err := Check(context.Background(), eps, Options{Semantics: sem})
	require.NoError(t, err)
	return rep
}

func TestFencedServerIsConformant(t *testing.T) {
	rep := check(t, serve(t, fencing.NewServer(newStore(), fencing.ServerOptions{})), checkers.DefaultSemantics())
	assert.Empty(t, rep.Deviations)
	assert.Empty(t, rep.Skipped)
	assert.True(t, rep.Conformant())
	assert.Greater(t, rep.Checks, 50, "the preflight checks every endpoint several ways")
	assert.Equal(t, rep.Checks, rep.Passed)
	assert.NoError(t, rep.Err())
}

func TestSealedServerIsConformantAsAuthenticated(t *testing.T) {
	h := fencing.NewServer(newStore(), fencing.ServerOptions{SealKey: []byte("k")})
	sem := checkers.DefaultSemantics()
	sem.Authenticated = true
	rep := check(t, serve(t, h), sem)
	assert.Empty(t, rep.Deviations)
	assert.True(t, rep.Conformant())
}

func TestAcceptEqualIsReported(t *testing.T) {
	s := newStore()
	s.acceptEqual = true
	rep := check(t, serve(t, fencing.NewServer(s, fencing.ServerOptions{})), checkers.DefaultSemantics())
	require.False(t, rep.Conformant())
	assert.True(t, rep.Has("write-equal-token"), "%v", rep.Deviations)
	text := rep.Err().Error()
	assert.Contains(t, text, "equal to the high-water mark")
	assert.Contains(t, text, "answered 204")
}

func TestAcceptEqualIsFineWhenDeclared(t *testing.T) {
	s := newStore()
	s.acceptEqual = true
	sem := checkers.DefaultSemantics()
	sem.Equal = checkers.EqualAccept
	rep := check(t, serve(t, fencing.NewServer(s, fencing.ServerOptions{})), sem)
	assert.Empty(t, rep.Deviations)
}

func TestMissingAsZeroIsReported(t *testing.T) {
	h := fencing.NewServer(newStore(), fencing.ServerOptions{Bugs: fencing.ServerBugs{MissingAsZero: true}})
	rep := check(t, serve(t, h), checkers.DefaultSemantics())
	require.False(t, rep.Conformant())
	assert.True(t, rep.Has("write-missing-token"), "%v", rep.Deviations)
	assert.True(t, rep.Has("write-empty-token"), "%v", rep.Deviations)
	// One deviation per broken rule: the reads that follow know the value
	// changed and do not repeat it.
	assert.Len(t, rep.Deviations, 2, "%v", rep.Deviations)
}

func TestAcceptForgedIsReportedWhenAuthenticated(t *testing.T) {
	h := fencing.NewServer(newStore(), fencing.ServerOptions{SealKey: []byte("k"), Bugs: fencing.ServerBugs{AcceptForged: true}})
	sem := checkers.DefaultSemantics()
	sem.Authenticated = true
	rep := check(t, serve(t, h), sem)
	assert.True(t, rep.Has("write-forged-token"), "%v", rep.Deviations)
}

// A hand-written server that gets the outcome classes wrong: stale writes
// answered 500 with plain text, reads without Fencing-Token, no health.
func TestSloppyServerDeviationsInWords(t *testing.T) {
	good := fencing.NewServer(newStore(), fencing.ServerOptions{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/v1/health":
			w.WriteHeader(http.StatusServiceUnavailable)
		case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/v1/resources/"):
			rec := httptest.NewRecorder()
			good.ServeHTTP(rec, r)
			rec.Header().Del(fencing.TokenHeader)
			for k, v := range rec.Header() {
				w.Header()[k] = v
			}
			w.WriteHeader(rec.Code)
			w.Write(rec.Body.Bytes())
		case r.Method == http.MethodPut:
			rec := httptest.NewRecorder()
			good.ServeHTTP(rec, r)
			if rec.Code == http.StatusConflict {
				http.Error(w, "too old", http.StatusInternalServerError)
				return
			}
			w.WriteHeader(rec.Code)
			w.Write(rec.Body.Bytes())
		default:
			good.ServeHTTP(w, r)
		}
	})
	rep := check(t, serve(t, h), checkers.DefaultSemantics())
	require.False(t, rep.Conformant())
	for _, c := range []string{"health", "write-equal-token", "write-stale-token", "read-token-header"} {
		assert.True(t, rep.Has(c), "expected a %s deviation in %v", c, rep.Deviations)
	}
	text := rep.Err().Error()
	assert.Contains(t, text, "the health check of a ready node answered 503; Fencing API v1 wants 200")
	assert.Contains(t, text, "answered 500 too old")
	assert.Contains(t, text, "carries no Fencing-Token header")
}

// Two issuers with their own counters (a split brain by design) and two
// resources with their own state: the preflight says clients could not use
// them as one system.
func TestIndependentNodesAreReported(t *testing.T) {
	a := serve(t, fencing.NewServer(newStore(), fencing.ServerOptions{}))
	b := serve(t, fencing.NewServer(newStore(), fencing.ServerOptions{}))
	b.Issuers[0].Node, b.Resources[0].Node = "n2", "n2"
	eps := harness.Endpoints{Issuers: append(a.Issuers, b.Issuers...), Resources: append(a.Resources, b.Resources...)}
	rep := check(t, eps, checkers.DefaultSemantics())
	assert.True(t, rep.Has("token-order-across-issuers"), "%v", rep.Deviations)
	assert.True(t, rep.Has("read-across-resources"), "%v", rep.Deviations)
}

func TestUnreachableNodeIsADeviation(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	ep := harness.Endpoint{Node: "gone", URL: url}
	rep := check(t, harness.Endpoints{Issuers: []harness.Endpoint{ep}, Resources: []harness.Endpoint{ep}}, checkers.DefaultSemantics())
	require.False(t, rep.Conformant())
	assert.Contains(t, rep.Err().Error(), "no answer")
}

// An issuer that hands out no token: the lock checks stop there (one
// deviation, not one per later check), and the resource checks go on with
// made-up tokens, since the system does not authenticate them.
func TestBrokenIssuerIsOneDeviation(t *testing.T) {
	good := fencing.NewServer(newStore(), fencing.ServerOptions{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/acquire") && r.Method == http.MethodPost {
			http.Error(w, "boom", http.StatusInternalServerError)
			return
		}
		good.ServeHTTP(w, r)
	})
	rep := check(t, serve(t, h), checkers.DefaultSemantics())
	n := 0
	for _, d := range rep.Deviations {
		if d.Check == "acquire" {
			n++
		}
	}
	assert.Equal(t, 1, n, "%v", rep.Deviations)
	assert.False(t, rep.Has("write-equal-token"))
	assert.Greater(t, rep.Passed, 20, "the resource checks ran with made-up tokens")
}

// A deviation in a detail (another 4xx than the contract's for a missing
// token) is safe: the write was still rejected, and a run may go on past
// it. An accepted replay is unsafe.
func TestDeviationsAreSafeOrUnsafe(t *testing.T) {
	good := fencing.NewServer(newStore(), fencing.ServerOptions{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut && r.Header.Get(fencing.TokenHeader) == "" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			w.Write([]byte(`{"error":"bad-request","message":"no token"}`))
			return
		}
		good.ServeHTTP(w, r)
	})
	rep := check(t, serve(t, h), checkers.DefaultSemantics())
	require.True(t, rep.Has("write-missing-token"), "%v", rep.Deviations)
	assert.Empty(t, rep.Unsafe(), "%v", rep.Deviations)
	assert.NotEmpty(t, rep.Safe())

	s := newStore()
	s.acceptEqual = true
	rep = check(t, serve(t, fencing.NewServer(s, fencing.ServerOptions{})), checkers.DefaultSemantics())
	require.NotEmpty(t, rep.Unsafe())
	assert.Equal(t, "write-equal-token", rep.Unsafe()[0].Check)
}
