// Package direct holds the direct checks: sound, fast checks of the
// fenced-register and issuer models that name each anomaly in words, with
// the operations involved and the history time it became visible
// (explain.go words them).
package direct

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/history"
)

// The direct checks name anomalies in words, with the operations involved and
// the history time at which the history first showed each one.
//
// They are sound but not complete: every anomaly they report is a pair (or
// triple) of operations that no linearization of the fenced-register or
// issuer model can explain, so a linearizable history never gets one; but a
// history can be non-linearizable without any of these simple patterns
// (Porcupine and the fast checker decide completeness). Soundness rests on
// three facts of the models:
//
//   - a write known to have taken effect by time T (accepted and returned by
//     T, or its value read by a read that returned by T) is linearized
//     before T, and before every operation invoked after T;
//   - accepted writes are linearized in increasing token order (strictly,
//     under equal=reject), because each sets the high-water mark to its
//     token and the next must be newer;
//   - a write that was invoked after time T is linearized after T.
//
// Only facts visible in the history are used: an info write counts as
// applied only when a read returned its value.

// writeFact is what the history tells about one write.
type writeFact struct {
	op *dop
	// appliedBy is the earliest history time by which the write is known to
	// have taken effect (Never: not known to have).
	appliedBy int64
	// observer is the read that proved it took effect, when that read
	// returned before the write did (or the write's outcome is unknown).
	observer *dop
	// readBroken is set when a read of this value is itself an anomaly
	// (rejected write, future read): the write is then left out of the
	// ordering checks, so one fault is not reported many times over.
	readBroken bool
}

func (f *writeFact) applied() bool { return f.appliedBy != history.Never }

// factOps are the operations a fact rests on: the write, and the read that
// proved it took effect.
func (f *writeFact) factOps() []int64 {
	if f.observer != nil {
		return []int64{f.op.ID, f.observer.ID}
	}
	return []int64{f.op.ID}
}

// issuedTokens is what every acquire in the history returned.
type issuedTokens struct {
	any bool
	max uint64
	raw map[string]bool
}

func (iss *issuedTokens) collect(acquires []*dop) {
	for _, a := range acquires {
		if a.Token.State != history.TokenValid {
			continue
		}
		if !iss.any || a.Token.N > iss.max {
			iss.max = a.Token.N
		}
		iss.any = true
		iss.raw[a.Token.Raw] = true
	}
}

// anomalySink collects anomalies for one model.
type anomalySink struct {
	model string
	key   string
	out   []checkers.Anomaly
	ops   *history.Ops
}

// full is the whole operation o was copied from, for the words of an
// anomaly.
func (s *anomalySink) full(o *dop) *history.Op {
	op := s.ops.At(int(o.pos))
	return &op
}

func (s *anomalySink) add(kind string, at int64, text string, ops ...int64) {
	s.out = append(s.out, checkers.Anomaly{Kind: kind, Model: s.model, Key: s.key, Text: text, Ops: ops, At: at,
		Finding: kind == checkers.KindTokensNotAuthenticated})
}

func maxTime(ts ...int64) int64 {
	m := ts[0]
	for _, t := range ts[1:] {
		if t > m {
			m = t
		}
	}
	return m
}

// Checker runs the direct checks (the analysis's Checker): always on, sound
// for both models, and complete for the issuer (see issuerAnomalies). Its
// violations are proofs: each names the two or three operations no
// linearization can explain.
type Checker struct{}

// New returns the direct checks.
func New() *Checker { return &Checker{} }

// Name is "direct".
func (*Checker) Name() string { return checkers.CheckerDirect }

// Check runs the direct checks and returns one Result per model. ctx is
// honoured between keys: an interrupted check answers Unknown.
func (*Checker) Check(ctx context.Context, ops *history.Ops, sem checkers.Semantics) []checkers.Result {
	return check(ctx, checkers.Group(ops, sem), sem)
}

// notFound says whether an ok read answered 404 (no value, no token): the
// key was never written. A read that answered 200 with an empty body and a
// token saw an empty value stored with that token.
func notFound(r *dop) bool { return r.Value == "" && r.Token.State == history.TokenNone }

