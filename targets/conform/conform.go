// Package conform is the conformance preflight: before any fault is
// injected, it speaks Fencing API v1 to every node of a running system and
// checks each answer against the contract (status codes, JSON error bodies,
// stale and equal tokens rejected with their high-water mark, missing and
// malformed tokens, Fencing-Token on reads, name rules). A fault run against
// a system that misreads the contract would only report noise: a 500 where a
// 409 belongs turns every rejection into an unknown outcome.
//
// The preflight works on its own lock and resource names (prefixed
// "fencecheck-conform-" and a random nonce, or in a run the run's namespace
// and "conform"), never on the names a fault run's clients use, so it can run
// against a system the run then tests.
package conform

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/fencing"
	"github.com/fencecheck/fencecheck/harness"
	"github.com/fencecheck/fencecheck/history"
)

// DefaultTimeout bounds each request of the preflight unless Options says.
const DefaultTimeout = 5 * time.Second

// Options tune Check.
type Options struct {
	// Semantics are what the system declares: equal-token writes must be
	// rejected (reject) or accepted (accept); authenticated systems must
	// reject unsealed and badly sealed tokens with 403.
	Semantics checkers.Semantics
	// Timeout bounds each request (0: DefaultTimeout).
	Timeout time.Duration
	// HTTPClient sends the requests (default: fencing.DefaultHTTPClient()).
	HTTPClient *http.Client
	// Record, when set, records every request that is an operation as a
	// client operation (record.go): the preflight as evidence.
	Record Recorder
	// Namespace, when set, scopes the lock and resource names the preflight
	// uses (a run's namespace); without it they carry a random id.
	Namespace string
	_         struct{}
}

// Deviation is one answer that breaks the contract, in words.
type Deviation struct {
	// Check is a stable name for what was checked, e.g. "write-equal-token".
	Check string `json:"check"`
	// Node is the node that answered.
	Node string `json:"node"`
	// Request is the request that was sent, e.g. "PUT /v1/resources/k".
	Request string `json:"request"`
	// Text says what was wrong and what the contract wants.
	Text string `json:"text"`
	// Unsafe marks a deviation that lets a stale, equal, missing, malformed
	// or forged token through (the write was accepted, or answered so its
	// outcome cannot be known: 5xx, no answer), or that keeps the
	// harness from driving the system (no health, no usable token, a
	// newer write refused): a run cannot go on past it. Every other
	// deviation (a status code, an error body) is reported and the run goes
	// on, unless the contract is asked for strictly.
	Unsafe bool `json:"unsafe,omitempty"`
	// Accepted marks an unsafe deviation that is a bad token's write the
	// system accepted: recorded (Options.Record), it is a violation the
	// checkers find in the history.
	Accepted bool `json:"accepted,omitempty"`
}

// tokenChecks are the checks of writes the contract rejects: accepting one
// lets a bad token through.
var tokenChecks = map[string]bool{"write-equal-token": true, "write-stale-token": true, "write-missing-token": true,
	"write-empty-token": true, "write-malformed-token": true, "write-forged-token": true, "write-stale-across-resources": true}

// driveChecks are the checks without which the harness cannot drive the
// system or classify its answers.
var driveChecks = map[string]bool{"health": true, "acquire": true, "acquire-body": true, "write": true, "write-newer": true}

// Unsafe lists the deviations a run cannot go on past (Deviation.Unsafe).
func (r *Report) Unsafe() []Deviation {
	var out []Deviation
	for _, d := range r.Deviations {
		if d.Unsafe {
			out = append(out, d)
		}
	}
	return out
}

// Safe lists the other deviations.
func (r *Report) Safe() []Deviation {
	var out []Deviation
	for _, d := range r.Deviations {
		if !d.Unsafe {
			out = append(out, d)
		}
	}
	return out
}

func (d Deviation) String() string {
	return fmt.Sprintf("[%s] %s: %s: %s", d.Check, d.Node, d.Request, d.Text)
}

