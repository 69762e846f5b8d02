package fast

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	porc "github.com/anishathalye/porcupine"
	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/checkers/historytest"
	"github.com/fencecheck/fencecheck/checkers/porcupine"
	"github.com/fencecheck/fencecheck/history"
	"github.com/stretchr/testify/require"
)

// The reference oracle: a deliberately plain Porcupine model of the fenced
// register and the issuer, written from the specification alone (no
// reductions, info writes nondeterministic), so that the fast checker is
// compared with something obviously right.

type cvRefRegState struct {
	written bool
	hw      uint64
	value   string
	vtok    uint64
}

type cvRefRegIn struct {
	read    bool
	outcome history.Outcome // writes
	stale   bool            // fail with error "stale"
	tok     history.Token
	value   string
	// authentic: the token could be accepted (checkers.Issued); hw: the
	// high-water a stale rejection reported.
	authentic bool
	hw        string
}

type cvRefRegOut struct {
	value string
	tok   history.Token
}

func cvRefRegisterModel(sem checkers.Semantics) porc.Model {
	acceptable := func(s cvRefRegState, in cvRefRegIn) bool {
		if !in.authentic {
			return false
		}
		t := in.tok
		return !s.written || t.N > s.hw || (sem.Equal == checkers.EqualAccept && t.N == s.hw)
	}
	apply := func(in cvRefRegIn) cvRefRegState {
		return cvRefRegState{written: true, hw: in.tok.N, value: in.value, vtok: in.tok.N}
	}
	nm := &porc.NondeterministicModel{
		Init: func() []interface{} { return []interface{}{cvRefRegState{}} },
		Step: func(state, input, output interface{}) []interface{} {
			s, in := state.(cvRefRegState), input.(cvRefRegIn)
			if in.read {
				out := output.(cvRefRegOut)
				if out.value == "" && out.tok.State == history.TokenNone { // 404
					if s.written {
						return nil
					}
					return []interface{}{s}
				}
				if out.tok.State != history.TokenValid || !s.written || s.value != out.value || out.tok.N != s.vtok {
					return nil
				}
				return []interface{}{s}
			}
			switch in.outcome {
			case history.OutcomeOk:
				if !acceptable(s, in) {
					return nil
				}
				return []interface{}{apply(in)}
			case history.OutcomeFail:
				if !in.stale || !in.authentic {
					return []interface{}{s}
				}
				if acceptable(s, in) {
					return nil
				}
				if in.hw != "" {
					// The reported mark is the mark (fencing/PROTOCOL.md).
					hw := history.ParseToken(in.hw)
					if hw.State != history.TokenValid || hw.Seal != "" || !s.written || hw.N != s.hw {
						return nil
					}
				}
				return []interface{}{s}
			}
			// checkers.Unknown outcome: it did not take effect, or it did.
			if acceptable(s, in) {
				return []interface{}{s, apply(in)}
			}
			return []interface{}{s}
		},
	}
	return nm.ToModel()
}

type cvRefIssuerState struct {
	any  bool
	last uint64
}

func cvRefIssuerModel() porc.Model {
	return porc.Model{
		Init: func() interface{} { return cvRefIssuerState{} },
		Step: func(state, input, _ interface{}) (bool, interface{}) {
			s, t := state.(cvRefIssuerState), input.(history.Token)
			if t.State != history.TokenValid || (s.any && t.N <= s.last) {
				return false, s
			}
			return true, cvRefIssuerState{any: true, last: t.N}
		},
	}
}