func check(ctx context.Context, h *checkers.ByKey, sem checkers.Semantics) []checkers.Result {
	// The issuer first: its acquires are what the register's forgery rule
	// needs (issuedTokens), one key's copies at a time (no anomaly keeps
	// an operation).
	cp := copier{ops: h.Ops(), largest: h.LargestKey(), auth: h.Issued, sem: sem}
	start := time.Now()
	iss := issuedTokens{raw: map[string]bool{}}
	isr := checkers.Result{Checker: checkers.CheckerDirect, Model: checkers.ModelIssuer, Keys: len(h.IssuerKeys), Proofs: true, Complete: true}
	for _, k := range h.IssuerKeys {
		if ctx.Err() != nil {
			break
		}
		acqs, _ := cp.copy(h.IssuerAt(k), nil)
		iss.collect(acqs)
		isr.Ops += len(acqs)
		isr.Anomalies = append(isr.Anomalies, issuerAnomalies(cp.ops, k, acqs)...)
	}
	isr.Duration = time.Since(start)

	start = time.Now()
	reg := checkers.Result{Checker: checkers.CheckerDirect, Model: checkers.ModelRegister, Keys: len(h.RegisterKeys), Proofs: true}
	for _, k := range h.RegisterKeys {
		if ctx.Err() != nil {
			break
		}
		w, r := h.RegisterAt(k)
		writes, reads := cp.copy(w, r)
		reg.Ops += len(writes) + len(reads)
		reg.Anomalies = append(reg.Anomalies, registerAnomalies(cp.ops, k, writes, reads, sem, iss)...)
	}
	reg.Duration = time.Since(start)

	out := []checkers.Result{reg, isr}
	for i := range out {
		r := &out[i]
		switch {
		case ctx.Err() != nil:
			r.Verdict, r.Reason = checkers.Unknown, "direct checks interrupted: "+ctx.Err().Error()
		case checkers.HasViolation(r.Anomalies):
			r.Verdict = checkers.Invalid
		case r.Model == checkers.ModelIssuer:
			r.Verdict = checkers.Valid
			r.Reason = "no anomaly found (for the issuer the direct checks are complete)"
		default:
			r.Verdict = checkers.Valid
			r.Reason = "no anomaly found (the direct checks are sound, not complete: see porcupine/fast)"
		}
		checkers.CapAnomalies(r, checkers.MaxAnomaliesPerKind)
	}
	return out
}

