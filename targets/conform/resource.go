package conform

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"

	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/fencing"
	"github.com/fencecheck/fencecheck/harness"
	"github.com/fencecheck/fencecheck/history"
)

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
