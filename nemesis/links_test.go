package nemesis

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/fencecheck/fencecheck/history"
	"github.com/fencecheck/fencecheck/nemesis/proxy"
	"github.com/stretchr/testify/require"
)

// strictResource is a minimal correct resource for the link nemeses' tests.
type strictResource struct {
	mu sync.Mutex
	hw map[string]uint64
	// got lists the values that arrived, in order.
	got []string
}

func (s *strictResource) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPut {
		w.WriteHeader(http.StatusOK)
		return
	}
	body, _ := io.ReadAll(r.Body)
	key := strings.TrimPrefix(r.URL.Path, "/v1/resources/")
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got = append(s.got, string(body))
	tok := r.Header.Get(proxy.TokenHeader)
	if tok == "" {
		w.WriteHeader(http.StatusPreconditionRequired)
		return
	}
	n, err := strconv.ParseUint(tok, 10, 64)
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	if n <= s.hw[key] {
		w.WriteHeader(http.StatusConflict)
		return
	}
	s.hw[key] = n
	w.WriteHeader(http.StatusNoContent)
}

func (s *strictResource) arrived() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.got...)
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) events(t *testing.T) []history.Event {
	b.mu.Lock()
	data := bytes.Clone(b.buf.Bytes())
	b.mu.Unlock()
	evs, err := history.ReadAll(bytes.NewReader(data))
	require.NoError(t, err)
	return evs
}

// linkFixture is a resource behind a proxy set with one client link (and a
// node-to-node link the client nemeses must leave alone).
type linkFixture struct {
	res  *strictResource
	set  *proxy.Set
	url  string
	hist *syncBuffer
	rec  *history.Recorder
}

func newLinkFixture(t *testing.T) *linkFixture {
	t.Helper()
	res := &strictResource{hw: map[string]uint64{}}
	srv := httptest.NewServer(res)
	t.Cleanup(srv.Close)
	hist := &syncBuffer{}
	rec := history.NewRecorder(hist)
	set := proxy.NewSet(rec, 3)
	t.Cleanup(func() { set.Close() })
	u, err := set.Link("clients->n1", ClientGroup, "n1", srv.URL)
	require.NoError(t, err)
	_, err = set.Link("n2->n1", "n2", "n1", srv.URL)
	require.NoError(t, err)
	return &linkFixture{res: res, set: set, url: u, hist: hist, rec: rec}
}

func putToken(ctx context.Context, base, key, token, value string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, base+"/v1/resources/"+key, strings.NewReader(value))
	if err != nil {
		return 0, err
	}
	req.Header.Set(proxy.TokenHeader, token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}
