package fencing

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"time"
)

// Outcome is the class a client gives an operation's result, in Jepsen's
// terms. It decides what the checker may assume, so the split must be sound:
// Fail only when the operation certainly did not take effect.
type Outcome uint8

const (
	// Ok: the server answered 2xx (or, for a read, 404 never written).
	Ok Outcome = iota
	// Fail: a definite rejection; the operation did not take effect.
	Fail
	// Info: unknown outcome (timeout, reset, 5xx, anything unexpected). The
	// request may have reached the store, now or later.
	Info
)

// String is the history's word for the outcome: ok, fail or info.
func (o Outcome) String() string {
	switch o {
	case Ok:
		return "ok"
	case Fail:
		return "fail"
	}
	return "info"
}

// Client-side error words, used when the server's answer carries none.
const (
	// ErrWordTimeout: no answer before the context's deadline.
	ErrWordTimeout = "timeout"
	// ErrWordConnection: the connection broke after the request may have
	// been sent (reset, EOF).
	ErrWordConnection = "connection"
	// ErrWordRefused: nothing listened at the address (the request was never
	// sent).
	ErrWordRefused = "refused"
	// ErrWordCanceled: the caller's context was canceled.
	ErrWordCanceled = "canceled"
	// ErrWordBadResponse: a 2xx whose body or headers do not follow the API.
	ErrWordBadResponse = "bad-response"
	// ErrWordUnexpected: a status the API does not define for the operation.
	ErrWordUnexpected = "unexpected-status"
)

// Result is what one Fencing API call returned.
type Result struct {
	Outcome Outcome
	// Status is the HTTP status, 0 when no answer arrived.
	Status int
	// Error is the server's error word ("held", "stale", ...) or a
	// client-side one ("timeout", "refused", ...); "" on success.
	Error   string
	Message string
	// Token is the token an acquire or renew handed out, or the token of
	// the value a read returned.
	Token string
	// TTL is the lease granted by acquire or renew.
	TTL time.Duration
	// HighWater is the mark a stale rejection reported.
	HighWater string
	// Value is what a read returned; Found is false when the key was never
	// written.
	Value []byte
	Found bool
	// Err is the underlying transport or decoding error, if any.
	Err error
}

// Client speaks Fencing API v1 to one node.
type Client struct {
	base string
	hc   *http.Client
}