// registerAnomalies checks one key of the fenced register. writes are all
// writes on the key (any outcome), reads the ok reads.
func registerAnomalies(ops *history.Ops, key string, writes, reads []*dop, sem checkers.Semantics, iss issuedTokens) []checkers.Anomaly {
	sink := &anomalySink{model: checkers.ModelRegister, key: key, ops: ops}
	facts := make([]*writeFact, 0, len(writes))
	// Values identify writes only when unique (the workloads make them so).
	// A value written twice (a retry reusing it) tells nothing for sure:
	// reads of it are left out of the value-based checks. (An empty value
	// is a value like any other: a read of it answered 200 with a token.)
	byValue := make(map[string]*writeFact, len(writes))
	ambiguous := map[string]bool{}
	slab := make([]writeFact, len(writes)) // one allocation, not one per write
	for i, w := range writes {
		f := &slab[i]
		*f = writeFact{op: w, appliedBy: history.Never}
		if w.Outcome == history.OutcomeOk {
			f.appliedBy = w.Return
		}
		facts = append(facts, f)
		n := len(byValue)
		if byValue[w.Value] = f; len(byValue) == n {
			ambiguous[w.Value] = true // the map did not grow: written before
		}
	}

	// What each read's value says about its write. readFact[i] is
	// byValue[reads[i].Value] where it was looked up (the same conditions
	// as in the last pass): one lookup per read, not two.
	readFact := make([]*writeFact, len(reads))
	for i, r := range reads {
		if r.Token.State != history.TokenValid && !notFound(r) {
			what := fmt.Sprintf("the value %q without a token", r.Value)
			if r.Token.State == history.TokenMalformed {
				what = fmt.Sprintf("%s", r.Token)
			}
			sink.add(checkers.KindReadWithoutToken, r.Completed,
				fmt.Sprintf("%s answered 200 at %s with %s: a 200 carries the token of the write that stored the value (a key never written answers 404)", nameRead(r), checkers.Secs(r.Return), what), r.ID)
			// Its value still says which write took effect.
		}
		if notFound(r) || len(ambiguous) > 0 && ambiguous[r.Value] {
			continue
		}
		f := byValue[r.Value]
		readFact[i] = f
		if f == nil {
			sink.add(checkers.KindPhantomRead, r.Completed,
				fmt.Sprintf("%s returned %q at %s, a value no write in the history wrote", nameRead(r), r.Value, checkers.Secs(r.Return)), r.ID)
			continue
		}
		w := f.op
		switch {
		case w.Call > r.Return:
			f.readBroken = true
			sink.add(checkers.KindFutureRead, maxTime(r.Completed, w.Call),
				fmt.Sprintf("%s %s at %s, but %s of that value was only invoked at %s", nameRead(r), readResult(r), checkers.Secs(r.Return), nameWrite(w), checkers.Secs(w.Call)),
				r.ID, w.ID)
			continue
		case w.Outcome == history.OutcomeFail:
			f.readBroken = true
			sink.add(checkers.KindReadOfRejectedWrite, maxTime(r.Completed, w.Completed),
				fmt.Sprintf("%s %s at %s, the value of %s, which the resource rejected (%s) at %s", nameRead(r), readResult(r), checkers.Secs(r.Return), nameWrite(w), w.Error, checkers.Secs(w.Return)),
				r.ID, w.ID)
			continue
		}
		if r.Token.State == history.TokenValid && (w.Token.State != history.TokenValid || w.Token.N != r.Token.N) {
			sink.add(checkers.KindReadTokenMismatch, r.Completed,
				fmt.Sprintf("%s %s at %s, but %s carried %s", nameRead(r), readResult(r), checkers.Secs(r.Return), nameWrite(w), tokenNum(w.Token)),
				r.ID, w.ID)
		}
		if r.Return < f.appliedBy {
			f.appliedBy, f.observer = r.Return, r
		}
	}

	// Writes that took effect must have carried a valid (sealed) token.
	for _, f := range facts {
		if !f.applied() || f.readBroken {
			continue
		}
		w := f.op
		// Worded only for an anomaly: most writes have none.
		lead := func() string { return nameWrite(w) + " " + tokenPhrase(sink.full(w)) + " " + appliedPhrase(f) }
		switch {
		case w.Token.State == history.TokenNone:
			sink.add(checkers.KindMissingTokenAccepted, f.appliedBy, lead()+": a write without a token must be rejected", f.factOps()...)
		case w.Token.State == history.TokenMalformed:
			sink.add(checkers.KindMalformedTokenAccepted, f.appliedBy, lead()+": a malformed token must be rejected", f.factOps()...)
		case sem.Authenticated && w.Token.Seal == "":
			sink.add(checkers.KindForgedTokenAccepted, f.appliedBy, lead()+": the token carries no seal, and the target declares authenticated tokens", f.factOps()...)
		case sem.Authenticated && !w.authentic:
			sink.add(checkers.KindForgedTokenAccepted, f.appliedBy, fmt.Sprintf("%s: no acquire returned the sealed token %s (nor had one whose answer was lost been invoked before), and the target declares authenticated tokens", lead(), w.Token.Raw), f.factOps()...)
		case !sem.Authenticated && iss.any && w.Token.N > iss.max && !iss.raw[w.Token.Raw]:
			text := fmt.Sprintf("%s: no acquire ever returned token %d (the highest issued was %d)", lead(), w.Token.N, iss.max)
			if sem.Authenticated {
				sink.add(checkers.KindForgedTokenAccepted, f.appliedBy, text+", and the target declares authenticated tokens", f.factOps()...)
			} else {
				sink.add(checkers.KindTokensNotAuthenticated, f.appliedBy, text+": the target does not authenticate tokens, anyone can forge one", f.factOps()...)
			}
		}
	}

	// Applied writes with valid tokens, in the order they became known.
	var applied []*writeFact
	for _, f := range facts {
		if f.applied() && !f.readBroken && f.op.authentic {
			applied = append(applied, f)
		}
	}
	sort.SliceStable(applied, func(i, j int) bool {
		if applied[i].appliedBy != applied[j].appliedBy {
			return applied[i].appliedBy < applied[j].appliedBy
		}
		return applied[i].op.ID < applied[j].op.ID
	})
	// maxTok[i] / maxCall[i]: index in applied[:i+1] of the highest token /
	// latest invocation (earliest such on ties).
	maxTok := make([]int, len(applied))
	maxCall := make([]int, len(applied))
	for i, f := range applied {
		maxTok[i], maxCall[i] = i, i
		if i > 0 {
			if p := applied[maxTok[i-1]]; p.op.Token.N >= f.op.Token.N {
				maxTok[i] = maxTok[i-1]
			}
			if p := applied[maxCall[i-1]]; p.op.Call >= f.op.Call {
				maxCall[i] = maxCall[i-1]
			}
		}
	}
	// knownBefore is how many applied writes were known to have taken
	// effect strictly before time t.
	knownBefore := func(t int64) int {
		return sort.Search(len(applied), func(i int) bool { return applied[i].appliedBy >= t })
	}

	// Accepted writes must be newer than every write accepted before they
	// began.
	reported := map[*writeFact]bool{}
	for _, b := range applied {
		j := knownBefore(b.op.Call)
		if j == 0 {
			continue
		}
		a := applied[maxTok[j-1]]
		if a == b {
			continue
		}
		kind := ""
		switch {
		case a.op.Token.N > b.op.Token.N:
			kind = checkers.KindStaleWriteAccepted
		case a.op.Token.N == b.op.Token.N && sem.Equal != checkers.EqualAccept:
			kind = checkers.KindReplayAccepted
		default:
			continue
		}
		reported[b] = true
		sink.add(kind, maxTime(b.appliedBy, a.appliedBy),
			fmt.Sprintf("%s with token %s %s after %s with token %s %s, before the later write began (%s)",
				nameWrite(b.op), b.op.Token.Raw, appliedPhrase(b), nameWrite(a.op), a.op.Token.Raw, appliedPhrase(a), checkers.Secs(b.op.Call)),
			append(b.factOps(), a.factOps()...)...)
	}
	// Under equal=reject no two writes may take effect with one token, even
	// concurrent ones: whichever came second met a high-water mark equal to
	// its token.
	if sem.Equal != checkers.EqualAccept {
		firstOf := make(map[uint64]*writeFact, len(applied)) // per token, the first in applied order
		for i := len(applied) - 1; i >= 0; i-- {
			firstOf[applied[i].op.Token.N] = applied[i]
		}
		for _, f := range applied { // in applied order: deterministic output
			first := firstOf[f.op.Token.N]
			if first == f || reported[f] {
				continue
			}
			reported[f] = true
			sink.add(checkers.KindReplayAccepted, maxTime(f.appliedBy, first.appliedBy),
				fmt.Sprintf("%s with token %s %s, and %s with the same token %s: under equal=reject a token admits one write only",
					nameWrite(f.op), f.op.Token.Raw, appliedPhrase(f), nameWrite(first.op), appliedPhrase(first)),
				append(f.factOps(), first.factOps()...)...)
		}
	}

	// A stale rejection needs a write with a token at least as new (newer,
	// under accept) that may have taken effect before the rejection
	// returned: any write not definitely rejected, invoked by then.
	var could []*dop
	for _, w := range writes {
		if w.Outcome != history.OutcomeFail && w.authentic {
			could = append(could, w)
		}
	}
	sort.SliceStable(could, func(i, j int) bool { return could[i].Call < could[j].Call })
	couldMax := make([]int, len(could))
	for i, w := range could {
		couldMax[i] = i
		if i > 0 && could[couldMax[i-1]].Token.N >= w.Token.N {
			couldMax[i] = couldMax[i-1]
		}
	}
	justifies := func(t, by uint64) bool {
		return by > t || (by == t && sem.Equal != checkers.EqualAccept)
	}
	// Only the rejection of a token that could be accepted claims anything
	// (under authenticated semantics an unsealed or forged token must be
	// rejected, whatever the error word).
	nFailed, nStale := 0, 0 // counted first: each list made once
	for _, w := range writes {
		if w.Outcome == history.OutcomeFail && w.authentic {
			nFailed++
			if w.Error == "stale" {
				nStale++
			}
		}
	}
	stale := make([]*dop, 0, nStale) // definite stale rejections of authentic tokens, by return
	failed := make([]*dop, 0, nFailed)
	for _, w := range writes {
		if w.Outcome == history.OutcomeFail && w.authentic {
			failed = append(failed, w)
			if w.Error == "stale" {
				stale = append(stale, w)
			}
		}
	}
	highWaterAnomalies(sink, stale, could, writes, sem)
	sort.SliceStable(stale, func(i, j int) bool { return stale[i].Return < stale[j].Return })
	sort.SliceStable(failed, func(i, j int) bool { return failed[i].Call < failed[j].Call })
	// Writes that could have justified a rejection but were rejected
	// themselves: the history shows the rejection unjustified only once
	// their rejections are in. seen answers "latest completion among
	// rejected writes invoked by now with a token ≥ t" (> t under accept).
	seen := newSuffixMax(failed)
	next := 0
	for _, w := range stale {
		for next < len(failed) && failed[next].Call <= w.Return {
			seen.add(failed[next].Token.N, failed[next].Completed)
			next++
		}
		t := w.Token.N
		j := sort.Search(len(could), func(i int) bool { return could[i].Call > w.Return })
		var best *dop
		if j > 0 {
			best = could[couldMax[j-1]]
		}
		if best != nil && justifies(t, best.Token.N) {
			continue
		}
		from := t
		if sem.Equal == checkers.EqualAccept {
			from = t + 1 // t = MaxUint64 cannot be justified under accept at all
		}
		at := w.Completed
		if from >= t {
			at = maxTime(at, seen.from(from))
		}
		hw := ""
		if w.HighWater != "" {
			hw = fmt.Sprintf(" (the target reported high-water %s)", w.HighWater)
		}
		why := "no write had been invoked on the key before then"
		ops := []int64{w.ID}
		if best != nil {
			why = fmt.Sprintf("the highest token any write invoked before then could have set was %s (%s)", best.Token.Raw, nameWrite(best))
			ops = append(ops, best.ID)
		}
		sink.add(checkers.KindFalseStaleRejection, at,
			fmt.Sprintf("%s with token %s was rejected as stale at %s%s, but no write with a token %s %s could have taken effect before: %s",
				nameWrite(w), w.Token.Raw, checkers.Secs(w.Return), hw, orEqual(sem), w.Token.Raw, why), ops...)
	}

	// A read must not return a value older than one known to have taken
	// effect before the read began.
	for i, r := range reads {
		j := knownBefore(r.Call)
		if j == 0 {
			continue
		}
		if r.Token.State != history.TokenValid && !notFound(r) {
			continue // reported above
		}
		if !notFound(r) && ambiguous[r.Value] {
			continue
		}
		if notFound(r) {
			first := applied[0]
			sink.add(checkers.KindStaleRead, r.Completed,
				fmt.Sprintf("%s %s at %s, but %s with token %s %s, before the read began (%s)",
					nameRead(r), readResult(r), checkers.Secs(r.Return), nameWrite(first.op), first.op.Token.Raw, appliedPhrase(first), checkers.Secs(r.Call)),
				append([]int64{r.ID}, first.factOps()...)...)
			continue
		}
		f := readFact[i]
		if f == nil || f.readBroken {
			continue
		}
		wv := f.op
		var newer *writeFact
		// Invoked after wv returned: linearized after wv whatever the tokens.
		if c := applied[maxCall[j-1]]; wv.Outcome == history.OutcomeOk && c.op.Call > wv.Return {
			newer = c
		} else if m := applied[maxTok[j-1]]; wv.Token.State == history.TokenValid && m.op.Token.N > wv.Token.N && m.appliedBy >= wv.Call {
			// A newer token is linearized after wv in any legal order. (When
			// m was known before wv began, wv itself is the stale write, and
			// it is reported as such.)
			newer = m
		}
		if newer == nil {
			continue
		}
		sink.add(checkers.KindStaleRead, r.Completed,
			fmt.Sprintf("%s %s at %s, but %s with token %s %s, before the read began (%s)",
				nameRead(r), readResult(r), checkers.Secs(r.Return), nameWrite(newer.op), newer.op.Token.Raw, appliedPhrase(newer), checkers.Secs(r.Call)),
			append([]int64{r.ID, wv.ID}, newer.factOps()...)...)
	}
	return sink.out
}

