package historytest

import (
	"bufio"
	"encoding/json"
	"io"
	"math/rand/v2"
	"slices"
	"strconv"

	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/history"
)

// Simulate: a simulated fenced register and issuer, for the checkers'
// property tests, cross-validation and benchmarks. Clients run operations with random
// durations; each operation takes effect at a random point of its interval
// (an unknown-outcome write possibly later, or never), and outcomes come from
// a sequential register applied in that order, so an unmutated simulation of
// a correct server is linearizable by construction. Bug switches and
// mutations make invalid (or sometimes still valid) histories.

// SimConfig describes a simulated history.
type SimConfig struct {
	Seed          uint64
	Ops           int // client operations in total (approximately)
	Keys          int
	ClientsPerKey int
	// InfoRate is the share of writes (and reads) whose outcome is unknown;
	// such a write takes effect with probability 1/2, possibly after the
	// client gave up on it.
	InfoRate float64
	// ReadRate is the share of operations that are reads (default 0.3).
	ReadRate float64
	// NewTokenRate is the chance a writer acquires a new token before its
	// next write (default 0.4); otherwise it reuses its token (a replay,
	// or a reentrant write).
	NewTokenRate float64
	// MissingTokenRate is the share of writes sent without a token.
	MissingTokenRate float64
	// checkers.Semantics is what the simulated server implements.
	Semantics checkers.Semantics
	// Tick is nanoseconds per time unit, MaxDur the longest operation and
	// MaxThink the longest pause between a client's operations, in units.
	Tick, MaxDur, MaxThink int64
	// Bugs of the simulated server.
	ForgetHighWater bool // the high-water is lost once, mid-run (restart bug)
	MissingAsZero   bool // a write without a token is stored unchecked
	// Acquires records the acquire operations (issuer model).
	Acquires bool
	// FaultEvery, when > 0, records a fault period every FaultEvery time
	// units, FaultLen long (default FaultEvery/3), alternately a pause and a
	// restart of node "n1", where every operation goes. With
	// ForgetHighWater the high-water marks are lost when the first restart
	// ends, not mid-run.
	FaultEvery, FaultLen int64
}

func (c *SimConfig) defaults() {
	if c.Ops <= 0 {
		c.Ops = 100
	}
	if c.Keys <= 0 {
		c.Keys = 1
	}
	if c.ClientsPerKey <= 0 {
		c.ClientsPerKey = 3
	}
	if c.ReadRate == 0 {
		c.ReadRate = 0.3
	}
	if c.NewTokenRate == 0 {
		c.NewTokenRate = 0.4
	}
	if c.Semantics.Equal == "" {
		c.Semantics.Equal = checkers.EqualReject
	}
	if c.Semantics.Scope == "" {
		c.Semantics.Scope = checkers.ScopePerLock
	}
	if c.Tick <= 0 {
		c.Tick = 1_000_000
	}
	if c.MaxDur <= 0 {
		c.MaxDur = 20
	}
	if c.MaxThink < 0 {
		c.MaxThink = 0
	}
	if c.FaultEvery > 0 && c.FaultLen <= 0 {
		c.FaultLen = max(1, c.FaultEvery/3)
	}
}

// simNode is the node every simulated operation goes to when the
// simulation records faults.
const simNode = "n1"

// SimOp is one simulated operation.
type SimOp struct {
	Process   int
	F         string
	Key       string
	Token     string // sent (write), returned (acquire, read)
	Value     string // written, or read
	Type      history.Type
	Error     string
	HighWater string
	Call, Ret int64 // ns; Ret is when the completion (ok, fail or info) was recorded
	lin       int64
	applied   bool // info write: takes effect at lin
	tok       uint64
	client    int
}

// SimHistory is a simulated history: its operations in call order, and
// the fault periods (SimConfig.FaultEvery) in time order.
type SimHistory struct {
	Ops    []SimOp
	Faults []SimFault
	node   string
}

// SimFault is one recorded fault period (ns).
type SimFault struct {
	Name        string
	ID          int64
	Start, Stop int64
}

type simKeyState struct {
	written bool
	hw      uint64
	value   string
	vtok    string
}