// Report is the preflight's outcome.
type Report struct {
	// Checks counts every expectation tested; Passed those that held.
	Checks     int         `json:"checks"`
	Passed     int         `json:"passed"`
	Deviations []Deviation `json:"deviations"`
	// Skipped lists checks that could not be made, with why (e.g. the
	// resource checks need a token the issuer would not hand out).
	Skipped []string `json:"skipped,omitempty"`
}

// Conformant reports whether no deviation was found.
func (r *Report) Conformant() bool { return len(r.Deviations) == 0 }

// Has reports whether a deviation of the named check was found.
func (r *Report) Has(check string) bool {
	for _, d := range r.Deviations {
		if d.Check == check {
			return true
		}
	}
	return false
}

// Print writes the report in words: one line per deviation.
func (r *Report) Print(w io.Writer) {
	for _, d := range r.Deviations {
		fmt.Fprintf(w, "  - %s\n", d)
	}
	for _, s := range r.Skipped {
		fmt.Fprintf(w, "  (skipped) %s\n", s)
	}
	if r.Conformant() {
		fmt.Fprintf(w, "conformant: %d of %d checks passed\n", r.Passed, r.Checks)
	} else {
		fmt.Fprintf(w, "not conformant: %s; %d of %d checks passed\n", CountDeviations(len(r.Deviations)), r.Passed, r.Checks)
	}
}

// Err is nil for a conformant system, and otherwise an error that lists
// every deviation (a target that starts with a preflight fails with it).
func (r *Report) Err() error {
	if r.Conformant() {
		return nil
	}
	return &NonconformantError{Report: r}
}

// NonconformantError is a preflight that found deviations.
type NonconformantError struct{ Report *Report }

func (e *NonconformantError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "the system breaks Fencing API v1 (%s; fencecheck conform lists them):", CountDeviations(len(e.Report.Deviations)))
	for _, d := range e.Report.Deviations {
		b.WriteString("\n  - " + d.String())
	}
	return b.String()
}

// Check runs the preflight against every issuer and resource endpoint. It
// returns an error only when ctx ends; everything the system does wrong is a
// deviation in the report.
func Check(ctx context.Context, eps harness.Endpoints, opts Options) (*Report, error) {
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.HTTPClient == nil {
		opts.HTTPClient = fencing.DefaultHTTPClient()
	}
	if opts.Semantics.Equal == "" {
		opts.Semantics.Equal = checkers.EqualReject
	}
	prefix := "fencecheck-conform-" + nonce()
	if opts.Namespace != "" {
		prefix = opts.Namespace + ".conform"
	}
	c := &checker{ctx: ctx, opts: opts, rep: &Report{}, prefix: prefix, noTokens: map[string]bool{},
		nodes: map[string]string{}}
	for _, e := range append(append([]harness.Endpoint{}, eps.Issuers...), eps.Resources...) {
		c.nodes[e.URL] = e.Node
	}
	seen := map[string]bool{}
	for _, e := range append(append([]harness.Endpoint{}, eps.Issuers...), eps.Resources...) {
		if !seen[e.URL] {
			seen[e.URL] = true
			c.health(e)
		}
	}
	for _, e := range eps.Issuers {
		c.issuer(e)
	}
	if len(eps.Issuers) > 1 {
		c.acrossIssuers(eps.Issuers)
	}
	var issuer *harness.Endpoint
	if len(eps.Issuers) > 0 {
		issuer = &eps.Issuers[0]
	}
	for _, e := range eps.Resources {
		c.resource(e, issuer)
	}
	if len(eps.Resources) > 1 {
		c.acrossResources(eps.Resources, issuer)
	}
	if err := ctx.Err(); err != nil {
		return c.rep, err
	}
	return c.rep, nil
}

func nonce() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

type checker struct {
	ctx    context.Context
	opts   Options
	rep    *Report
	prefix string
	seq    int
	// noTokens marks issuers whose acquire already failed: asking them
	// again would only repeat that deviation.
	noTokens map[string]bool
	// nodes names each endpoint URL's node (for recorded operations).
	nodes map[string]string
}

// name is a fresh lock or resource name.
func (c *checker) name(what string) string {
	c.seq++
	return fmt.Sprintf("%s-%s%d", c.prefix, what, c.seq)
}

