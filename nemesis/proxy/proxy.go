// Package proxy puts an HTTP proxy on every link between clients and nodes
// (and between nodes, where a target routes through it) so that nemeses can
// tamper with traffic at run time without touching the system under test:
//
//   - black-hole: requests are not forwarded and answers are not returned; a
//     client waits until it gives up (and records info: its request may or
//     may not have arrived). When the black-hole is lifted, the requests it
//     held are dropped (the connection is reset), as packets lost in a
//     partition are.
//   - answers lost: one way, the node's side of the link is cut: requests
//     are forwarded and act, their answers are swallowed as by a
//     black-hole. The client cannot tell it from a black-hole; the node's
//     state can (every write landed).
//   - strip: on a seeded share of writes (PUT /v1/resources/{key}) the
//     Fencing-Token header is removed, emptied or garbled. Each tampering is
//     recorded in the history before the write is forwarded, so the checker
//     knows what the resource really received.
//   - delay: a share of writes is held in flight until a newer token has been
//     accepted for the same key through any link of the set (or a bound
//     elapses), then forwarded: a late write, the case fencing exists for.
//
// Modes are switched per link, concurrently with traffic. A request that has
// fully reached the proxy is forwarded even if the client stops waiting for
// it, because on a real network the server would still receive it: that is
// why a timed-out write is info, never fail.
package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fencecheck/fencecheck/fencing"
	"github.com/fencecheck/fencecheck/history"
)

// TokenHeader is the Fencing API's token header.
const TokenHeader = fencing.TokenHeader

// resourcePath is the prefix of resource requests; writes are PUTs under it.
const resourcePath = "/v1/resources/"

// forwardTimeout bounds one forwarded request; it is not the client's
// timeout, which the client enforces itself.
const forwardTimeout = 30 * time.Second

// Strip modes, as recorded in extra.mode of a strip event.
const (
	StripRemove = "remove"
	StripEmpty  = "empty"
	StripGarble = "garble"
)

// Info describes one link.
type Info struct {
	// Name is unique in the set, e.g. "clients->n1".
	Name string `json:"name"`
	// From is the group the traffic comes from: "clients", or a node name.
	From string `json:"from"`
	// To is the node the link leads to.
	To string `json:"to"`
	// URL is where the proxy listens; Target where it forwards to.
	URL    string `json:"url"`
	Target string `json:"target"`
}

// Stats counts what a link did to traffic, so tests and reports can tell
// that a fault took effect.
type Stats struct {
	Forwarded int64 `json:"forwarded"`
	// Dropped: requests or answers swallowed by a black-hole.
	Dropped  int64 `json:"dropped"`
	Stripped int64 `json:"stripped"`
	// Delayed: writes held back; Overtaken: of those, how many were released
	// because a newer token was accepted (rather than the bound elapsing).
	Delayed   int64 `json:"delayed"`
	Overtaken int64 `json:"overtaken"`
}

// Set is every proxy of a run. Its methods are safe for concurrent use.
type Set struct {
	rec *history.Recorder

	mu    sync.Mutex
	rng   *rand.Rand
	links map[string]*link
	// accepted is the highest token number accepted per key through any
	// link; changed is closed and replaced whenever accepted grows, waking
	// delayed writes.
	accepted map[string]uint64
	changed  chan struct{}
	closed   bool
}

type link struct {
	info      Info
	set       *Set
	srv       *http.Server
	transport *http.Transport

	// Guarded by set.mu.
	cut        cutMode
	healed     chan struct{} // closed when the current cut is lifted or changed
	stripShare float64
	delayShare float64
	delayBound time.Duration
	undelay    chan struct{} // closed when the current delay mode ends
	stats      Stats
}

// NewSet returns an empty set; seed drives which writes are stripped or
// delayed and how.
func NewSet(rec *history.Recorder, seed uint64) *Set {
	return &Set{
		rec:      rec,
		rng:      rand.New(rand.NewPCG(seed, 0x70726f7879)),
		links:    map[string]*link{},
		accepted: map[string]uint64{},
		changed:  make(chan struct{}),
	}
}

