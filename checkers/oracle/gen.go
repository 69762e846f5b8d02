package oracle

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
)

// Generated is one random history and the semantics it is to be checked
// with.
type Generated struct {
	History []byte
	Sem     Semantics
	// Label says what produced it: "correct" (a correct resource and
	// issuer), "bug:NAME" (one rule broken), with "+perturbed:WHAT" when
	// one recorded answer was changed afterwards.
	Label string
}

// Flags returns the fencecheck check flags for the semantics.
func (s Semantics) Flags() []string {
	var out []string
	if s.EqualAccept {
		out = append(out, "--equal", "accept")
	}
	if s.GlobalScope {
		out = append(out, "--scope", "global")
	}
	if s.Authenticated {
		out = append(out, "--authenticated")
	}
	return out
}

var (
	resourceBugs = []string{"accept-equal", "missing-as-zero", "no-fencing", "forget", "false-stale",
		"wrong-high-water", "lenient-grammar", "accept-unsealed", "stale-read", "empty-read",
		"lost-write", "stores-rejected", "accept-forged"}
	issuerBugs = []string{"counter-reset", "duplicate-token", "regress", "renew-anyone",
		"leading-zero-token", "bad-seal-token"}
	keyNames = []string{"k0", "k1", "k2", "a/b", "a_b", "r.1"}
)