// answer is one HTTP exchange.
type answer struct {
	req    string
	status int
	header http.Header
	body   []byte
	err    error
}

// brief describes what came back, for deviation texts.
func (a answer) brief() string {
	if a.err != nil {
		return "no answer (" + a.err.Error() + ")"
	}
	s := fmt.Sprintf("%d", a.status)
	if b := strings.Join(strings.Fields(string(a.body)), " "); b != "" {
		if len(b) > 160 {
			b = b[:160] + "..."
		}
		s += " " + b
	}
	return s
}

func (c *checker) send(base, method, path string, header map[string]string, body []byte) answer {
	a := answer{req: method + " " + path}
	ctx, cancel := context.WithTimeout(c.ctx, c.opts.Timeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(base, "/")+path, rd)
	if err != nil {
		a.err = err
		return a
	}
	for k, v := range header {
		// Set by map so an empty value is still sent: an empty
		// Fencing-Token must meet 428 as an absent one does.
		req.Header[http.CanonicalHeaderKey(k)] = []string{v}
	}
	if done := c.observe(base, method, path, header, body); done != nil {
		defer func() { done(a) }()
	}
	resp, err := c.opts.HTTPClient.Do(req)
	if err != nil {
		a.err = err
		return a
	}
	defer resp.Body.Close()
	a.status, a.header = resp.StatusCode, resp.Header
	a.body, a.err = io.ReadAll(io.LimitReader(resp.Body, fencing.MaxBodyBytes+1))
	return a
}

func (c *checker) pass() { c.rep.Checks++; c.rep.Passed++ }

func (c *checker) deviate(check string, e harness.Endpoint, a answer, format string, args ...any) {
	c.rep.Checks++
	// A bad token's write must end in a definite rejection: accepted, or
	// answered so the outcome is unknown (5xx, no answer), it is unsafe;
	// another 4xx than the contract's is a detail.
	rejected := a.err == nil && a.status >= 400 && a.status < 500
	accepted := a.err == nil && a.status/100 == 2
	unsafe := tokenChecks[check] && !rejected || driveChecks[check]
	c.rep.Deviations = append(c.rep.Deviations, Deviation{Check: check, Node: e.Node, Request: a.req, Text: fmt.Sprintf(format, args...),
		Unsafe: unsafe, Accepted: tokenChecks[check] && accepted})
}

func (c *checker) skip(format string, args ...any) {
	c.rep.Skipped = append(c.rep.Skipped, fmt.Sprintf(format, args...))
}

// status checks that the answer is one of want; it reports a deviation
// otherwise. what is the request in words, want in words.
func (c *checker) status(check string, e harness.Endpoint, a answer, what, wantWords string, want ...int) bool {
	for _, w := range want {
		if a.err == nil && a.status == w {
			c.pass()
			return true
		}
	}
	c.deviate(check, e, a, "%s answered %s; Fencing API v1 wants %s", what, a.brief(), wantWords)
	return false
}

// errorBody checks that an error answer is a JSON object with an "error"
// word (and the given word, when not ""). It returns the decoded body.
func (c *checker) errorBody(check string, e harness.Endpoint, a answer, word string) (fencing.ErrorBody, bool) {
	var eb fencing.ErrorBody
	if err := json.Unmarshal(a.body, &eb); err != nil || eb.Error == "" {
		c.deviate(check+"-json", e, a, "the error body %q is not a JSON object with an \"error\" field; every error of Fencing API v1 is JSON such as {\"error\":\"stale\",\"message\":\"...\"}", clip(a.body))
		return eb, false
	}
	if word != "" && eb.Error != word {
		c.deviate(check+"-word", e, a, "the error word is %q; Fencing API v1 wants %q here", eb.Error, word)
		return eb, false
	}
	c.pass()
	return eb, true
}

func clip(b []byte) string {
	s := strings.Join(strings.Fields(string(b)), " ")
	if len(s) > 120 {
		s = s[:120] + "..."
	}
	return s
}

func (c *checker) health(e harness.Endpoint) {
	a := c.send(e.URL, http.MethodGet, "/v1/health", nil, nil)
	c.status("health", e, a, "the health check of a ready node", "200", http.StatusOK)
}

