package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencecheck/fencecheck/history"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/fencing"
)

// fakeResource is a strict resource that records, in the shared history,
// every write it receives (f="received") so tests can see what arrived and
// when relative to the proxy's own events.
type fakeResource struct {
	rec *history.Recorder
	mu  sync.Mutex
	hw  map[string]uint64
	// hold, when set, blocks every write until it is closed.
	hold chan struct{}
}

func (f *fakeResource) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet {
		w.Header().Set("X-Echo", r.Header.Get("X-Test"))
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, "hello")
		return
	}
	body, _ := io.ReadAll(r.Body)
	key := strings.TrimPrefix(r.URL.Path, "/v1/resources/")
	tok, present := r.Header[TokenHeader]
	// An annotation (process -1): a client event must be a model operation.
	f.rec.Record(history.Event{Process: -1, Type: history.Info, F: "received", Key: key, Value: string(body),
		Token: r.Header.Get(TokenHeader), Extra: nil, Error: strconv.FormatBool(present)})
	f.mu.Lock()
	hold := f.hold
	f.mu.Unlock()
	if hold != nil {
		<-hold
	}
	if !present || len(tok) == 0 || tok[0] == "" {
		w.WriteHeader(http.StatusPreconditionRequired)
		return
	}
	n, err := strconv.ParseUint(tok[0], 10, 64)
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if n <= f.hw[key] {
		w.WriteHeader(http.StatusConflict)
		fmt.Fprintf(w, `{"error":"stale","high_water":"%d"}`, f.hw[key])
		return
	}
	f.hw[key] = n
	w.WriteHeader(http.StatusNoContent)
}

type fixture struct {
	buf *lockedWriter
	rec *history.Recorder
	res *fakeResource
	set *Set
	url string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	buf := &lockedWriter{}
	rec := history.NewRecorder(buf)
	res := &fakeResource{rec: rec, hw: map[string]uint64{}}
	srv := httptest.NewServer(res)
	t.Cleanup(srv.Close)
	set := NewSet(rec, 1)
	t.Cleanup(func() { set.Close() })
	u, err := set.Link("clients->n1", "clients", "n1", srv.URL)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(u, "http://127.0.0.1:"))
	return &fixture{buf: buf, rec: rec, res: res, set: set, url: u}
}

// lockedWriter lets tests read the history while proxies still write it.
type lockedWriter struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lockedWriter) snapshot() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return bytes.Clone(l.buf.Bytes())
}

func (f *fixture) events(t *testing.T) []history.Event {
	t.Helper()
	require.NoError(t, f.rec.Err())
	evs, err := history.ReadAll(bytes.NewReader(f.buf.snapshot()))
	require.NoError(t, err)
	return evs
}

