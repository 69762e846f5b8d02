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

// CountDeviations is n deviations in words: "1 deviation", "3 deviations".
func CountDeviations(n int) string {
	if n == 1 {
		return "1 deviation"
	}
	return fmt.Sprintf("%d deviations", n)
}