// highWaterAnomalies checks what each stale rejection's high_water claims
// (fencing/PROTOCOL.md): a mark the resource really had during the request,
// so a token number, at or above the rejected token (above it under
// equal=accept), carried by a write that could have been accepted before
// the rejection returned. could are the writes not definitely rejected,
// with authentic tokens, by call.
func highWaterAnomalies(sink *anomalySink, stale, could, writes []*dop, sem checkers.Semantics) {
	var firstCall map[uint64]int64 // per token, the earliest call of a write in could
	for _, w := range stale {
		if w.HighWater == "" {
			continue
		}
		hw := history.ParseToken(w.HighWater)
		// Worded only for an anomaly: most rejections have none.
		lead := func() string {
			return fmt.Sprintf("%s with token %s was rejected as stale at %s with high-water %q", nameWrite(w), w.Token.Raw, checkers.Secs(w.Return), w.HighWater)
		}
		switch {
		case hw.State != history.TokenValid || hw.Seal != "":
			sink.add(checkers.KindWrongHighWater, w.Completed, lead()+", which is not a token number", w.ID)
			continue
		case hw.N < w.Token.N:
			sink.add(checkers.KindWrongHighWater, w.Completed, lead()+", below the rejected token: a mark below the token would have accepted it", w.ID)
			continue
		case hw.N == w.Token.N && sem.Equal == checkers.EqualAccept:
			sink.add(checkers.KindFalseStaleRejection, w.Completed, lead()+": under equal=accept a mark equal to the token accepts it", w.ID)
			continue
		}
		if firstCall == nil {
			firstCall = make(map[uint64]int64, len(could))
			for _, c := range could {
				if t, ok := firstCall[c.Token.N]; !ok || c.Call < t {
					firstCall[c.Token.N] = c.Call
				}
			}
		}
		if t, ok := firstCall[hw.N]; !ok || t > w.Return {
			// Visible once every write with that token invoked by then
			// has been rejected.
			at := w.Completed
			for _, o := range writes {
				if o.Call <= w.Return && o.Token.State == history.TokenValid && o.Token.N == hw.N {
					at = max(at, o.Completed)
				}
			}
			sink.add(checkers.KindWrongHighWater, at, fmt.Sprintf("%s, but no write with token %d that could have been accepted was invoked before then", lead(), hw.N), w.ID)
		}
	}
}