func put(t *testing.T, client *http.Client, base, key, token, value string) (int, error) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPut, base+"/v1/resources/"+key, strings.NewReader(value))
	require.NoError(t, err)
	if token != "" {
		req.Header.Set(TokenHeader, token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

func TestForwardsUntouchedWhenNoModeIsOn(t *testing.T) {
	f := newFixture(t)
	req, _ := http.NewRequest(http.MethodGet, f.url+"/v1/resources/k", nil)
	req.Header.Set("X-Test", "echo-me")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "hello", string(body))
	assert.Equal(t, "echo-me", resp.Header.Get("X-Echo"))

	code, err := put(t, http.DefaultClient, f.url, "k", "5", "c1-1")
	require.NoError(t, err)
	assert.Equal(t, http.StatusNoContent, code)
	code, err = put(t, http.DefaultClient, f.url, "k", "5", "c1-2")
	require.NoError(t, err)
	assert.Equal(t, http.StatusConflict, code, "status codes pass through")
	st, err := f.set.Stats("clients->n1")
	require.NoError(t, err)
	assert.EqualValues(t, 3, st.Forwarded)
	assert.Zero(t, st.Stripped)
}

func TestStripTampersEveryWriteAtShareOneAndRecordsItFirst(t *testing.T) {
	f := newFixture(t)
	require.NoError(t, f.set.SetStrip("clients->n1", 1))
	modes := map[string]int{}
	for i := range 60 {
		code, err := put(t, http.DefaultClient, f.url, "k", strconv.Itoa(i+1), fmt.Sprintf("c1-%d", i))
		require.NoError(t, err)
		assert.Contains(t, []int{http.StatusPreconditionRequired, http.StatusBadRequest}, code)
	}
	evs := f.events(t)
	received := map[string]history.Event{}
	for _, e := range evs {
		if e.F == "received" {
			received[e.Value] = e
		}
	}
	strips := 0
	for _, e := range evs {
		if e.F != "strip" {
			continue
		}
		strips++
		assert.Equal(t, history.NemesisProcess, e.Process)
		assert.Equal(t, history.Info, e.Type)
		assert.Equal(t, "k", e.Key)
		mode := strings.Trim(string(e.Extra["mode"]), `"`)
		modes[mode]++
		var linkName string
		require.NoError(t, json.Unmarshal(e.Extra["link"], &linkName))
		assert.Equal(t, "clients->n1", linkName)
		got, ok := received[e.Value]
		require.True(t, ok, "tampered write %s reached the resource", e.Value)
		assert.Less(t, e.Index, got.Index, "tampering is recorded before the write is forwarded")
		assert.Equal(t, e.Token, got.Token, "the recorded token is what the resource received")
		switch mode {
		case StripRemove:
			assert.Equal(t, "false", got.Error, "header absent")
			assert.Empty(t, e.Token)
		case StripEmpty:
			assert.Equal(t, "true", got.Error, "header present but empty")
			assert.Empty(t, e.Token)
		case StripGarble:
			_, err := strconv.ParseUint(e.Token, 10, 64)
			assert.Error(t, err, "a garbled token %q is not a number", e.Token)
			assert.NotEmpty(t, e.Token)
		default:
			t.Fatalf("unknown mode %q", mode)
		}
	}
	assert.Equal(t, 60, strips)
	assert.Len(t, modes, 3, "all three modes are used: %v", modes)
}

func TestStripShareIsPartialAndLeavesReadsAlone(t *testing.T) {
	f := newFixture(t)
	require.NoError(t, f.set.SetStrip("clients->n1", 0.3))
	for i := range 200 {
		_, err := put(t, http.DefaultClient, f.url, "k", strconv.Itoa(i+1), fmt.Sprintf("c1-%d", i))
		require.NoError(t, err)
		resp, err := http.Get(f.url + "/v1/resources/k")
		require.NoError(t, err)
		resp.Body.Close()
	}
	st, _ := f.set.Stats("clients->n1")
	assert.InDelta(t, 60, st.Stripped, 25, "about 30%% of 200 writes")
	require.NoError(t, f.set.SetStrip("clients->n1", 0))
	code, err := put(t, http.DefaultClient, f.url, "k2", "1", "c2-1")
	require.NoError(t, err)
	assert.Equal(t, http.StatusNoContent, code, "strip off: untouched")
}

func TestBlackholeMakesClientsTimeOutAndDropsHeldRequestsOnHeal(t *testing.T) {
	f := newFixture(t)
	require.NoError(t, f.set.SetBlackhole("clients->n1", true))
	short := &http.Client{Timeout: 300 * time.Millisecond}
	start := time.Now()
	_, err := put(t, short, f.url, "k", "1", "c1-1")
	require.Error(t, err)
	assert.True(t, isTimeout(err), "client times out: %v", err)
	assert.GreaterOrEqual(t, time.Since(start), 250*time.Millisecond)

	// A patient client is held until the heal, then its request is dropped.
	errc := make(chan error, 1)
	go func() {
		_, err := put(t, &http.Client{Timeout: 10 * time.Second}, f.url, "k", "2", "c1-2")
		errc <- err
	}()
	// Heal only once the request is held (a loaded machine may be slow to
	// send it).
	require.Eventually(t, func() bool {
		st, _ := f.set.Stats("clients->n1")
		return st.Dropped == 2
	}, 5*time.Second, 10*time.Millisecond, "the second request is held")
	require.NoError(t, f.set.SetBlackhole("clients->n1", false))
	select {
	case err := <-errc:
		require.Error(t, err, "a request held by the black-hole is dropped, never answered")
	case <-time.After(3 * time.Second):
		t.Fatal("held request not released at heal")
	}
	for _, e := range f.events(t) {
		assert.NotEqual(t, "received", e.F, "nothing crossed the black-hole: %+v", e)
	}
	st, _ := f.set.Stats("clients->n1")
	assert.EqualValues(t, 2, st.Dropped)

	code, err := put(t, short, f.url, "k", "3", "c1-3")
	require.NoError(t, err, "healed link forwards again")
	assert.Equal(t, http.StatusNoContent, code)
}

func TestBlackholeSwallowsTheAnswerOfARequestAlreadyForwarded(t *testing.T) {
	f := newFixture(t)
	hold := make(chan struct{})
	f.res.mu.Lock()
	f.res.hold = hold
	f.res.mu.Unlock()
	errc := make(chan error, 1)
	go func() {
		_, err := put(t, &http.Client{Timeout: 800 * time.Millisecond}, f.url, "k", "1", "c1-1")
		errc <- err
	}()
	require.Eventually(t, func() bool {
		for _, e := range f.events(t) {
			if e.F == "received" {
				return true
			}
		}
		return false
	}, 2*time.Second, 10*time.Millisecond)
	require.NoError(t, f.set.SetBlackhole("clients->n1", true))
	close(hold)
	err := <-errc
	require.Error(t, err, "the write landed but its answer was lost")
	f.res.mu.Lock()
	assert.EqualValues(t, 1, f.res.hw["k"], "the write did take effect")
	f.res.mu.Unlock()
}

func TestDelayHoldsAWriteUntilANewerTokenIsAcceptedOnAnyLink(t *testing.T) {
	f := newFixture(t)
	srvURL := f.set.Links()[0].Target
	other, err := f.set.Link("clients->n1-b", "clients", "n1", srvURL)
	require.NoError(t, err)
	require.NoError(t, f.set.SetDelay("clients->n1", 1, 10*time.Second))

	type result struct {
		code int
		err  error
	}
	done := make(chan result, 1)
	start := time.Now()
	go func() {
		code, err := put(t, http.DefaultClient, f.url, "k", "5", "old")
		done <- result{code, err}
	}()
	select {
	case r := <-done:
		t.Fatalf("delayed write went through at once: %+v", r)
	case <-time.After(300 * time.Millisecond):
	}
	// A write to another key does not release it.
	code, err := put(t, http.DefaultClient, other, "other", "9", "x")
	require.NoError(t, err)
	require.Equal(t, http.StatusNoContent, code)
	// An older token does not release it either (4 < 5 is not newer).
	code, err = put(t, http.DefaultClient, other, "k", "4", "older")
	require.NoError(t, err)
	require.Equal(t, http.StatusNoContent, code)
	select {
	case r := <-done:
		t.Fatalf("released before a newer token: %+v", r)
	case <-time.After(200 * time.Millisecond):
	}
	code, err = put(t, http.DefaultClient, other, "k", "6", "new")
	require.NoError(t, err)
	require.Equal(t, http.StatusNoContent, code)
	r := <-done
	require.NoError(t, r.err)
	assert.Equal(t, http.StatusConflict, r.code, "the late write arrives after token 6 and is stale")
	assert.Less(t, time.Since(start), 5*time.Second, "released by the newer token, not the bound")

	var order []string
	for _, e := range f.events(t) {
		if e.F == "received" && e.Key == "k" {
			order = append(order, e.Value)
		}
	}
	assert.Equal(t, []string{"older", "new", "old"}, order)
	st, _ := f.set.Stats("clients->n1")
	assert.EqualValues(t, 1, st.Delayed)
	assert.EqualValues(t, 1, st.Overtaken)
}

func TestDelayIsBoundedAndEndsWithTheMode(t *testing.T) {
	f := newFixture(t)
	require.NoError(t, f.set.SetDelay("clients->n1", 1, 300*time.Millisecond))
	start := time.Now()
	code, err := put(t, http.DefaultClient, f.url, "k", "1", "a")
	require.NoError(t, err)
	assert.Equal(t, http.StatusNoContent, code)
	assert.GreaterOrEqual(t, time.Since(start), 280*time.Millisecond, "held up to the bound")

	require.NoError(t, f.set.SetDelay("clients->n1", 1, time.Minute))
	done := make(chan struct{})
	go func() {
		put(t, http.DefaultClient, f.url, "k", "2", "b")
		close(done)
	}()
	time.Sleep(200 * time.Millisecond)
	f.set.Reset()
	select {
	case <-done:
	case <-time.After(3 * time.Second):
		t.Fatal("reset did not release the held write")
	}
}

func TestDelayedWriteStillLandsAfterTheClientGaveUp(t *testing.T) {
	f := newFixture(t)
	require.NoError(t, f.set.SetDelay("clients->n1", 1, 500*time.Millisecond))
	_, err := put(t, &http.Client{Timeout: 100 * time.Millisecond}, f.url, "k", "1", "late")
	require.Error(t, err, "client timed out (it records info)")
	require.Eventually(t, func() bool {
		f.res.mu.Lock()
		defer f.res.mu.Unlock()
		return f.res.hw["k"] == 1
	}, 3*time.Second, 20*time.Millisecond, "the write was in flight and landed later")
}

func TestLinkErrors(t *testing.T) {
	set := NewSet(nil, 1)
	defer set.Close()
	_, err := set.Link("a", "clients", "n1", "not a url")
	assert.Error(t, err)
	_, err = set.Link("a", "clients", "n1", "http://127.0.0.1:1")
	require.NoError(t, err)
	_, err = set.Link("a", "clients", "n1", "http://127.0.0.1:1")
	assert.Error(t, err, "duplicate name")
	assert.Error(t, set.SetStrip("nope", 1))
	assert.Error(t, set.SetBlackhole("nope", true))
	assert.Error(t, set.SetDelay("nope", 1, time.Second))
	// A node that is down: the client sees the proxy's 502, not a 2xx.
	u := set.Links()[0].URL
	code, err := put(t, http.DefaultClient, u, "k", "1", "v")
	require.NoError(t, err)
	assert.Equal(t, http.StatusBadGateway, code)
}

func TestConcurrentModeSwitchingIsSafe(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	defer cancel()
	var wg sync.WaitGroup
	client := &http.Client{Timeout: 200 * time.Millisecond}
	for c := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				put(t, client, f.url, "k"+strconv.Itoa(c), strconv.Itoa(i+1), fmt.Sprintf("c%d-%d", c, i))
			}
		}()
	}
	for i := 0; ctx.Err() == nil; i++ {
		f.set.SetBlackhole("clients->n1", i%3 == 0)
		f.set.SetStrip("clients->n1", float64(i%2))
		f.set.SetDelay("clients->n1", float64(i%2), 50*time.Millisecond)
		time.Sleep(20 * time.Millisecond)
	}
	f.set.Reset()
	wg.Wait()
	_ = f.events(t)
}