func lockBody(owner, token string, ttlMs int64) []byte {
	m := map[string]any{"owner": owner}
	if token != "" {
		m["token"] = token
	}
	if ttlMs > 0 {
		m["ttl_ms"] = ttlMs
	}
	b, _ := json.Marshal(m)
	return b
}

var jsonHeader = map[string]string{"Content-Type": "application/json"}

func lockPath(lock, op string) string { return "/v1/locks/" + lock + "/" + op }

// acquire asks for lock and returns the token, "" when none came (the
// deviation is recorded under check).
func (c *checker) acquire(check string, e harness.Endpoint, lock, owner string) (string, answer) {
	a := c.send(e.URL, http.MethodPost, lockPath(lock, "acquire"), jsonHeader, lockBody(owner, "", 5000))
	if !c.status(check, e, a, "acquiring a free lock", "200 {\"token\":\"N\",\"ttl_ms\":5000}", http.StatusOK) {
		return "", a
	}
	var lr struct {
		Token *string `json:"token"`
		TTLMs *int64  `json:"ttl_ms"`
	}
	if err := json.Unmarshal(a.body, &lr); err != nil || lr.Token == nil {
		c.deviate(check+"-body", e, a, "the acquire answer %q is not JSON with a \"token\" string; Fencing API v1 wants {\"token\":\"42\",\"ttl_ms\":5000}", clip(a.body))
		return "", a
	}
	if _, _, err := history.SplitToken(*lr.Token); err != nil {
		c.deviate(check+"-token", e, a, "the token %q is not a decimal uint64 (optionally followed by .SEAL)", *lr.Token)
		return "", a
	}
	c.pass()
	return *lr.Token, a
}

// release gives lock up; failures here are recorded but do not stop the
// checks that follow.
func (c *checker) release(e harness.Endpoint, lock, owner, token string) {
	a := c.send(e.URL, http.MethodPost, lockPath(lock, "release"), jsonHeader, lockBody(owner, token, 0))
	c.status("release", e, a, "releasing a held lock with its token", "200", http.StatusOK)
}

func number(tok string) uint64 {
	n, _, _ := history.SplitToken(tok)
	return n
}