// issuerAnomalies checks the ok acquires of one token scope (a lock, or all
// locks for scope=global): each must return a valid token greater than every
// token returned by an acquire that completed before it began, and no token
// may be returned twice.
//
// For the issuer these checks are complete, not only sound: a scope's
// acquires are linearizable in the issuer model iff (1) every token is valid,
// (2) no token is returned twice and (3) A completed before B began implies
// token(A) < token(B). Necessity is the model. Sufficiency: list the
// acquires by token; by (2) the list is strictly increasing, so every step
// is legal, and by (3) it respects real time, so it is a linearization. The
// checks report exactly the violations of (1), (2) and (3): for (3) each B is
// compared with the largest token returned before B began. So the direct
// issuer verdict decides the issuer model, even where Porcupine times out.
func issuerAnomalies(ops *history.Ops, scope string, acquires []*dop) []checkers.Anomaly {
	sink := &anomalySink{model: checkers.ModelIssuer, key: scope, ops: ops}
	var valid []*dop
	for _, a := range acquires {
		if a.Token.State != history.TokenValid {
			sink.add(checkers.KindInvalidTokenIssued, a.Completed,
				fmt.Sprintf("%s succeeded at %s but returned %s", nameAcquire(sink.full(a)), checkers.Secs(a.Return), a.Token), a.ID)
			continue
		}
		valid = append(valid, a)
	}
	byReturn := append([]*dop(nil), valid...)
	sort.SliceStable(byReturn, func(i, j int) bool {
		if byReturn[i].Return != byReturn[j].Return {
			return byReturn[i].Return < byReturn[j].Return
		}
		return byReturn[i].ID < byReturn[j].ID
	})
	maxTok := make([]int, len(byReturn))
	for i, a := range byReturn {
		maxTok[i] = i
		if i > 0 && byReturn[maxTok[i-1]].Token.N >= a.Token.N {
			maxTok[i] = maxTok[i-1]
		}
	}
	reported := map[*dop]bool{}
	for _, b := range byReturn {
		j := sort.Search(len(byReturn), func(i int) bool { return byReturn[i].Return >= b.Call })
		if j == 0 {
			continue
		}
		a := byReturn[maxTok[j-1]]
		if a.Token.N < b.Token.N {
			continue
		}
		kind, verb := checkers.KindTokenRegression, "after token "+a.Token.Raw+" was returned"
		if a.Token.N == b.Token.N {
			kind, verb = checkers.KindDuplicateToken, "although the same token was already returned"
		}
		reported[b] = true
		sink.add(kind, b.Completed,
			fmt.Sprintf("token %s returned by %s at %s %s by %s at %s, before op %d began (%s)",
				b.Token.Raw, nameAcquire(sink.full(b)), checkers.Secs(b.Return), verb, nameAcquire(sink.full(a)), checkers.Secs(a.Return), b.ID, checkers.Secs(b.Call)),
			b.ID, a.ID)
	}
	// Concurrent acquires may return tokens in either order, but never the
	// same token: two holders would then be indistinguishable to the
	// resource.
	firstOf := make(map[uint64]*dop, len(byReturn)) // per token, the first in byReturn
	for i := len(byReturn) - 1; i >= 0; i-- {
		firstOf[byReturn[i].Token.N] = byReturn[i]
	}
	for _, b := range byReturn {
		a := firstOf[b.Token.N]
		if a == b || reported[b] {
			continue
		}
		reported[b] = true
		sink.add(checkers.KindDuplicateToken, b.Completed,
			fmt.Sprintf("token %s returned by %s at %s was also returned by the concurrent %s at %s: two holders share one token",
				b.Token.Raw, nameAcquire(sink.full(b)), checkers.Secs(b.Return), nameAcquire(sink.full(a)), checkers.Secs(a.Return)),
			b.ID, a.ID)
	}
	return sink.out
}