// cvOracle runs the oracle: one verdict per model (checkers.Unknown on timeout).
func cvOracle(t testing.TB, events []history.Event, sem checkers.Semantics, timeout time.Duration) (reg, iss checkers.Verdict) {
	ops, err := history.Pair(events)
	require.NoError(t, err)
	var end int64
	for _, op := range ops {
		end = max(end, op.Call)
		if op.Return != history.Never {
			end = max(end, op.Return)
		}
	}
	regByKey := map[string][]porc.Operation{}
	issByScope := map[string][]porc.Operation{}
	issued := checkers.NewIssued()
	for _, op := range ops {
		issued.Add(op)
	}
	for _, op := range ops {
		ret := op.Return
		if op.Outcome == history.OutcomeInfo {
			ret = end + 1
		}
		switch {
		case op.F == history.Read && op.Outcome == history.OutcomeOk:
			regByKey[op.Key] = append(regByKey[op.Key], porc.Operation{Input: cvRefRegIn{read: true}, Output: cvRefRegOut{value: op.Value, tok: op.Token}, Call: op.Call, Return: ret})
		case op.F == history.Write:
			in := cvRefRegIn{outcome: op.Outcome, stale: op.Outcome == history.OutcomeFail && op.Error == "stale", tok: op.Token, value: op.Value,
				authentic: issued.Authentic(op, sem), hw: op.HighWater}
			regByKey[op.Key] = append(regByKey[op.Key], porc.Operation{Input: in, Call: op.Call, Return: ret})
		case op.F == history.Acquire && op.Outcome == history.OutcomeOk:
			scope := op.Key
			if sem.Scope == checkers.ScopeGlobal {
				scope = ""
			}
			issByScope[scope] = append(issByScope[scope], porc.Operation{Input: op.Token, Call: op.Call, Return: ret})
		}
	}
	verdict := func(m porc.Model, parts map[string][]porc.Operation) checkers.Verdict {
		v := checkers.Valid
		for _, part := range parts {
			switch porc.CheckOperationsTimeout(m, part, timeout) {
			case porc.Illegal:
				return checkers.Invalid
			case porc.Unknown:
				v = checkers.Unknown
			}
		}
		return v
	}
	return verdict(cvRefRegisterModel(sem), regByKey), verdict(cvRefIssuerModel(), issByScope)
}

// cvRandomHistory draws a small simulated history, possibly from a buggy
// server, possibly mutated, and the semantics to check it under.
func cvRandomHistory(seed uint64) ([]history.Event, checkers.Semantics, string) {
	rng := rand.New(rand.NewPCG(seed, 77))
	if seed%2 == 0 || cvChaosOnly {
		events, sem := cvChaosHistory(rng)
		return events, sem, "chaos"
	}
	pick := func(xs ...float64) float64 { return xs[rng.IntN(len(xs))] }
	server := checkers.Semantics{Equal: checkers.EqualReject, Scope: checkers.ScopePerLock}
	if rng.IntN(2) == 0 {
		server.Equal = checkers.EqualAccept
	}
	if rng.IntN(4) == 0 {
		server.Scope = checkers.ScopeGlobal
	}
	cfg := historytest.SimConfig{
		Seed:             seed,
		Ops:              4 + rng.IntN(22),
		Keys:             1 + rng.IntN(3),
		ClientsPerKey:    1 + rng.IntN(5),
		InfoRate:         pick(0, 0.1, 0.3, 0.5),
		ReadRate:         pick(0.2, 0.3, 0.5),
		NewTokenRate:     pick(0.2, 0.5, 0.9),
		MissingTokenRate: pick(0, 0, 0.1),
		Semantics:        server,
		Tick:             1,
		MaxDur:           1 + rng.Int64N(6),
		MaxThink:         rng.Int64N(4),
		Acquires:         rng.IntN(2) == 0,
		ForgetHighWater:  rng.IntN(10) == 0,
		MissingAsZero:    rng.IntN(10) == 0,
	}
	if rng.IntN(3) == 0 { // reentrant writers under contention: large equal-token groups
		cfg.Semantics.Equal, cfg.NewTokenRate, cfg.ReadRate = checkers.EqualAccept, pick(0.1, 0.2), pick(0.4, 0.6)
		server = cfg.Semantics
	}
	h := historytest.Simulate(cfg)
	desc := fmt.Sprintf("%+v", cfg)
	for n := rng.IntN(3); n > 0; n-- {
		desc += "; " + cvMutate(rng, h)
	}
	sem := server
	if rng.IntN(5) == 0 { // check under the other semantics than the server's
		if sem.Equal == checkers.EqualReject {
			sem.Equal = checkers.EqualAccept
		} else {
			sem.Equal = checkers.EqualReject
		}
	}
	return h.Events(), sem, desc
}

// cvRand is what the generators draw from: a seeded PRNG, or the fuzzer's
// bytes.
type cvRand interface {
	IntN(n int) int
	Int64N(n int64) int64
}

// cvBytes draws from fuzz input (zeros once it runs out), so the fuzzer's
// coverage guidance steers the history's shape directly.
type cvBytes struct {
	b []byte
	i int
}

func (r *cvBytes) IntN(n int) int {
	if r.i >= len(r.b) {
		return 0
	}
	r.i++
	return int(r.b[r.i-1]) % n
}

func (r *cvBytes) Int64N(n int64) int64 { return int64(r.IntN(int(n))) }