// Link starts a proxy on 127.0.0.1 (a free port) that forwards to targetURL
// and returns the URL clients should use instead. name must be unique.
func (s *Set) Link(name, fromGroup, toNode, targetURL string) (string, error) {
	target, err := url.Parse(targetURL)
	if err != nil || target.Host == "" {
		return "", fmt.Errorf("proxy link %s: bad target URL %q", name, targetURL)
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return "", errors.New("proxy set is closed")
	}
	if _, dup := s.links[name]; dup {
		s.mu.Unlock()
		return "", fmt.Errorf("proxy link %s already exists", name)
	}
	s.mu.Unlock()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("proxy link %s: %w", name, err)
	}
	l := &link{
		info: Info{Name: name, From: fromGroup, To: toNode, URL: "http://" + ln.Addr().String(), Target: targetURL},
		set:  s,
		transport: &http.Transport{
			Proxy:               nil,
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
			MaxIdleConnsPerHost: 64,
			IdleConnTimeout:     30 * time.Second,
		},
		healed:  make(chan struct{}),
		undelay: make(chan struct{}),
	}
	l.srv = &http.Server{Handler: http.HandlerFunc(l.serve), ReadHeaderTimeout: 10 * time.Second}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		ln.Close()
		return "", errors.New("proxy set is closed")
	}
	s.links[name] = l
	s.mu.Unlock()
	go l.srv.Serve(ln)
	return l.info.URL, nil
}

// Links lists the links, sorted by name (none for a nil set, so a nemesis
// handed a typed nil sees no links rather than a crash).
func (s *Set) Links() []Info {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Info, 0, len(s.links))
	for _, l := range s.links {
		out = append(out, l.info)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Stats returns a link's counters.
func (s *Set) Stats(name string) (Stats, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.links[name]
	if !ok {
		return Stats{}, fmt.Errorf("no proxy link %q", name)
	}
	return l.stats, nil
}

func (s *Set) get(name string) (*link, error) {
	l, ok := s.links[name]
	if !ok {
		return nil, fmt.Errorf("no proxy link %q", name)
	}
	return l, nil
}

// cutMode is what a link drops.
type cutMode int

const (
	cutNone    cutMode = iota
	cutBoth            // black-hole: requests and answers
	cutAnswers         // one way: answers only
)

// SetBlackhole cuts (on) or restores (off) a link in both directions.
// Lifting it drops every request the black-hole was holding.
func (s *Set) SetBlackhole(name string, on bool) error {
	return s.setCut(name, on, cutBoth)
}

// SetAnswersLost cuts (on) or restores (off) a link one way, from the node
// to the clients: requests are forwarded and act, answers are swallowed
// (held, then dropped when the cut lifts, as by a black-hole).
func (s *Set) SetAnswersLost(name string, on bool) error {
	return s.setCut(name, on, cutAnswers)
}

func (s *Set) setCut(name string, on bool, mode cutMode) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, err := s.get(name)
	if err != nil {
		return err
	}
	switch {
	case on:
		l.setCutLocked(mode)
	case l.cut == mode:
		l.setCutLocked(cutNone)
	}
	return nil
}

func (l *link) setCutLocked(c cutMode) {
	if c == l.cut {
		return
	}
	if l.cut != cutNone {
		close(l.healed)
		l.healed = make(chan struct{})
	}
	l.cut = c
}

// SetStrip makes the link tamper with the token of the given share (0..1) of
// writes; 0 turns stripping off.
func (s *Set) SetStrip(name string, share float64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, err := s.get(name)
	if err != nil {
		return err
	}
	l.stripShare = clamp01(share)
	return nil
}

// SetDelay makes the link hold the given share (0..1) of writes until a
// newer token is accepted for their key, or bound elapses; share 0 turns
// delaying off and releases every held write at once.
func (s *Set) SetDelay(name string, share float64, bound time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, err := s.get(name)
	if err != nil {
		return err
	}
	l.setDelayLocked(clamp01(share), bound)
	return nil
}

