package oracle

import (
	"math/rand/v2"
	"sort"
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