// Generate returns a small random history: 2-4 concurrent clients on 1-3
// keys (a key's lock has its name) simulated against a correct resource and
// issuer, or one with a bug, then sometimes perturbed. It covers every
// outcome (ok, fail, info, never completed), stale, equal, missing,
// malformed, sealed and unsealed tokens, reads of never-written keys and of
// empty values, strip events (with values repeated across keys), writes
// whose token and value are only on the completion, and every semantics.
// Every partition stays within MaxOps.
func Generate(seed uint64) Generated {
	g := &gen{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	return g.run()
}

type gop struct {
	client, process int
	f, key          string
	call, ret, lp   int64
	applies         bool // takes effect (always, for determined outcomes)
	info, never     bool

	sent, recv  string
	tamper      string // strip mode, "" if untouched
	tamperAt    int64
	value       string
	typ         string // ok, fail, info
	err, hw     string
	resTok      string // acquire: returned; read: seen
	resVal      string
	refused     bool
	jepsenStyle bool
	decided     bool
}

type clientState struct {
	tokens map[string][]string // lock -> tokens it acquired, oldest first
}

type resourceKey struct {
	written bool
	hw      uint64
	value   string
	tok     string
	history []resourceKey // earlier states, for stale reads
}

type gen struct {
	rng        *rand.Rand
	sem        Semantics
	bug        string
	strip      bool
	jepsen     bool
	sharedVals bool
	keys       []string
	ops        []*gop
	clients    []clientState
	res        map[string]*resourceKey
	counter    map[string]uint64 // issuer counters by scope
	issued     map[string]bool
	holders    map[string]string // lock -> raw token of the holder
	pool       map[string][]string
	valueN     map[string]int
	emptyUsed  map[string]bool
	forgetAt   int64
	resetAt    int64
	usedTimes  map[int64]bool
	label      string
}

func (g *gen) chance(p float64) bool   { return g.rng.Float64() < p }
func (g *gen) pick(xs []string) string { return xs[g.rng.IntN(len(xs))] }

func (g *gen) run() Generated {
	g.sem = Semantics{EqualAccept: g.chance(0.25), GlobalScope: g.chance(0.25), Authenticated: g.chance(0.3)}
	g.label = "correct"
	if g.chance(0.55) {
		if g.chance(0.6) {
			g.bug = g.pick(resourceBugs)
		} else {
			g.bug = g.pick(issuerBugs)
		}
		g.label = "bug:" + g.bug
		if g.bug == "accept-unsealed" || g.bug == "accept-forged" {
			g.sem.Authenticated = true
		}
	}
	g.strip = g.chance(0.3)
	g.jepsen = g.chance(0.1)
	g.sharedVals = g.chance(0.5)
	names := append([]string(nil), keyNames...)
	g.rng.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
	g.keys = names[:1+g.rng.IntN(3)]
	g.res = map[string]*resourceKey{}
	for _, k := range g.keys {
		g.res[k] = &resourceKey{}
	}
	g.counter, g.issued, g.holders = map[string]uint64{}, map[string]bool{}, map[string]string{}
	g.pool, g.valueN, g.emptyUsed = map[string][]string{}, map[string]int{}, map[string]bool{}
	g.usedTimes = map[int64]bool{}
	g.schedule()
	g.simulate()
	if g.chance(0.35) {
		g.perturb()
	}
	return Generated{History: g.encode(), Sem: g.sem, Label: g.label}
}

// schedule draws each client's operations and their times, leaving their
// parameters to the simulation.
func (g *gen) schedule() {
	nClients := 2 + g.rng.IntN(3)
	g.clients = make([]clientState, nClients)
	register := map[string]int{}
	issuerN := map[string]int{}
	const perPartition = 9
	nextProcess := 0
	var end int64
	for c := range g.clients {
		g.clients[c] = clientState{tokens: map[string][]string{}}
		process := nextProcess
		nextProcess++
		t := int64(g.rng.IntN(30))
		n := 1 + g.rng.IntN(5)
		for i := 0; i < n; i++ {
			key := g.pick(g.keys)
			f := g.pickOp(c, key)
			scope := key
			if g.sem.GlobalScope {
				scope = "*"
			}
			if f == "write" || f == "read" {
				if register[key] >= perPartition {
					continue
				}
				register[key]++
			} else {
				if issuerN[scope] >= perPartition {
					continue
				}
				issuerN[scope]++
			}
			dur := int64(2 + g.rng.IntN(20))
			o := &gop{client: c, process: process, f: f, key: key}
			o.call = g.time(t)
			o.ret = g.time(t + dur)
			switch r := g.rng.Float64(); {
			case r < 0.05 && i == n-1:
				o.never = true
			case r < 0.17:
				o.info = true
			}
			if o.info || o.never {
				o.applies = g.chance(0.55)
				// An unknown outcome may land later than its info event.
				o.lp = o.call + 1 + g.rng.Int64N((o.ret-o.call)+40_000)
			} else {
				o.applies = true
				o.lp = o.call + 1 + g.rng.Int64N(o.ret-o.call-1)
			}
			g.ops = append(g.ops, o)
			if o.never {
				break
			}
			if o.info {
				process = nextProcess // a client that saw info continues as a new process
				nextProcess++
			}
			t += dur + int64(1+g.rng.IntN(8))
			if t > end {
				end = t
			}
		}
	}
	g.forgetAt = g.time(int64(g.rng.IntN(int(end + 1))))
	g.resetAt = g.time(int64(g.rng.IntN(int(end + 1))))
}

// pickOp is a client's next operation, in the workload's spirit: acquire,
// write, maybe read, release, with some of everything else.
func (g *gen) pickOp(c int, key string) string {
	r := g.rng.Float64()
	switch {
	case r < 0.27:
		return "acquire"
	case r < 0.62:
		return "write"
	case r < 0.84:
		return "read"
	case r < 0.90:
		return "renew"
	}
	return "release"
}

// time turns a schedule instant into a history time (ns), distinct from
// every other one so that real-time order is never a tie.
func (g *gen) time(t int64) int64 {
	ns := t*1000 + int64(g.rng.IntN(1000))
	for g.usedTimes[ns] {
		ns++
	}
	g.usedTimes[ns] = true
	return ns
}

type simEvent struct {
	at     int64
	decide bool
	o      *gop
}

// simulate runs the clients' decisions at each call and the servers'
// effects at each linearization point, in time order.
func (g *gen) simulate() {
	var evs []simEvent
	for _, o := range g.ops {
		evs = append(evs, simEvent{o.call, true, o})
		if o.applies {
			evs = append(evs, simEvent{o.lp, false, o})
		}
	}
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].at < evs[j].at })
	for _, e := range evs {
		if e.decide {
			g.decide(e.o)
		} else {
			g.effect(e.o)
		}
	}
	for _, o := range g.ops {
		switch {
		case o.never:
			o.typ = ""
		case o.info:
			o.typ, o.err = "info", "timeout"
		case !o.applies:
			panic("determined operation without effect")
		}
	}
}

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