// Simulate runs the simulation.
func Simulate(cfg SimConfig) *SimHistory {
	cfg.defaults()
	rng := rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15))
	nClients := cfg.Keys * cfg.ClientsPerKey
	perClient := (cfg.Ops + nClients - 1) / nClients
	ops := make([]SimOp, 0, nClients*perClient)
	pid := 0
	dur := func() int64 { return 1 + rng.Int64N(cfg.MaxDur) }
	for ci := 0; ci < nClients; ci++ {
		key := "r" + strconv.Itoa(ci%cfg.Keys)
		t := rng.Int64N(cfg.MaxDur + 1)
		proc := pid
		pid++
		hasTok := false
		seq := 0
		for n := 0; n < perClient; n++ {
			op := SimOp{Process: proc, Key: key, client: ci}
			switch r := rng.Float64(); {
			case r < cfg.ReadRate:
				op.F = history.Read
			case !hasTok || rng.Float64() < cfg.NewTokenRate:
				op.F = history.Acquire
				hasTok = true
			default:
				op.F = history.Write
				seq++
				op.Value = key + "-c" + strconv.Itoa(ci) + "-" + strconv.Itoa(seq)
			}
			d := dur()
			op.Call, op.Ret = t, t+d
			op.lin = t + rng.Int64N(d+1)
			op.Type = history.Ok
			if op.F != history.Acquire && rng.Float64() < cfg.InfoRate {
				op.Type = history.Info
				if op.F == history.Write && rng.IntN(2) == 0 {
					op.applied = true
					op.lin = t + rng.Int64N(4*d+1) // may land after the client gave up
				}
				proc = pid // a process that saw info is retired
				pid++
			}
			ops = append(ops, op)
			t = op.Ret + rng.Int64N(cfg.MaxThink+1)
		}
	}
	// Apply in order of effect.
	order := make([]int32, len(ops))
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortStableFunc(order, func(a, b int32) int {
		x, y := ops[a].lin, ops[b].lin
		switch {
		case x < y:
			return -1
		case x > y:
			return 1
		}
		return 0
	})
	state := make(map[string]*simKeyState, cfg.Keys)
	counters := map[string]uint64{}
	clientTok := make([]uint64, nClients)
	var faults []SimFault
	if cfg.FaultEvery > 0 {
		end := int64(0)
		for _, o := range ops {
			end = max(end, o.Ret)
		}
		for i, t := int64(1), cfg.FaultEvery; t < end; i, t = i+1, t+cfg.FaultEvery {
			name := "pause"
			if i%2 == 0 {
				name = "restart"
			}
			faults = append(faults, SimFault{Name: name, ID: i, Start: t, Stop: t + cfg.FaultLen})
		}
	}
	forgetAt := int64(-1)
	if cfg.ForgetHighWater && len(order) > 0 {
		forgetAt = ops[order[len(order)/2]].lin
		if cfg.FaultEvery > 0 {
			forgetAt = -1
			for _, f := range faults {
				if f.Name == "restart" {
					forgetAt = f.Stop
					break
				}
			}
		}
	}
	accept := cfg.Semantics.Equal == checkers.EqualAccept
	for _, i := range order {
		op := &ops[i]
		st := state[op.Key]
		if st == nil {
			st = &simKeyState{}
			state[op.Key] = st
		}
		if forgetAt >= 0 && op.lin >= forgetAt {
			for _, s := range state {
				s.written = false
			}
			forgetAt = -1
		}
		switch op.F {
		case history.Acquire:
			scope := op.Key
			if cfg.Semantics.Scope == checkers.ScopeGlobal {
				scope = ""
			}
			counters[scope]++
			clientTok[op.client] = counters[scope]
			op.tok = counters[scope]
			op.Token = strconv.FormatUint(op.tok, 10)
		case history.Read:
			if op.Type == history.Ok {
				op.Value, op.Token = st.value, st.vtok
			}
		case history.Write:
			op.tok = clientTok[op.client]
			op.Token = strconv.FormatUint(op.tok, 10)
			if rng.Float64() < cfg.MissingTokenRate {
				op.Token = ""
			}
			if op.Type == history.Info && !op.applied {
				continue
			}
			if op.Token == "" {
				if cfg.MissingAsZero {
					st.value, st.vtok = op.Value, "0"
					if op.Type != history.Info {
						op.Type = history.Ok
					}
					continue
				}
				if op.Type != history.Info {
					op.Type, op.Error = history.Fail, "missing-token"
				}
				continue
			}
			ok := !st.written || op.tok > st.hw || (accept && op.tok == st.hw)
			if ok {
				st.written, st.hw, st.value, st.vtok = true, op.tok, op.Value, op.Token
			} else if op.Type != history.Info {
				op.Type, op.Error, op.HighWater = history.Fail, "stale", strconv.FormatUint(st.hw, 10)
			}
		}
	}
	if !cfg.Acquires {
		ops = slices.DeleteFunc(ops, func(o SimOp) bool { return o.F == history.Acquire })
	}
	for i := range ops {
		ops[i].Call *= cfg.Tick
		ops[i].Ret *= cfg.Tick
	}
	for i := range faults {
		faults[i].Start *= cfg.Tick
		faults[i].Stop *= cfg.Tick
	}
	slices.SortStableFunc(ops, func(a, b SimOp) int {
		switch {
		case a.Call < b.Call:
			return -1
		case a.Call > b.Call:
			return 1
		}
		return 0
	})
	h := &SimHistory{Ops: ops, Faults: faults}
	if cfg.FaultEvery > 0 {
		h.node = simNode
	}
	return h
}