func (l *link) setDelayLocked(share float64, bound time.Duration) {
	l.delayShare = share
	l.delayBound = bound
	if share == 0 {
		close(l.undelay)
		l.undelay = make(chan struct{})
	}
}

// Reset turns every mode off on every link (the final heal).
func (s *Set) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range s.links {
		l.setCutLocked(cutNone)
		l.stripShare = 0
		l.setDelayLocked(0, 0)
	}
}

// Close heals and stops every proxy.
func (s *Set) Close() error {
	s.Reset()
	s.mu.Lock()
	s.closed = true
	links := make([]*link, 0, len(s.links))
	for _, l := range s.links {
		links = append(links, l)
	}
	s.mu.Unlock()
	for _, l := range links {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		if err := l.srv.Shutdown(ctx); err != nil {
			l.srv.Close()
		}
		cancel()
		l.transport.CloseIdleConnections()
	}
	return nil
}

func clamp01(f float64) float64 {
	if f < 0 {
		return 0
	}
	if f > 1 {
		return 1
	}
	return f
}

// serve handles one request on a link.
func (l *link) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 4<<20))
	if err != nil {
		// The request never fully arrived: as if the connection broke.
		panic(http.ErrAbortHandler)
	}
	l.dropIfBlackholed(r.Context(), false)

	header := r.Header.Clone()
	key, isWrite := writeKey(r)
	if isWrite {
		l.maybeStrip(key, body, header)
		l.maybeDelay(r.Context(), key, header)
		l.dropIfBlackholed(r.Context(), false)
	}

	// Detached from the client: a request that reached the proxy reaches the
	// node even if the client has given up waiting.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), forwardTimeout)
	defer cancel()
	out, err := http.NewRequestWithContext(ctx, r.Method, l.info.Target+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	removeHopHeaders(header)
	out.Header = header
	out.ContentLength = int64(len(body))
	resp, err := l.transport.RoundTrip(out)
	if err != nil {
		if refusedDial(err) {
			// Nothing was sent to the node: say so, so the client records
			// a definite failure as it would when dialing the node itself.
			l.dropIfBlackholed(r.Context(), true)
			w.Header().Set(fencing.ProxyHeader, fencing.ProxyRefused)
			http.Error(w, "connection to the node refused", http.StatusBadGateway)
			return
		}
		// The node did not answer (reset, timeout): the client sees a reset
		// connection, as it would without the proxy.
		panic(http.ErrAbortHandler)
	}
	defer resp.Body.Close()
	respBody, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	if isWrite && resp.StatusCode/100 == 2 {
		l.set.noteAccepted(key, out.Header.Get(TokenHeader))
	}
	// The answer travels back over the same link: a black-hole that began
	// meanwhile swallows it, and the client cannot tell whether its write
	// landed.
	l.dropIfBlackholed(r.Context(), true)

	l.set.mu.Lock()
	l.stats.Forwarded++
	l.set.mu.Unlock()
	rh := resp.Header.Clone()
	removeHopHeaders(rh)
	rh.Del(fencing.ProxyHeader) // only the proxy speaks for itself
	for k, v := range rh {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	w.Write(respBody)
}

// refusedDial reports whether err is a refused connection attempt: the node
// was not listening, so no byte of the request reached it.
func refusedDial(err error) bool {
	var opErr *net.OpError
	return errors.As(err, &opErr) && opErr.Op == "dial" && errors.Is(err, syscall.ECONNREFUSED)
}

// dropIfBlackholed holds the request (or, answer set, its answer) while the
// link drops it, and then drops it: it returns only when the link lets it
// through.
func (l *link) dropIfBlackholed(ctx context.Context, answer bool) {
	l.set.mu.Lock()
	if l.cut == cutNone || (l.cut == cutAnswers && !answer) {
		l.set.mu.Unlock()
		return
	}
	l.stats.Dropped++
	healed := l.healed
	l.set.mu.Unlock()
	select {
	case <-ctx.Done():
	case <-healed:
	}
	// Never answer: reset the connection. A request lost in a partition is
	// not delivered after the partition heals.
	panic(http.ErrAbortHandler)
}

// writeKey recognises a resource write and returns its key.
func writeKey(r *http.Request) (string, bool) {
	if r.Method != http.MethodPut || !strings.HasPrefix(r.URL.Path, resourcePath) {
		return "", false
	}
	key := strings.TrimPrefix(r.URL.Path, resourcePath)
	if key == "" {
		return "", false
	}
	return key, true
}

// maybeStrip tampers with the token header of a seeded share of writes and
// records the tampering before the write goes on.
func (l *link) maybeStrip(key string, body []byte, header http.Header) {
	s := l.set
	s.mu.Lock()
	if l.stripShare == 0 || s.rng.Float64() >= l.stripShare {
		s.mu.Unlock()
		return
	}
	orig := header.Get(TokenHeader)
	var mode, sent string
	switch s.rng.IntN(3) {
	case 0:
		mode = StripRemove
		header.Del(TokenHeader)
	case 1:
		mode = StripEmpty
		header.Set(TokenHeader, "")
	default:
		mode = StripGarble
		sent = garble(orig, s.rng)
		header.Set(TokenHeader, sent)
	}
	l.stats.Stripped++
	s.mu.Unlock()

	extra := map[string]json.RawMessage{}
	extra[history.ExtraMode], _ = json.Marshal(mode)
	extra["link"], _ = json.Marshal(l.info.Name)
	extra["sent_by_client"], _ = json.Marshal(orig)
	if s.rec != nil {
		s.rec.Record(history.Event{Process: history.NemesisProcess, Type: history.Info, F: history.Tamper,
			Key: key, Value: string(body), Token: sent, Node: l.info.To, Extra: extra})
	}
}

// garble turns a token into something that is not a token: its number with
// junk appended, junk alone, or a negative number. Never a valid token with a
// different number or seal: that would be a forgery, another nemesis's job.
func garble(orig string, rng *rand.Rand) string {
	num, _, _ := strings.Cut(orig, ".")
	if num == "" {
		num = "42"
	}
	switch rng.IntN(3) {
	case 0:
		return num + "x"
	case 1:
		return "abc"
	default:
		return "-" + num
	}
}

// maybeDelay holds a seeded share of writes until a token newer than theirs
// has been accepted for the key, the bound elapses, or delay mode ends.
func (l *link) maybeDelay(ctx context.Context, key string, header http.Header) {
	s := l.set
	s.mu.Lock()
	if l.delayShare == 0 || s.rng.Float64() >= l.delayShare {
		s.mu.Unlock()
		return
	}
	bound := l.delayBound
	undelay := l.undelay
	l.stats.Delayed++
	s.mu.Unlock()

	mine, ok := tokenNumber(header.Get(TokenHeader))
	timer := time.NewTimer(bound)
	defer timer.Stop()
	for {
		s.mu.Lock()
		newer := ok && s.accepted[key] > mine
		changed := s.changed
		s.mu.Unlock()
		if newer {
			s.mu.Lock()
			l.stats.Overtaken++
			s.mu.Unlock()
			return
		}
		select {
		case <-changed:
		case <-timer.C:
			return
		case <-undelay:
			return
		case <-ctx.Done():
			// The client gave up; the write is still in flight and goes on
			// when its time comes, like a packet stuck in a queue.
			ctx = context.Background()
		}
	}
}

// noteAccepted raises the key's accepted token and wakes delayed writes.
func (s *Set) noteAccepted(key, token string) {
	n, ok := tokenNumber(token)
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if n > s.accepted[key] {
		s.accepted[key] = n
		close(s.changed)
		s.changed = make(chan struct{})
	}
}

// tokenNumber is the number of a token read by the project's one grammar
// (history.ParseToken): "007" or "-1" is no token, as the resource says.
func tokenNumber(tok string) (uint64, bool) {
	t := history.ParseToken(tok)
	return t.N, t.State == history.TokenValid
}

// hopHeaders are connection-level headers a proxy must not pass on.
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

func removeHopHeaders(h http.Header) {
	for _, k := range hopHeaders {
		h.Del(k)
	}
}