// issuer checks the lock endpoints of one node.
func (c *checker) issuer(e harness.Endpoint) {
	lock := c.name("lock")
	tokA, _ := c.acquire("acquire", e, lock, "conform-a")
	if tokA == "" {
		c.noTokens[e.URL] = true
		c.skip("%s: lock checks need a token, and acquire handed out none", e.Node)
		return
	}
	a := c.send(e.URL, http.MethodPost, lockPath(lock, "acquire"), jsonHeader, lockBody("conform-b", "", 5000))
	if c.status("acquire-held", e, a, "acquiring a lock another owner holds", "409 {\"error\":\"held\"}", http.StatusConflict) {
		c.errorBody("acquire-held", e, a, fencing.ErrWordHeld)
	}
	a = c.send(e.URL, http.MethodPost, lockPath(lock, "renew"), jsonHeader, lockBody("conform-a", tokA, 5000))
	if c.status("renew", e, a, "renewing a held lock with its token", "200 {\"token\":...}", http.StatusOK) {
		var lr fencing.LockResponse
		if err := json.Unmarshal(a.body, &lr); err != nil || number(lr.Token) != number(tokA) {
			c.deviate("renew-body", e, a, "the renew answer %q does not carry the lease's token %s", clip(a.body), tokA)
		} else {
			c.pass()
		}
	}
	a = c.send(e.URL, http.MethodPost, lockPath(lock, "renew"), jsonHeader, lockBody("conform-b", tokA, 5000))
	if c.status("renew-lost", e, a, "renewing by an owner that does not hold the lock", "409 {\"error\":\"lost\"}", http.StatusConflict) {
		c.errorBody("renew-lost", e, a, fencing.ErrWordLost)
	}
	a = c.send(e.URL, http.MethodPost, lockPath(lock, "renew"), jsonHeader, lockBody("conform-a", "", 5000))
	if c.status("renew-missing-token", e, a, "renewing without a token", "428 with a JSON error", http.StatusPreconditionRequired) {
		c.errorBody("renew-missing-token", e, a, "")
	}
	a = c.send(e.URL, http.MethodPost, lockPath(lock, "renew"), jsonHeader, lockBody("conform-a", "x"+tokA, 5000))
	if c.status("renew-malformed-token", e, a, "renewing with a malformed token", "400 with a JSON error", http.StatusBadRequest) {
		c.errorBody("renew-malformed-token", e, a, "")
	}
	a = c.send(e.URL, http.MethodPost, lockPath(lock, "release"), jsonHeader, lockBody("conform-b", tokA, 0))
	if c.status("release-lost", e, a, "releasing by an owner that does not hold the lock", "409 {\"error\":\"lost\"}", http.StatusConflict) {
		c.errorBody("release-lost", e, a, fencing.ErrWordLost)
	}
	c.release(e, lock, "conform-a", tokA)
	tokB, ab := c.acquire("acquire-after-release", e, lock, "conform-b")
	if tokB != "" {
		if number(tokB) <= number(tokA) {
			c.deviate("token-order", e, ab, "after token %s the next acquire of the same lock handed out %s; tokens must only ever grow", tokA, tokB)
		} else {
			c.pass()
		}
		c.release(e, lock, "conform-b", tokB)
	}

	// Malformed requests: each a definite 400 with a JSON error body.
	bad := []struct {
		check, what string
		path        string
		body        []byte
	}{
		{"acquire-malformed-json", "an acquire whose body is not JSON", lockPath(c.name("lock"), "acquire"), []byte("{not json")},
		{"acquire-missing-owner", "an acquire without an owner", lockPath(c.name("lock"), "acquire"), []byte(`{"ttl_ms":5000}`)},
		{"acquire-missing-ttl", "an acquire without ttl_ms", lockPath(c.name("lock"), "acquire"), []byte(`{"owner":"conform-a"}`)},
		{"lock-bad-name", "an acquire of a lock named \"bad name!\"", lockPath("bad%20name%21", "acquire"), lockBody("conform-a", "", 5000)},
		{"lock-long-name", "an acquire of a lock with a 129-character name", lockPath(strings.Repeat("x", fencing.MaxNameLen+1), "acquire"), lockBody("conform-a", "", 5000)},
	}
	for _, b := range bad {
		a := c.send(e.URL, http.MethodPost, b.path, jsonHeader, b.body)
		if c.status(b.check, e, a, b.what, "400 with a JSON error", http.StatusBadRequest) {
			c.errorBody(b.check, e, a, "")
		}
	}
	a = c.send(e.URL, http.MethodGet, "/v1/no-such-endpoint", nil, nil)
	if c.status("unknown-route", e, a, "a path outside the API", "404 with a JSON error", http.StatusNotFound) {
		c.errorBody("unknown-route", e, a, "")
	}
}

// acrossIssuers checks that issuer nodes of one system hand out growing
// tokens for one lock whichever node is asked: clients spread their lock
// requests over every issuer.
func (c *checker) acrossIssuers(issuers []harness.Endpoint) {
	lock := c.name("lock")
	var prev string
	var prevNode string
	for _, e := range issuers {
		tok, a := c.acquire("acquire", e, lock, "conform-x")
		if tok == "" {
			return
		}
		if prev != "" {
			if number(tok) <= number(prev) {
				c.deviate("token-order-across-issuers", e, a, "after %s handed out token %s, %s handed out %s for the same lock; clients use every issuer, so tokens must grow across them", prevNode, prev, e.Node, tok)
			} else {
				c.pass()
			}
		}
		c.release(e, lock, "conform-x", tok)
		prev, prevNode = tok, e.Node
	}
}