// cvChaosHistory draws a tiny history with no simulated server at all:
// random intervals, tokens from a small range, random outcomes, reads of
// random values. Most are invalid, many are not, and they reach corners a
// well-behaved simulation rarely does (equal-token groups pinned by reads,
// stale rejections racing unknown-outcome writes).
func cvChaosHistory(rng cvRand) ([]history.Event, checkers.Semantics) {
	sem := checkers.Semantics{Equal: checkers.EqualReject, Scope: checkers.ScopePerLock}
	if rng.IntN(2) == 0 {
		sem.Equal = checkers.EqualAccept
	}
	sealing := rng.IntN(4) == 0 // an authenticating target: only sealed tokens may be accepted
	sem.Authenticated = sealing
	type op struct {
		call, ret int64
		done      history.Event
		inv       history.Event
	}
	n := 2 + rng.IntN(8)
	var ops []op
	var values []string
	for i := 0; i < n; i++ {
		call := rng.Int64N(12)
		ret := call + rng.Int64N(6)
		o := op{call: call, ret: ret}
		o.inv = history.Event{Process: i, Type: history.Invoke, Key: "k"}
		o.done = history.Event{Process: i, Key: "k"}
		if rng.IntN(5) < 3 {
			v := "v" + strconv.Itoa(i)
			values = append(values, v)
			tok := strconv.Itoa(1 + rng.IntN(3))
			if sealing && rng.IntN(3) != 0 {
				tok += ".s" + strconv.Itoa(i)
			}
			if rng.IntN(15) == 0 {
				tok = ""
			}
			o.inv.F, o.done.F = history.Write, history.Write
			o.inv.Token, o.inv.Value = tok, v
			switch rng.IntN(4) {
			case 0, 1:
				o.done.Type = history.Ok
			case 2:
				o.done.Type, o.done.Error = history.Fail, "stale"
			default:
				o.done.Type = history.Info
			}
		} else {
			o.inv.F, o.done.F = history.Read, history.Read
			o.done.Type = history.Ok
		}
		ops = append(ops, o)
	}
	for i := range ops {
		o := &ops[i]
		if o.done.F == history.Read && len(values) > 0 && rng.IntN(5) != 0 {
			v := values[rng.IntN(len(values))]
			o.done.Value = v
			for _, w := range ops {
				if w.inv.Value == v {
					o.done.Token = w.inv.Token
				}
			}
		}
	}
	type at struct {
		t int64
		e history.Event
	}
	var evs []at
	for _, o := range ops {
		evs = append(evs, at{o.call, o.inv}, at{o.ret, o.done})
	}
	slices.SortStableFunc(evs, func(a, b at) int { return int(a.t - b.t) })
	out := make([]history.Event, len(evs))
	for i, e := range evs {
		e.e.Index, e.e.Time = int64(i), e.t
		out[i] = e.e
	}
	return out, sem
}