// DefaultHTTPClient keeps connections alive (a fresh TCP connection per
// operation would measure the kernel, not the target) and never follows
// redirects, which the API does not use. It sets no timeout: each call's
// context carries its own.
func DefaultHTTPClient() *http.Client {
	return &http.Client{
		Transport: &http.Transport{
			Proxy:               nil,
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:        256,
			MaxIdleConnsPerHost: 64,
			IdleConnTimeout:     90 * time.Second,
			DisableCompression:  true,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// NewClient returns a client for the node at baseURL (e.g.
// http://127.0.0.1:7001). A nil httpClient gets DefaultHTTPClient().
func NewClient(baseURL string, httpClient *http.Client) *Client {
	if httpClient == nil {
		httpClient = DefaultHTTPClient()
	}
	return &Client{base: strings.TrimRight(baseURL, "/"), hc: httpClient}
}

// BaseURL is the node's base URL.
func (c *Client) BaseURL() string { return c.base }

// Acquire asks for lock on behalf of owner with a lease of ttl
// (milliseconds on the wire; ttl is rounded down to whole milliseconds).
func (c *Client) Acquire(ctx context.Context, lock, owner string, ttl time.Duration) Result {
	return c.lockOp(ctx, lock, "acquire", LockRequest{Owner: owner, TTLMs: ttl.Milliseconds()})
}

// Renew extends owner's lease taken with token.
func (c *Client) Renew(ctx context.Context, lock, owner, token string, ttl time.Duration) Result {
	return c.lockOp(ctx, lock, "renew", LockRequest{Owner: owner, Token: token, TTLMs: ttl.Milliseconds()})
}

// Release gives up owner's lease taken with token.
func (c *Client) Release(ctx context.Context, lock, owner, token string) Result {
	return c.lockOp(ctx, lock, "release", LockRequest{Owner: owner, Token: token})
}

func (c *Client) lockOp(ctx context.Context, lock, op string, body LockRequest) Result {
	b, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/v1/locks/"+url.PathEscape(lock)+"/"+op, bytes.NewReader(b))
	if err != nil {
		return Result{Outcome: Fail, Error: ErrWordBadRequest, Message: err.Error(), Err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	status, _, rb, res, done := c.do(req)
	if done {
		return res
	}
	if status/100 == 2 {
		var lr LockResponse
		if err := json.Unmarshal(rb, &lr); err != nil || (op != "release" && lr.Token == "") {
			// The lock may well be ours now, but we cannot know the token.
			return Result{Outcome: Info, Status: status, Error: ErrWordBadResponse, Message: fmt.Sprintf("undecodable %s answer: %.200q", op, rb), Err: err}
		}
		return Result{Outcome: Ok, Status: status, Token: lr.Token, TTL: time.Duration(lr.TTLMs) * time.Millisecond}
	}
	return errorResult(status, rb, false)
}

// Write stores value under key with token; token "" sends no Fencing-Token
// header at all.
func (c *Client) Write(ctx context.Context, key, token string, value []byte) Result {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, c.base+"/v1/resources/"+url.PathEscape(key), bytes.NewReader(value))
	if err != nil {
		return Result{Outcome: Fail, Error: ErrWordBadRequest, Message: err.Error(), Err: err}
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	if token != "" {
		req.Header.Set(TokenHeader, token)
	}
	status, _, rb, res, done := c.do(req)
	if done {
		return res
	}
	if status/100 == 2 {
		return Result{Outcome: Ok, Status: status}
	}
	return errorResult(status, rb, false)
}

// Read returns key's value and the token of the write that stored it. A key
// never written is Ok with Found false.
func (c *Client) Read(ctx context.Context, key string) Result {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/v1/resources/"+url.PathEscape(key), nil)
	if err != nil {
		return Result{Outcome: Fail, Error: ErrWordBadRequest, Message: err.Error(), Err: err}
	}
	status, hdr, rb, res, done := c.do(req)
	if done {
		return res
	}
	if status == http.StatusOK {
		tok := hdr.Get(TokenHeader)
		if tok == "" {
			return Result{Outcome: Info, Status: status, Error: ErrWordBadResponse, Message: "read answered 200 without a Fencing-Token header"}
		}
		return Result{Outcome: Ok, Status: status, Token: tok, Value: rb, Found: true}
	}
	return errorResult(status, rb, true)
}

// Health returns nil when the node answers GET /v1/health with 200.
func (c *Client) Health(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/v1/health", nil)
	if err != nil {
		return err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, MaxBodyBytes))
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("health: %s", resp.Status)
	}
	return nil
}

// do sends req and reads the whole answer. When done is true, res is the
// final (transport failure) result.
func (c *Client) do(req *http.Request) (status int, hdr http.Header, body []byte, res Result, done bool) {
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, nil, nil, transportResult(req.Context(), err), true
	}
	defer resp.Body.Close()
	// Bounded: a misbehaving target must not make the client buffer without
	// end (a value is at most 1 MiB; error bodies are small).
	body, err = io.ReadAll(io.LimitReader(resp.Body, MaxBodyBytes+1))
	if err != nil {
		// The status line arrived but the body broke: for a 2xx the effect
		// happened and only its details are lost; for anything else we
		// cannot even trust the status. Either way the result is unknown.
		r := transportResult(req.Context(), err)
		r.Status = resp.StatusCode
		return 0, nil, nil, r, true
	}
	if resp.StatusCode == http.StatusBadGateway && resp.Header.Get(ProxyHeader) == ProxyRefused {
		// The harness's proxy could not connect to the node: like a
		// refused dial, the request never reached it.
		return 0, nil, nil, Result{Outcome: Fail, Status: resp.StatusCode, Error: ErrWordRefused,
			Message: fmt.Sprintf("proxy: %.200s", body)}, true
	}
	return resp.StatusCode, resp.Header, body, Result{}, false
}

// ProxyHeader marks an answer the harness's own proxy made, not the node:
// ProxyRefused on a 502 says the proxy's connection to the node was refused,
// so the request is known not to have reached it. The proxy removes this
// header from nodes' answers, so a node cannot claim it.
const (
	ProxyHeader  = "Fencecheck-Proxy"
	ProxyRefused = "refused"
)

// transportResult classifies a request that got no (complete) answer. Only a
// refused connection is definite: the dial failed, so no byte of the request
// left this process. A reset or timeout may come after the server acted.
func transportResult(ctx context.Context, err error) Result {
	r := Result{Outcome: Info, Err: err, Message: err.Error()}
	var opErr *net.OpError
	switch {
	case errors.As(err, &opErr) && opErr.Op == "dial" && errors.Is(err, syscall.ECONNREFUSED):
		r.Outcome, r.Error = Fail, ErrWordRefused
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded) || isTimeout(err):
		r.Error = ErrWordTimeout
	case errors.Is(err, context.Canceled):
		r.Error = ErrWordCanceled
	default:
		r.Error = ErrWordConnection
	}
	return r
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// errorResult classifies a non-2xx answer. The definite set is the statuses
// Fencing API v1 defines as rejections taken before any state changed; a 5xx
// or any status the API does not define may hide a partial effect.
func errorResult(status int, body []byte, read bool) Result {
	var eb ErrorBody
	_ = json.Unmarshal(body, &eb)
	r := Result{Status: status, Error: eb.Error, Message: eb.Message, HighWater: eb.HighWater}
	switch status {
	case http.StatusNotFound:
		if read && eb.Error != ErrWordNoRoute {
			r.Outcome, r.Found, r.Error = Ok, false, ""
			return r
		}
		r.Outcome = Fail
	case http.StatusBadRequest, http.StatusForbidden, http.StatusMethodNotAllowed,
		http.StatusConflict, http.StatusRequestEntityTooLarge, http.StatusPreconditionRequired:
		r.Outcome = Fail
	default:
		r.Outcome = Info
		if r.Error == "" {
			r.Error = ErrWordUnexpected
		}
	}
	if r.Error == "" {
		r.Error = strings.ToLower(strings.ReplaceAll(http.StatusText(status), " ", "-"))
	}
	if r.Message == "" {
		r.Message = fmt.Sprintf("%d %s: %.200q", status, http.StatusText(status), body)
	}
	return r
}