// tokens gets n growing tokens for lock from the issuer (acquire, release),
// or made-up numbers when there is no usable issuer and the system does not
// authenticate tokens (a fresh key's high-water mark is 0, so any growing
// numbers do).
func (c *checker) tokens(issuer *harness.Endpoint, lock string, n int) []string {
	var out []string
	if issuer != nil && !c.noTokens[issuer.URL] {
		for i := 0; i < n; i++ {
			tok, _ := c.acquire("acquire", *issuer, lock, "conform-w")
			if tok == "" {
				c.noTokens[issuer.URL] = true
				out = nil
				break
			}
			c.release(*issuer, lock, "conform-w", tok)
			out = append(out, tok)
		}
	}
	if len(out) == n {
		return out
	}
	if c.opts.Semantics.Authenticated {
		return nil
	}
	out = out[:0]
	for i := 0; i < n; i++ {
		out = append(out, history.FormatToken(uint64(1000+i)))
	}
	return out
}

func resPath(key string) string { return "/v1/resources/" + key }

func tokenHeader(tok string) map[string]string {
	return map[string]string{fencing.TokenHeader: tok, "Content-Type": "application/octet-stream"}
}

// expectValue reads key and checks value and token-of-value.
func (c *checker) expectValue(check string, e harness.Endpoint, key, value, token, after string) {
	a := c.send(e.URL, http.MethodGet, resPath(key), nil, nil)
	if !c.status(check, e, a, "reading a written resource "+after, "200 with the value and its Fencing-Token", http.StatusOK) {
		return
	}
	got := a.header.Get(fencing.TokenHeader)
	switch {
	case string(a.body) != value:
		c.deviate(check+"-value", e, a, "the read returned %q %s; the last write the resource accepted stored %q", clip(a.body), after, value)
	case got == "":
		c.deviate(check+"-token-header", e, a, "the read carries no Fencing-Token header; it must name the token of the write that stored the value (%s)", token)
	case token != "" && number(got) != number(token):
		c.deviate(check+"-token-header", e, a, "the read's Fencing-Token is %q; the value was stored with token %s", got, token)
	default:
		c.pass()
	}
}

// register is what a resource key holds, as far as the checker knows:
// the value and token of the last write it accepted (token "" when that
// write carried none or a malformed one), and the highest token accepted.
type register struct {
	value, token string
	mark         uint64
}

func (r *register) set(value, token string) {
	r.value, r.token = value, token
	if n, _, err := history.SplitToken(token); err == nil && n > r.mark {
		r.mark = n
	}
}

// wronglyAccepted follows a write that should have been rejected but was
// answered 2xx (the deviation is already recorded).
func (r *register) wronglyAccepted(a answer, value, token string) {
	if a.err == nil && a.status/100 == 2 {
		if _, _, err := history.SplitToken(token); err != nil {
			token = ""
		}
		r.set(value, token)
	}
}

// write sends a PUT with the given headers.
func (c *checker) write(e harness.Endpoint, key string, header map[string]string, value string) answer {
	return c.send(e.URL, http.MethodPut, resPath(key), header, []byte(value))
}

// stale checks a 409 stale answer and its high_water.
func (c *checker) stale(check string, e harness.Endpoint, a answer, what string, highWater string) {
	if !c.status(check, e, a, what, fmt.Sprintf("409 {\"error\":\"stale\",\"high_water\":\"%d\"}", number(highWater)), http.StatusConflict) {
		return
	}
	eb, ok := c.errorBody(check, e, a, fencing.ErrWordStale)
	if !ok {
		return
	}
	if eb.HighWater == "" {
		c.deviate(check+"-high-water", e, a, "the stale rejection carries no \"high_water\"; Fencing API v1 wants the mark (%d) so a client knows how far behind it is", number(highWater))
	} else if n, _, err := history.SplitToken(eb.HighWater); err != nil || n != number(highWater) {
		c.deviate(check+"-high-water", e, a, "the stale rejection says high_water %q; the mark is %d", eb.HighWater, number(highWater))
	} else {
		c.pass()
	}
}