func isTimeout(err error) bool {
	type timeout interface{ Timeout() bool }
	var te timeout
	if e, ok := err.(timeout); ok {
		te = e
	}
	return te != nil && te.Timeout() || strings.Contains(err.Error(), "Timeout")
}

// The checker's pairing applies each recorded tampering to the write it hit,
// so the model judges what the resource really received.
func TestStripEventsReachTheCheckersPairing(t *testing.T) {
	f := newFixture(t)
	require.NoError(t, f.set.SetStrip("clients->n1", 1))
	for i := range 12 {
		tok, val := strconv.Itoa(i+1), fmt.Sprintf("c%d-%d", i, i)
		f.rec.Record(history.Event{Process: i, Type: history.Invoke, F: history.Write, Key: "k", Token: tok, Value: val})
		code, err := put(t, http.DefaultClient, f.url, "k", tok, val)
		require.NoError(t, err)
		typ := history.Fail
		if code/100 == 2 {
			typ = history.Ok
		}
		f.rec.Record(history.Event{Process: i, Type: typ, F: history.Write, Key: "k", Token: tok, Value: val})
	}
	var client []history.Event
	for _, e := range f.events(t) {
		if e.F != "received" {
			client = append(client, e)
		}
	}
	ops, err := history.Pair(client)
	require.NoError(t, err)
	require.Len(t, ops, 12)
	for _, op := range ops {
		require.NotEmpty(t, op.Tampered, "write %s was tampered with", op.Value)
		assert.NotEqual(t, history.TokenValid, op.Token.State, "the model sees the token the resource got, not %q", op.SentByClient)
		assert.NotEmpty(t, op.SentByClient)
	}
}