// cvMutate corrupts one operation of h and says how.
func cvMutate(rng *rand.Rand, h *historytest.SimHistory) string {
	if len(h.Ops) == 0 {
		return "none"
	}
	var writes, reads, acquires []int
	for i, o := range h.Ops {
		switch {
		case o.F == history.Acquire && o.Type == history.Ok:
			acquires = append(acquires, i)
		case o.F == history.Write:
			writes = append(writes, i)
		case o.F == history.Read && o.Type == history.Ok:
			reads = append(reads, i)
		}
	}
	anyOf := func(xs []int) *historytest.SimOp {
		if len(xs) == 0 {
			return nil
		}
		return &h.Ops[xs[rng.IntN(len(xs))]]
	}
	w, r := anyOf(writes), anyOf(reads)
	switch rng.IntN(10) {
	case 0: // a stale rejection accepted, or an accepted write rejected
		if w != nil && w.Type != history.Info {
			if w.Type == history.Ok {
				w.Type, w.Error = history.Fail, "stale"
				return "write " + w.Value + " ok->stale"
			}
			w.Type, w.Error = history.Ok, ""
			return "write " + w.Value + " fail->ok"
		}
	case 1: // a read returns some other write's value, or nothing
		if r != nil {
			if w2 := anyOf(writes); w2 != nil && w2.Key == r.Key && rng.IntN(4) != 0 {
				r.Value, r.Token = w2.Value, w2.Token
			} else {
				r.Value, r.Token = "", ""
			}
			return "read -> " + r.Value
		}
	case 2: // a write's token shifts
		if w != nil {
			if n, err := strconv.ParseUint(w.Token, 10, 64); err == nil {
				if rng.IntN(2) == 0 && n > 0 {
					n--
				} else {
					n++
				}
				w.Token = strconv.FormatUint(n, 10)
				return "write " + w.Value + " token->" + w.Token
			}
		}
	case 3: // a read's token shifts
		if r != nil && r.Token != "" {
			n, _ := strconv.ParseUint(r.Token, 10, 64)
			r.Token = strconv.FormatUint(n+1, 10)
			return "read token->" + r.Token
		}
	case 4: // a write loses its token
		if w != nil {
			w.Token = ""
			return "write " + w.Value + " token dropped"
		}
	case 5: // an unknown-outcome write is observed
		if r != nil {
			for _, i := range writes {
				if o := &h.Ops[i]; o.Type == history.Info && o.Key == r.Key {
					r.Value, r.Token = o.Value, o.Token
					return "read observes info write " + o.Value
				}
			}
		}
	case 6: // a definite outcome becomes unknown
		if w != nil && w.Type != history.Info {
			w.Type, w.Error, w.HighWater = history.Info, "", ""
			// The process must not be reused: give the later ops a new one.
			cvRenumberAfter(h, w)
			return "write " + w.Value + " -> info"
		}
	case 8, 9: // the issuer hands out a repeated, smaller or no token
		if a := anyOf(acquires); a != nil {
			switch b := anyOf(acquires); {
			case rng.IntN(5) == 0:
				a.Token = ""
			case b != a && rng.IntN(2) == 0:
				a.Token = b.Token
			default:
				n, _ := strconv.ParseUint(a.Token, 10, 64)
				a.Token = strconv.FormatUint(n-min(n, 1+uint64(rng.IntN(3))), 10)
			}
			return "acquire token->" + a.Token
		}
	case 7: // a stale rejection becomes another definite failure
		if w != nil && w.Error == "stale" {
			w.Error = "missing-token"
			return "write " + w.Value + " stale->other failure"
		}
	}
	return "none"
}

// cvRenumberAfter moves the operations of w's process that follow w to a
// fresh process, as a client that saw info would.
func cvRenumberAfter(h *historytest.SimHistory, w *historytest.SimOp) {
	fresh := 0
	for _, o := range h.Ops {
		fresh = max(fresh, o.Process+1)
	}
	for i := range h.Ops {
		if o := &h.Ops[i]; o.Process == w.Process && o.Call > w.Call {
			o.Process = fresh
		}
	}
}

// cvStats counts what the cross-validation compared.
type cvStats struct {
	histories int
	// per model: verdicts compared, by the oracle's answer
	valid, invalid, unknown map[string]int
	// withInfo counts register keys... histories whose register check had
	// unknown-outcome writes; staleInfo those that also had stale rejections.
	withInfo, staleInfo int
	// colleague counts comparisons with the project's own Porcupine path.
	colleague, colleagueUnknown int
}

func newCVStats() *cvStats {
	return &cvStats{valid: map[string]int{}, invalid: map[string]int{}, unknown: map[string]int{}}
}

func (st *cvStats) String() string {
	return fmt.Sprintf("%d histories; register: %d valid, %d invalid, %d oracle-unknown; issuer: %d valid, %d invalid; %d with info writes (%d also with stale rejections); project porcupine path compared on %d (%d unknown)",
		st.histories, st.valid[checkers.ModelRegister], st.invalid[checkers.ModelRegister], st.unknown[checkers.ModelRegister],
		st.valid[checkers.ModelIssuer], st.invalid[checkers.ModelIssuer], st.withInfo, st.staleInfo, st.colleague, st.colleagueUnknown)
}