// perturb changes one recorded answer, as a buggy system or recorder
// might: most such changes make the history invalid, some do not.
func (g *gen) perturb() {
	var done []*gop
	for _, o := range g.ops {
		if o.typ == "ok" || o.typ == "fail" {
			done = append(done, o)
		}
	}
	if len(done) == 0 {
		return
	}
	o := done[g.rng.IntN(len(done))]
	what := ""
	switch {
	case o.f == "read" && o.typ == "ok":
		switch g.rng.IntN(4) {
		case 0:
			o.resVal, what = fmt.Sprintf("v%d", 1+g.rng.IntN(4)), "read-value"
		case 1:
			t := parseToken(o.resTok)
			o.resTok, what = g.spell(t.n+1), "read-token"
		case 2:
			o.resTok, o.resVal, what = "", "", "read-404"
		default:
			o.resVal, what = "", "read-empty"
		}
	case o.f == "write" && o.typ == "ok":
		o.typ, o.err, what = "fail", "stale", "write-ok-to-stale"
		if g.chance(0.5) {
			o.hw = g.pick([]string{"0", "1", "2", "3"})
		}
	case o.f == "write" && o.err == "stale":
		if g.chance(0.5) {
			o.typ, o.err, o.hw, what = "ok", "", "", "write-stale-to-ok"
		} else {
			o.hw, what = g.pick([]string{"0", "1", "2", "3", "4", "05"}), "high-water"
		}
	case o.f == "acquire" && o.typ == "ok":
		t := parseToken(o.resTok)
		if t.n > 0 && g.chance(0.5) {
			t.n--
		} else {
			t.n++
		}
		o.resTok, what = g.spell(t.n), "acquire-token"
	case o.typ == "fail":
		o.typ, o.err, what = "ok", "", "fail-to-ok"
		if o.f == "acquire" {
			o.resTok = g.spell(uint64(1 + g.rng.IntN(4)))
		}
	default:
		o.typ, o.err, what = "fail", "lost", "ok-to-fail"
	}
	g.label += "+perturbed:" + what
}

// wireEvent is one history line as the project's recorder writes it.
type wireEvent struct {
	Index     int64                      `json:"index"`
	Time      int64                      `json:"time"`
	Process   int                        `json:"process"`
	Type      string                     `json:"type"`
	F         string                     `json:"f"`
	Key       string                     `json:"key,omitempty"`
	Token     string                     `json:"token,omitempty"`
	Value     string                     `json:"value,omitempty"`
	Error     string                     `json:"error,omitempty"`
	HighWater string                     `json:"high_water,omitempty"`
	Extra     map[string]json.RawMessage `json:"extra,omitempty"`
}

func (g *gen) encode() []byte {
	var evs []wireEvent
	add := func(e wireEvent) { evs = append(evs, e) }
	for _, o := range g.ops {
		inv := wireEvent{Time: o.call, Process: o.process, Type: "invoke", F: o.f, Key: o.key}
		if o.f == "write" && !o.jepsenStyle {
			inv.Token, inv.Value = o.sent, o.value
		}
		if o.f == "renew" || o.f == "release" {
			inv.Token = o.sent
		}
		add(inv)
		if o.tamper != "" {
			x := map[string]json.RawMessage{"mode": jsonString(o.tamper), "sent_by_client": jsonString(o.sent)}
			add(wireEvent{Time: o.tamperAt, Process: -1, Type: "info", F: "strip", Key: o.key,
				Token: o.recv, Value: o.value, Extra: x})
		}
		if o.never {
			continue
		}
		c := wireEvent{Time: o.ret, Process: o.process, Type: o.typ, F: o.f, Key: o.key, Error: o.err, HighWater: o.hw}
		switch o.f {
		case "write":
			c.Token, c.Value = o.sent, o.value
		case "renew", "release":
			c.Token = o.sent
		case "acquire", "read":
			if o.typ == "ok" {
				c.Token, c.Value = o.resTok, o.resVal
			}
		}
		add(c)
	}
	if g.strip {
		add(wireEvent{Time: 0, Process: -1, Type: "info", F: "strip", Extra: map[string]json.RawMessage{"action": jsonString("start")}})
	}
	if g.chance(0.2) {
		// A run that records its own events, and completed (history/run.go:
		// a run without a complete end event cannot pass the gate, which
		// is no linearizability question).
		end := int64(0)
		for _, e := range evs {
			end = max(end, e.Time)
		}
		add(wireEvent{Time: 1, Process: -1, Type: "info", F: "run", Extra: map[string]json.RawMessage{"action": jsonString("start")}})
		add(wireEvent{Time: 2, Process: -1, Type: "info", F: "pause", Extra: map[string]json.RawMessage{"action": jsonString("start")}})
		add(wireEvent{Time: end + 1, Process: -1, Type: "info", F: "run", Extra: map[string]json.RawMessage{"action": jsonString("end"), "complete": json.RawMessage("true")}})
	}
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].Time < evs[j].Time })
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	for i := range evs {
		evs[i].Index = int64(i)
		if err := enc.Encode(&evs[i]); err != nil {
			panic(err)
		}
	}
	return b.Bytes()
}

func jsonString(s string) json.RawMessage {
	b, _ := json.Marshal(s)
	return b
}