// PlantStaleRead makes one ok read return the value of a write that an
// accepted write with a newer token had overwritten before the read began:
// a violation under either semantics. It picks the latest such read and
// reports whether it found one.
func (h *SimHistory) PlantStaleRead() bool {
	type wr struct {
		tok        uint64
		ret        int64
		value, raw string
	}
	byKey := map[string][]wr{} // ok writes per key
	for _, o := range h.Ops {
		if o.F == history.Write && o.Type == history.Ok && o.Token != "" {
			byKey[o.Key] = append(byKey[o.Key], wr{o.tok, o.Ret, o.Value, o.Token})
		}
	}
	for i := len(h.Ops) - 1; i >= 0; i-- {
		r := &h.Ops[i]
		if r.F != history.Read || r.Type != history.Ok {
			continue
		}
		// newest: the newest token accepted before the read began; older:
		// an accepted write with a smaller token.
		var newest, older *wr
		ws := byKey[r.Key]
		for j := range ws {
			if ws[j].ret < r.Call && (newest == nil || ws[j].tok > newest.tok) {
				newest = &ws[j]
			}
		}
		if newest == nil {
			continue
		}
		for j := range ws {
			if ws[j].tok < newest.tok && (older == nil || ws[j].tok > older.tok) {
				older = &ws[j]
			}
		}
		if older == nil {
			continue
		}
		r.Value, r.Token = older.value, older.raw
		return true
	}
	return false
}

// Events returns the history's events in time order. At equal times
// completions come first (a client may invoke at the instant its previous
// operation returned); the checkers treat intervals as closed, so the order
// of equal times does not change any verdict.
func (h *SimHistory) Events() []history.Event {
	var out []history.Event
	h.each(func(e *history.Event) { out = append(out, *e) })
	return out
}

// each yields the events in time order, numbered.
func (h *SimHistory) each(fn func(*history.Event)) {
	type ev struct {
		t     int64
		i     int32
		done  bool
		fault bool
	}
	evs := make([]ev, 0, 2*len(h.Ops)+2*len(h.Faults))
	for i := range h.Ops {
		evs = append(evs, ev{h.Ops[i].Call, int32(i), false, false}, ev{h.Ops[i].Ret, int32(i), true, false})
	}
	for i := range h.Faults {
		evs = append(evs, ev{h.Faults[i].Start, int32(i), false, true}, ev{h.Faults[i].Stop, int32(i), true, true})
	}
	slices.SortStableFunc(evs, func(a, b ev) int {
		switch {
		case a.t < b.t:
			return -1
		case a.t > b.t:
			return 1
		case a.done != b.done: // completions first: a process may invoke the instant its last op returned
			if a.done {
				return -1
			}
			return 1
		}
		return 0
	})
	var e history.Event
	for idx, x := range evs {
		if x.fault {
			f := &h.Faults[x.i]
			action := strconv.Quote(history.FaultStart)
			if x.done {
				action = strconv.Quote(history.FaultStop)
			}
			e = history.Event{Index: int64(idx), Time: x.t, Process: history.NemesisProcess, Type: history.Info, F: f.Name, Node: h.node,
				Extra: map[string]json.RawMessage{history.ExtraAction: json.RawMessage(action), history.ExtraFaultID: json.RawMessage(strconv.FormatInt(f.ID, 10))}}
			fn(&e)
			continue
		}
		o := &h.Ops[x.i]
		e = history.Event{Index: int64(idx), Time: x.t, Process: o.Process, F: o.F, Key: o.Key, Node: h.node}
		if !x.done {
			e.Type = history.Invoke
			if o.F == history.Write {
				e.Token, e.Value = o.Token, o.Value
			}
		} else {
			e.Type = o.Type
			e.Error, e.HighWater = o.Error, o.HighWater
			if o.Type == history.Ok && (o.F == history.Read || o.F == history.Acquire) {
				e.Token, e.Value = o.Token, o.Value
			}
		}
		fn(&e)
	}
}

// WriteJSONL writes the history as JSON Lines, without holding its events.
// (strconv quoting is valid JSON for the simulation's ASCII names.)
func (h *SimHistory) WriteJSONL(w io.Writer) error {
	bw := bufio.NewWriterSize(w, 1<<20)
	var b []byte
	h.each(func(e *history.Event) {
		b = b[:0]
		b = append(b, `{"index":`...)
		b = strconv.AppendInt(b, e.Index, 10)
		b = append(b, `,"time":`...)
		b = strconv.AppendInt(b, e.Time, 10)
		b = append(b, `,"process":`...)
		b = strconv.AppendInt(b, int64(e.Process), 10)
		b = append(b, `,"type":"`...)
		b = append(b, e.Type...)
		b = append(b, `","f":"`...)
		b = append(b, e.F...)
		b = append(b, '"')
		for _, kv := range [...]struct{ k, v string }{{"key", e.Key}, {"token", e.Token}, {"value", e.Value}, {"error", e.Error}, {"high_water", e.HighWater}, {"node", e.Node}} {
			if kv.v != "" {
				b = append(b, `,"`...)
				b = append(b, kv.k...)
				b = append(b, `":`...)
				b = strconv.AppendQuote(b, kv.v)
			}
		}
		if len(e.Extra) > 0 {
			b = append(b, `,"extra":{"action":`...)
			b = append(b, e.Extra[history.ExtraAction]...)
			b = append(b, `,"id":`...)
			b = append(b, e.Extra[history.ExtraFaultID]...)
			b = append(b, '}')
		}
		b = append(b, "}\n"...)
		bw.Write(b)
	})
	return bw.Flush()
}