// cvCheckOne checks one history with the fast checker, the reference oracle
// and (when withProject) the project's Porcupine path, and fails on any
// disagreement where a Porcupine answered.
func cvCheckOne(t testing.TB, events []history.Event, sem checkers.Semantics, desc string, withProject bool, st *cvStats) {
	t.Helper()
	refReg, refIss := cvOracle(t, events, sem, 5*time.Second)
	res, err := CheckEvents(events, sem)
	require.NoError(t, err)
	st.histories++
	info, stale := false, false
	for _, e := range events {
		info = info || (e.F == history.Write && e.Type == history.Info)
		stale = stale || (e.F == history.Write && e.Error == "stale")
	}
	if info {
		st.withInfo++
		if stale {
			st.staleInfo++
		}
	}
	fail := func(model, who string, ref, got checkers.Verdict, anomalies []checkers.Anomaly) {
		t.Fatalf("%s: %s says %s, fast says %s (%v)\nsemantics %+v\n%s\n%s",
			model, who, ref, got, anomalies, sem, desc, cvDumpEvents(events))
	}
	byModel := map[string]checkers.Result{}
	for _, r := range res {
		byModel[r.Model] = r
	}
	for model, ref := range map[string]checkers.Verdict{checkers.ModelRegister: refReg, checkers.ModelIssuer: refIss} {
		got := byModel[model]
		switch ref {
		case checkers.Unknown:
			st.unknown[model]++
			continue
		case checkers.Valid:
			st.valid[model]++
		case checkers.Invalid:
			st.invalid[model]++
		}
		if got.Verdict != ref {
			fail(model, "reference porcupine", ref, got.Verdict, got.Anomalies)
		}
		if ref == checkers.Invalid {
			require.NotEmpty(t, got.Anomalies, "%s: invalid without an explanation\n%s", model, desc)
		}
	}
	if !withProject {
		return
	}
	ops, err := history.Pair(events)
	require.NoError(t, err)
	for _, r := range porcupine.New(5*time.Second).Check(context.Background(), history.OpsOf(ops), sem) {
		st.colleague++
		if r.Verdict == checkers.Unknown {
			st.colleagueUnknown++
			continue
		}
		if got := byModel[r.Model]; got.Verdict != r.Verdict {
			fail(r.Model, "project porcupine", r.Verdict, got.Verdict, got.Anomalies)
		}
	}
}

func cvDumpEvents(events []history.Event) string {
	s := ""
	for _, e := range events {
		s += fmt.Sprintf("%d t=%d p=%d %s %s %s tok=%q val=%q err=%q\n", e.Index, e.Time, e.Process, e.Type, e.F, e.Key, e.Token, e.Value, e.Error)
	}
	return s
}

// TestCrossValidateFastWithPorcupine: thousands of small random histories,
// valid and corrupted, must get the same verdict from the fast checker and
// from Porcupine (the reference oracle on all, the project's Porcupine path
// on every tenth).
func TestCrossValidateFastWithPorcupine(t *testing.T) {
	n := cvN
	if testing.Short() {
		n = 1000
	}
	st := newCVStats()
	for seed := uint64(1); seed <= uint64(n); seed++ {
		events, sem, desc := cvRandomHistory(seed)
		cvCheckOne(t, events, sem, fmt.Sprintf("seed %d: %s", seed, desc), seed%10 == 0, st)
	}
	t.Log(st)
	require.Greater(t, st.invalid[checkers.ModelRegister], n/10, "the generator must produce enough invalid histories to mean something")
	require.Greater(t, st.valid[checkers.ModelRegister], n/10)
	require.Greater(t, st.invalid[checkers.ModelIssuer], n/100)
	require.Greater(t, st.staleInfo, n/20)
}

var cvN = 10000

var cvChaosOnly bool

// No anomaly is visible before the history is invalid: the history as it
// stood at each register anomaly's time (what was called by then, what
// had returned by then; the rest of unknown outcome) is invalid by the
// oracle too. Before the explanations' times were checked against the
// key's prefixes, a general explanation could be dated by the few
// operations it named, seconds before the read that made them
// unjustifiable (a 15 s run: 1.08 s for a key invalid from 4.77 s).
func TestCrossValidateAnomalyTimes(t *testing.T) {
	n := 3000
	if testing.Short() {
		n = 500
	}
	checked := 0
	for seed := uint64(1); seed <= uint64(n); seed++ {
		events, sem, desc := cvRandomHistory(seed)
		res, err := CheckEvents(events, sem)
		require.NoError(t, err)
		for _, a := range res[0].Anomalies {
			if a.Finding {
				continue
			}
			var prefix []history.Event
			for _, e := range events {
				if e.Time <= a.At {
					prefix = append(prefix, e)
				}
			}
			reg, _ := cvOracle(t, prefix, sem, 5*time.Second)
			require.NotEqual(t, checkers.Valid, reg, "seed %d (%s): %s %s said visible at %d, where the oracle finds the history valid\n%s",
				seed, desc, a.Kind, a.Text, a.At, cvDumpEvents(prefix))
			checked++
		}
	}
	require.Greater(t, checked, n/20, "enough anomalies to mean something")
}