// resource checks the resource endpoints of one node.
func (c *checker) resource(e harness.Endpoint, issuer *harness.Endpoint) {
	key := c.name("key")
	toks := c.tokens(issuer, key, 3)
	if toks == nil {
		c.skip("%s: resource checks need tokens; the issuer handed out none and the system authenticates tokens", e.Node)
		return
	}
	t1, t2, t3 := toks[0], toks[1], toks[2]
	if number(t1) >= number(t2) || number(t2) >= number(t3) {
		c.skip("%s: resource checks need growing tokens; the issuer handed out %s, %s, %s", e.Node, t1, t2, t3)
		return
	}

	a := c.send(e.URL, http.MethodGet, resPath(key), nil, nil)
	if c.status("read-never-written", e, a, "reading a resource never written", "404 with a JSON error", http.StatusNotFound) {
		c.errorBody("read-never-written", e, a, "")
	}

	v1 := "conform-v1-" + key
	a = c.write(e, key, tokenHeader(t1), v1)
	if !c.status("write", e, a, "a write with a token newer than the high-water mark", "204", http.StatusNoContent, http.StatusOK) {
		c.skip("%s: the remaining resource checks need an accepted write", e.Node)
		return
	}
	c.expectValue("read", e, key, v1, t1, "after the first write")

	// reg follows what the system really stored, so that one wrongly
	// accepted write is one deviation, not a cascade of failed reads.
	reg := &register{value: v1, token: t1, mark: number(t1)}
	replay := "conform-replay-" + key
	a = c.write(e, key, tokenHeader(t1), replay)
	if c.opts.Semantics.Equal == checkers.EqualAccept {
		if c.status("write-equal-token", e, a, "a write with the token equal to the high-water mark (semantics equal: accept)", "204", http.StatusNoContent, http.StatusOK) {
			reg.value = replay
		}
	} else {
		c.stale("write-equal-token", e, a, fmt.Sprintf("a write with token %s, equal to the high-water mark (a replay; semantics equal: reject)", t1), t1)
		reg.wronglyAccepted(a, replay, t1)
		c.expectValue("read-after-equal", e, key, reg.value, reg.token, "after the replay")
	}

	v2 := "conform-v2-" + key
	a = c.write(e, key, tokenHeader(t2), v2)
	if c.status("write-newer", e, a, "a write with a newer token", "204", http.StatusNoContent, http.StatusOK) {
		reg.set(v2, t2)
	}
	stale := "conform-stale-" + key
	a = c.write(e, key, tokenHeader(t1), stale)
	c.stale("write-stale-token", e, a, fmt.Sprintf("a write with token %s, older than the high-water mark %d", t1, reg.mark), history.FormatToken(reg.mark))
	reg.wronglyAccepted(a, stale, t1)
	c.expectValue("read-after-stale", e, key, reg.value, reg.token, "after the stale write")

	// A missing or empty token is never read as zero.
	missing := "conform-missing-" + key
	a = c.write(e, key, map[string]string{"Content-Type": "application/octet-stream"}, missing)
	if c.status("write-missing-token", e, a, "a write without a Fencing-Token header", "428 with a JSON error", http.StatusPreconditionRequired) {
		c.errorBody("write-missing-token", e, a, "")
	}
	reg.wronglyAccepted(a, missing, "")
	empty := "conform-empty-" + key
	a = c.write(e, key, tokenHeader(""), empty)
	if c.status("write-empty-token", e, a, "a write with an empty Fencing-Token header", "428 with a JSON error", http.StatusPreconditionRequired) {
		c.errorBody("write-empty-token", e, a, "")
	}
	reg.wronglyAccepted(a, empty, "")
	c.expectValue("read-after-missing", e, key, reg.value, reg.token, "after the writes without a token")

	for i, bad := range []string{"abc", "-3", "12abc", "0x1f", "007", "99999999999999999999999"} {
		v := fmt.Sprintf("conform-malformed%d-%s", i, key)
		a = c.write(e, key, tokenHeader(bad), v)
		if c.status("write-malformed-token", e, a, fmt.Sprintf("a write with the malformed token %q", bad), "400 with a JSON error", http.StatusBadRequest) {
			c.errorBody("write-malformed-token", e, a, "")
		}
		reg.wronglyAccepted(a, v, "")
	}
	c.expectValue("read-after-malformed", e, key, reg.value, reg.token, "after the writes with malformed tokens")

	if c.opts.Semantics.Authenticated {
		// Made-up numbers far above the issuer's, each above the last, so
		// that a resource that does not verify seals accepts both.
		bare := history.FormatToken(number(t3) + 1000)
		a = c.write(e, key, tokenHeader(bare), "conform-forged1-"+key)
		if c.status("write-forged-token", e, a, fmt.Sprintf("a write with the unsealed made-up token %s (semantics authenticated: true)", bare), "403 with a JSON error", http.StatusForbidden) {
			c.errorBody("write-forged-token", e, a, "")
		}
		reg.wronglyAccepted(a, "conform-forged1-"+key, bare)
		badSeal := history.FormatToken(number(t3)+2000) + ".00badseal00"
		a = c.write(e, key, tokenHeader(badSeal), "conform-forged2-"+key)
		if c.status("write-forged-token", e, a, fmt.Sprintf("a write with the badly sealed token %s", badSeal), "403 with a JSON error", http.StatusForbidden) {
			c.errorBody("write-forged-token", e, a, "")
		}
		reg.wronglyAccepted(a, "conform-forged2-"+key, badSeal)
		c.expectValue("read-after-forged", e, key, reg.value, reg.token, "after the writes with forged tokens")
	}

	// The rejections above must not have raised the mark: a newer token
	// still writes.
	if reg.mark >= number(t3) {
		c.skip("%s: a write that should have been rejected raised the high-water mark to %d; the check that rejections leave the mark alone needs it below %s", e.Node, reg.mark, t3)
	} else {
		v3 := "conform-v3-" + key
		a = c.write(e, key, tokenHeader(t3), v3)
		if c.status("write-after-rejections", e, a, "a write with a newer token after rejected ones", "204", http.StatusNoContent, http.StatusOK) {
			c.expectValue("read-latest", e, key, v3, t3, "after the last write")
		}
	}

	big := bytes.Repeat([]byte("x"), fencing.MaxBodyBytes+1)
	a = c.send(e.URL, http.MethodPut, resPath(key), tokenHeader(history.FormatToken(number(t3)+1)), big)
	if c.status("write-too-large", e, a, "a write with a body over 1 MiB", "413 with a JSON error", http.StatusRequestEntityTooLarge) {
		c.errorBody("write-too-large", e, a, "")
	}

	for _, n := range []struct{ check, what, path string }{
		{"resource-bad-name", "a read of a resource named \"bad name!\"", resPath("bad%20name%21")},
		{"resource-long-name", "a read of a resource with a 129-character name", resPath(strings.Repeat("y", fencing.MaxNameLen+1))},
	} {
		a = c.send(e.URL, http.MethodGet, n.path, nil, nil)
		if c.status(n.check, e, a, n.what, "400 with a JSON error", http.StatusBadRequest) {
			c.errorBody(n.check, e, a, "")
		}
	}
}

// acrossResources checks that resource nodes of one system share their
// state: clients spread writes and reads over every resource node, so a
// write accepted by one must fence writes sent to another.
func (c *checker) acrossResources(resources []harness.Endpoint, issuer *harness.Endpoint) {
	key := c.name("key")
	toks := c.tokens(issuer, key, 2)
	if toks == nil {
		return
	}
	first := resources[0]
	v := "conform-shared-" + key
	a := c.write(first, key, tokenHeader(toks[1]), v)
	if !c.status("write", first, a, "a write with a token newer than the high-water mark", "204", http.StatusNoContent, http.StatusOK) {
		return
	}
	for _, e := range resources[1:] {
		c.expectValue("read-across-resources", e, key, v, toks[1], "written through "+first.Node)
		a = c.write(e, key, tokenHeader(toks[0]), "conform-shared-stale-"+key)
		c.stale("write-stale-across-resources", e, a, fmt.Sprintf("a write with token %s, older than the mark %s set through %s", toks[0], toks[1], first.Node), toks[1])
	}
}

// CountDeviations is n deviations in words: "1 deviation", "3 deviations".
func CountDeviations(n int) string {
	if n == 1 {
		return "1 deviation"
	}
	return fmt.Sprintf("%d deviations", n)
}