// A node that is down refuses the proxy's connection: the proxy says so, and
// the Fencing API client records a definite failure, as it would dialing the
// node itself, instead of an unknown outcome.
func TestARefusedNodeIsADefiniteFailureThroughTheProxy(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	down := "http://" + l.Addr().String()
	require.NoError(t, l.Close()) // nothing listens there now

	set := NewSet(nil, 1)
	t.Cleanup(func() { set.Close() })
	u, err := set.Link("clients->n1", "clients", "n1", down)
	require.NoError(t, err)
	c := fencing.NewClient(u, nil)
	ctx := context.Background()
	w := c.Write(ctx, "k", "5", []byte("v"))
	assert.Equal(t, fencing.Fail, w.Outcome, "%+v", w)
	assert.Equal(t, fencing.ErrWordRefused, w.Error)
	a := c.Acquire(ctx, "k", "c1", time.Second)
	assert.Equal(t, fencing.Fail, a.Outcome, "%+v", a)

	// A node cannot pass its own 502 off as the proxy's: the header is
	// removed from nodes' answers, and the outcome stays unknown.
	spoof := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(fencing.ProxyHeader, fencing.ProxyRefused)
		w.WriteHeader(http.StatusBadGateway)
	}))
	t.Cleanup(spoof.Close)
	u2, err := set.Link("clients->n2", "clients", "n2", spoof.URL)
	require.NoError(t, err)
	w = fencing.NewClient(u2, nil).Write(ctx, "k", "6", []byte("v"))
	assert.Equal(t, fencing.Info, w.Outcome, "%+v", w)
}

