package oracle

import (
	"fmt"
	"strconv"
	"strings"
)

// The generator's system: what a correct issuer and resource (or one with
// a bug switched on) answer to each generated operation, and what it does.

func (g *gen) latest(c int, lock string) string {
	ts := g.clients[c].tokens[lock]
	if len(ts) == 0 {
		return ""
	}
	return ts[len(ts)-1]
}

func (g *gen) seal(n uint64) string {
	return fmt.Sprintf("%d.s%x", n, n*2654435761%1000003)
}

// forge is a token a client makes up: on authenticated targets its seal
// does not verify.
func (g *gen) forge(n uint64) string {
	if g.sem.Authenticated {
		return fmt.Sprintf("%d.forged%d", n, g.rng.IntN(100))
	}
	return g.spell(n)
}

func (g *gen) spell(n uint64) string {
	if g.sem.Authenticated || g.chance(0.15) {
		return g.seal(n)
	}
	return strconv.FormatUint(n, 10)
}

// decide fixes what the client sends, from what it knows at the call.
func (g *gen) decide(o *gop) {
	o.decided = true
	tok := g.latest(o.client, o.key)
	if tok == "" {
		if ps := g.pool[o.key]; len(ps) > 0 && g.chance(0.5) {
			tok = g.pick(ps)
		} else {
			tok = g.forge(uint64(1 + g.rng.IntN(3))) // it never acquired: a guess
		}
	}
	n, _ := strconv.ParseUint(strings.SplitN(tok, ".", 2)[0], 10, 64)
	switch o.f {
	case "write":
		switch r := g.rng.Float64(); {
		case r < 0.62:
		case r < 0.72: // stale: an older token it or someone held
			if ps := g.pool[o.key]; len(ps) > 0 {
				tok = g.pick(ps)
			} else if n > 0 {
				tok = g.forge(n - 1)
			}
		case r < 0.77:
			tok = ""
		case r < 0.82:
			tok = g.pick([]string{"0" + tok, fmt.Sprintf("%d.", n), fmt.Sprintf("%d.a+b", n), "-" + tok,
				"abc", fmt.Sprintf("%d.%d", n, n), " " + tok, "18446744073709551616",
				fmt.Sprintf("%d.%s", n, strings.Repeat("s", 257))})
		case r < 0.87: // the seal flipped
			if strings.Contains(tok, ".") {
				tok = strconv.FormatUint(n, 10)
			} else {
				tok = g.seal(n)
			}
		case r < 0.93: // forged: a newer number no issuer gave out
			tok = g.forge(n + 1 + uint64(g.rng.IntN(4)))
		case r < 0.96:
			tok = "0"
		}
		if g.chance(0.3) { // give the bug a chance to show
			switch g.bug {
			case "missing-as-zero":
				tok = ""
			case "lenient-grammar":
				tok = "0" + tok
			case "accept-unsealed":
				tok = strconv.FormatUint(n, 10)
			}
		}
		o.sent, o.recv = tok, tok
		o.value = g.newValue(o)
		o.jepsenStyle = g.jepsen && !o.never && g.chance(0.7)
		if g.strip && g.chance(0.3) {
			o.tamper = g.pick([]string{"remove", "empty", "garble"})
			o.recv = ""
			if o.tamper == "garble" {
				o.recv = g.pick([]string{"-" + tok, tok + "x", "abc", "0" + tok, "7"})
			}
			hi := o.ret
			if o.applies {
				hi = o.lp
			}
			o.tamperAt = o.call + 1 + g.rng.Int64N(max(1, hi-o.call-1))
			for g.usedTimes[o.tamperAt] {
				o.tamperAt++
			}
			g.usedTimes[o.tamperAt] = true
		}
	case "renew", "release":
		switch r := g.rng.Float64(); {
		case r < 0.8:
		case r < 0.9:
			if ps := g.pool[o.key]; len(ps) > 0 {
				tok = g.pick(ps)
			}
		case r < 0.95:
			tok = ""
		default:
			tok = "0" + tok
		}
		o.sent = tok
	}
}

func (g *gen) newValue(o *gop) string {
	if !g.emptyUsed[o.key] && g.chance(0.1) {
		g.emptyUsed[o.key] = true
		return ""
	}
	counter := "*"
	if g.sharedVals {
		counter = o.key // values repeat across keys: v1 on k0 and on k1
	}
	g.valueN[counter]++
	return fmt.Sprintf("v%d", g.valueN[counter])
}

func (g *gen) scopeOf(lock string) string {
	if g.sem.GlobalScope {
		return "*"
	}
	return lock
}

// effect is the servers' answer at the operation's linearization point.
func (g *gen) effect(o *gop) {
	if !o.decided {
		panic("effect before decision")
	}
	determined := !o.info && !o.never
	if determined && g.chance(0.04) {
		o.refused = true // the dial failed: nothing was sent
		o.typ, o.err = "fail", "refused"
		return
	}
	switch o.f {
	case "write":
		g.write(o)
	case "read":
		g.read(o)
	case "acquire":
		g.acquire(o)
	case "renew", "release":
		g.renewRelease(o)
	}
	if determined && o.f == "acquire" && o.typ == "ok" {
		cs := g.clients[o.client]
		cs.tokens[o.key] = append(cs.tokens[o.key], o.resTok)
		g.pool[o.key] = append(g.pool[o.key], o.resTok)
	}
}