// suffixMax is a Fenwick tree over the distinct tokens of some writes,
// holding per token the latest completion time added: add(token, time), and
// from(t) = the latest time added for any token ≥ t (-1 if none).
type suffixMax struct {
	toks []uint64 // distinct, descending: index 1 is the largest
	tree []int64
}

func newSuffixMax(ops []*dop) *suffixMax {
	toks := make([]uint64, 0, len(ops))
	for _, o := range ops {
		toks = append(toks, o.Token.N)
	}
	sort.Slice(toks, func(i, j int) bool { return toks[i] > toks[j] })
	out := toks[:0]
	for i, t := range toks {
		if i == 0 || t != toks[i-1] {
			out = append(out, t)
		}
	}
	tree := make([]int64, len(out)+1)
	for i := range tree {
		tree[i] = -1
	}
	return &suffixMax{toks: out, tree: tree}
}

// rank is the 1-based position of the smallest stored token ≥ t (0: none).
func (s *suffixMax) rank(t uint64) int {
	return sort.Search(len(s.toks), func(i int) bool { return s.toks[i] < t })
}

func (s *suffixMax) add(tok uint64, at int64) {
	for i := s.rank(tok); i > 0 && i < len(s.tree); i += i & -i {
		s.tree[i] = max(s.tree[i], at)
	}
}

func (s *suffixMax) from(t uint64) int64 {
	best := int64(-1)
	for i := s.rank(t); i > 0; i -= i & -i {
		best = max(best, s.tree[i])
	}
	return best
}