// The delay proxy orders tokens by the project's one grammar: what the
// resource would reject as malformed is no token here either.
func TestTokenNumberReadsTheOneGrammar(t *testing.T) {
	for tok, want := range map[string]uint64{"7": 7, "42.9f86d0": 42, "0": 0} {
		n, ok := tokenNumber(tok)
		assert.True(t, ok, tok)
		assert.Equal(t, want, n, tok)
	}
	for _, tok := range []string{"007", "-1", "+7", "7.", "", "7x", "18446744073709551616"} {
		_, ok := tokenNumber(tok)
		assert.False(t, ok, "%q is not a token", tok)
	}
}

// One way, seen from both sides: with the node's answers lost, a client's
// write times out at the client but lands at the node (its high-water
// moves); lifting the cut answers again, and a black-hole lift does not
// lift it.
func TestAnswersLostForwardsTheRequestAndSwallowsTheAnswer(t *testing.T) {
	f := newFixture(t)
	require.NoError(t, f.set.SetAnswersLost("clients->n1", true))
	require.NoError(t, f.set.SetBlackhole("clients->n1", false), "lifting another cut changes nothing")
	short := &http.Client{Timeout: 300 * time.Millisecond}
	_, err := put(t, short, f.url, "k", "1", "c1-1")
	require.Error(t, err)
	assert.True(t, isTimeout(err), "the client times out: %v", err)
	f.res.mu.Lock()
	assert.EqualValues(t, 1, f.res.hw["k"], "the write reached the node")
	f.res.mu.Unlock()
	st, _ := f.set.Stats("clients->n1")
	assert.EqualValues(t, 1, st.Dropped, "its answer was dropped")

	require.NoError(t, f.set.SetAnswersLost("clients->n1", false))
	code, err := put(t, short, f.url, "k", "2", "c1-2")
	require.NoError(t, err, "healed")
	assert.Equal(t, http.StatusNoContent, code)
}