func (g *gen) write(o *gop) {
	k := g.res[o.key]
	if g.bug == "forget" && o.lp > g.forgetAt {
		g.res[o.key] = &resourceKey{}
		k = g.res[o.key]
		g.forgetAt = never
	}
	t := parseToken(o.recv)
	if g.bug == "lenient-grammar" && t.kind == tokMalformed {
		num := strings.TrimLeft(strings.SplitN(o.recv, ".", 2)[0], "0 ")
		if n, err := strconv.ParseUint(num, 10, 64); err == nil {
			t = token{kind: tokValid, n: n, sealed: strings.Contains(o.recv, "."), raw: o.recv}
		}
	}
	if g.bug == "missing-as-zero" && t.kind == tokMissing {
		t = token{kind: tokValid, n: 0, raw: "0"}
	}
	reject := func(err string) { o.typ, o.err = "fail", err }
	newer := !k.written || t.n > k.hw || ((g.sem.EqualAccept || g.bug == "accept-equal") && t.n == k.hw)
	switch {
	case g.bug == "no-fencing":
	case t.kind == tokMissing:
		reject("missing-token")
		return
	case t.kind == tokMalformed:
		reject("malformed-token")
		return
	case g.sem.Authenticated && g.bug == "accept-unsealed" && !t.sealed:
	case g.sem.Authenticated && g.bug == "accept-forged" && t.sealed:
	case g.sem.Authenticated && (!t.sealed || o.recv != g.seal(t.n)):
		reject("forged")
		return
	case g.bug == "false-stale" && g.chance(0.3):
		reject("stale")
		o.hw = strconv.FormatUint(k.hw, 10)
		return
	case !newer:
		reject("stale")
		switch {
		case g.bug == "wrong-high-water" && t.n > 0:
			o.hw = strconv.FormatUint(t.n-1, 10)
		case g.bug == "wrong-high-water":
			o.hw = strconv.FormatUint(k.hw+1, 10)
		case g.chance(0.85):
			o.hw = strconv.FormatUint(k.hw, 10)
		}
		if g.bug == "stores-rejected" && g.chance(0.5) {
			k.value = o.value
		}
		return
	}
	o.typ = "ok"
	if g.bug == "lost-write" && g.chance(0.3) {
		return
	}
	k.history = append(k.history, resourceKey{written: k.written, hw: k.hw, value: k.value, tok: k.tok})
	k.written, k.hw, k.value, k.tok = true, t.n, o.value, o.recv
}

func (g *gen) read(o *gop) {
	k := *g.res[o.key]
	if g.bug == "forget" && o.lp > g.forgetAt {
		g.res[o.key] = &resourceKey{}
		k = resourceKey{}
		g.forgetAt = never
	}
	if g.bug == "stale-read" && len(k.history) > 0 && g.chance(0.4) {
		k = k.history[g.rng.IntN(len(k.history))]
	}
	o.typ = "ok"
	if !k.written {
		if g.bug == "empty-read" && g.chance(0.5) {
			o.resTok = g.spell(1)
		}
		return
	}
	o.resTok, o.resVal = k.tok, k.value
	if g.bug == "empty-read" && g.chance(0.5) {
		o.resVal = ""
	}
}

func (g *gen) acquire(o *gop) {
	scope := g.scopeOf(o.key)
	if g.bug == "counter-reset" && o.lp > g.resetAt {
		g.counter[scope] = 0
		g.resetAt = never
	}
	if g.holders[o.key] != "" && !g.chance(0.35) { // an unexpired lease
		o.typ, o.err = "fail", "held"
		return
	}
	c := g.counter[scope]
	switch {
	case g.bug == "duplicate-token" && g.issued[scope] && g.chance(0.4):
	case g.bug == "regress" && c > 1 && g.chance(0.4):
		c -= 2
	default:
		if g.issued[scope] || g.chance(0.5) {
			c += 1 + uint64(g.rng.IntN(2))
		}
	}
	g.counter[scope], g.issued[scope] = c, true
	tok := g.spell(c)
	switch {
	case g.bug == "leading-zero-token" && g.chance(0.5):
		tok = "0" + tok
	case g.bug == "bad-seal-token" && g.chance(0.5):
		tok = strconv.FormatUint(c, 10) + ".b@d"
	}
	g.holders[o.key] = tok
	o.typ, o.resTok = "ok", tok
}

func (g *gen) renewRelease(o *gop) {
	t := parseToken(o.sent)
	h := parseToken(g.holders[o.key])
	holds := t.kind == tokValid && h.kind == tokValid && t.n == h.n && (!g.sem.Authenticated || t.sealed)
	if g.bug == "renew-anyone" && t.kind == tokValid {
		holds = true
	}
	if !holds || g.chance(0.15) { // or the lease ran out
		o.typ, o.err = "fail", "lost"
		switch {
		case t.kind == tokMissing:
			o.err = "missing-token"
		case t.kind == tokMalformed:
			o.err = "malformed-token"
		}
		return
	}
	o.typ = "ok"
	if o.f == "release" {
		g.holders[o.key] = ""
	}
}
