package porcupine

import (
	"math"
	"sort"

	porc "github.com/anishathalye/porcupine"
	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/history"
)

// Porcupine models of the fenced register and the issuer.
//
// Each key (each lock, for the issuer; everything, for scope=global) is
// checked on its own: the register's keys are independent objects, so a
// history is linearizable iff every key's sub-history is, and a per-key
// search is exponential only in that key's concurrency.
//
// Porcupine's search is exponential in the number of operations that are
// concurrent at once, and an operation whose outcome is unknown is concurrent
// with everything after its call. These reductions keep keys tractable; each
// is exact (the reduced history is linearizable iff the original is), which
// TestReductionsExactAndDirectChecksSound checks against the plain model:
//
//  1. Reads that failed or timed out constrain nothing: dropped. Definitely
//     rejected writes other than "stale" ones (missing/malformed/forged token,
//     4xx) are no-ops in every linearization: dropped. So are acquires that
//     failed or timed out (a lost token constrains no observed token).
//  2. A write with an unknown outcome gets Return = ∞ (after every other
//     operation) and a deterministic step: "applies iff the resource should
//     accept it there". Not applying at point p is equivalent to being
//     linearized last (a no-op there and then), which the infinite return
//     allows, so both outcomes are covered without a nondeterministic model.
//  3. An unknown-outcome write that no read observed is dropped unless it
//     could justify some stale rejection (a rejection of token t returning
//     after the write's call, with t ≤ its token under reject, t < its token
//     under accept). Proof that dropping it loses no linearization: take a
//     linearization where it applied. Until the next accepted write, no read
//     can follow (it would return the dropped write's value, which no read
//     did) and every rejection there is justified by another write (the
//     dropped one's token is too small to matter); the next accepted write is
//     accepted on a lower high-water too, and sets the same state. Removing
//     it gives a linearization of the reduced history. A rejection that is
//     certainly justified (by a write known to have taken effect before the
//     rejection began, with a token at least as new) needs no other write,
//     so only the uncertain ones keep unknown writes alive.
//  4. A write whose unique value a read returned took effect by that read's
//     return: its Return becomes the earliest such read's return (an info
//     write's ∞ included). Every linearization places it before that read
//     anyway, so this only drops orders that were never legal. Likewise, once
//     a write with a token ≥ u (> u under accept) is known to have taken
//     effect (returned ok, or was read), a write with token u can no longer
//     take effect: an accepted one must come before, and an unknown one
//     placed later is a no-op, which it also is right after that write. So
//     its Return becomes that time (or its call, if earlier). This bounds
//     most unknown-outcome writes, which would otherwise stay pending to
//     the end and prevent every cut below.
//
// Segments (reduction 5). Porcupine's memory grows with the square of a
// partition's length (a bitset of all operations per cached state), so each
// key is cut, at quiescent moments, into segments checked as separate
// Porcupine partitions. A cut lies between two operations when everything
// invoked before it has returned before it, and only where the state there
// is forced: accepted writes are linearized in increasing token order, so a
// linearizable prefix ends in the state of the applied write with the
// highest token (under accept, one such write that follows all other writes
// with that token in real time must exist, else no cut there). "Applied"
// means checked to apply inside its own segment: accepted writes, and
// unknown-outcome writes whose reading read shares their segment (their
// Return is that read's, so no cut separates them); an unknown write that
// may or may not have applied keeps the cut away until it is fenced off
// (reduction 4) by a higher token, which then holds the state. The next
// segment starts with a "set state" pseudo-operation, strictly before all of
// its operations, that carries this state over. The key is linearizable iff
// every segment is: linearizations of the segments concatenate (all of one
// segment's operations precede the next one's in real time), and any
// linearization of the key splits into them. The issuer is cut the same way,
// carrying the highest token.

// porcItem is an operation on its way to Porcupine.
type porcItem struct {
	op        *history.Op
	call, ret int64 // ret: Never for unknown outcomes
	// applied: a write certainly applied (ok, or its value read), with a
	// valid token: it shapes the state forced at a cut.
	applied bool
	build   func(seg int) porc.Operation
}

// registerOperations turns one key's writes (any outcome) and ok reads into
// porcupine operations, applying the reductions above.
func registerOperations(writes, reads []*history.Op, sem checkers.Semantics, issued *checkers.Issued) []porc.Operation {
	accept := sem.Equal == checkers.EqualAccept
	if issued == nil {
		issued = checkers.NewIssued()
	}
	valid := func(w *history.Op) bool { return issued.Authentic(w, sem) }
	// Tokens that stale rejections report as the high-water mark: an
	// unknown write with such a token may be what a rejection saw, so
	// reduction 3 keeps it.
	reported := map[uint64]bool{}
	for _, w := range writes {
		if w.Outcome == history.OutcomeFail && w.Error == "stale" && w.HighWater != "" {
			if hw := history.ParseToken(w.HighWater); hw.State == history.TokenValid {
				reported[hw.N] = true
			}
		}
	}
	// Reads of each value; a value written once identifies its write.
	writers := make(map[string]int, len(writes))
	for _, w := range writes {
		writers[w.Value]++
	}
	observed := make(map[string]bool, len(reads))
	firstSeen := make(map[string]int64, len(reads))
	for _, r := range reads {
		if r.Token.State != history.TokenValid {
			continue // a 404 observes no write (and a 200 without a token is illegal)
		}
		observed[r.Value] = true
		if t, ok := firstSeen[r.Value]; !ok || r.Return < t {
			firstSeen[r.Value] = r.Return
		}
	}
	// seenBy is when a read proved w took effect (reduction 4), or Never.
	seenBy := func(w *history.Op) int64 {
		if t, ok := firstSeen[w.Value]; ok && porcReduce && writers[w.Value] == 1 && t >= w.Call {
			return t
		}
		return history.Never
	}

	// Writes known to have taken effect, by when; prefix maxima of their
	// tokens tell which rejections are certainly justified (reduction 3).
	type known struct {
		by  int64
		tok uint64
	}
	var knowns []known
	for _, w := range writes {
		if !valid(w) {
			continue
		}
		by := seenBy(w)
		if w.Outcome == history.OutcomeOk {
			by = min(by, w.Return)
		}
		if by != history.Never && w.Outcome != history.OutcomeFail {
			knowns = append(knowns, known{by, w.Token.N})
		}
	}
	sort.Slice(knowns, func(i, j int) bool { return knowns[i].by < knowns[j].by })
	knownMax := make([]uint64, len(knowns))
	for i, k := range knowns {
		knownMax[i] = k.tok
		if i > 0 {
			knownMax[i] = max(knownMax[i-1], k.tok)
		}
	}
	justifies := func(t, by uint64) bool { return by > t || (by == t && !accept) }
	// fencedBy is when a write with token u can no longer take effect: the
	// earliest time by which a write with a token that fences it off (≥ u,
	// > u under accept) is known to have taken effect (reduction 4).
	fencedBy := func(u uint64) int64 {
		i := sort.Search(len(knowns), func(i int) bool { return justifies(u, knownMax[i]) })
		if i == len(knowns) || !porcReduce {
			return history.Never
		}
		return knowns[i].by
	}
	// Uncertain stale rejections by return time, with the smallest token
	// among those returning at or after each point: an unobserved unknown
	// write with token u can matter iff one returning after its call has
	// t ≤ u (t < u under accept).
	type rej struct {
		ret int64
		tok uint64
	}
	var rejs []rej
	for _, w := range writes {
		if w.Outcome != history.OutcomeFail || w.Error != "stale" || !valid(w) {
			continue
		}
		i := sort.Search(len(knowns), func(i int) bool { return knowns[i].by >= w.Call })
		if i > 0 && justifies(w.Token.N, knownMax[i-1]) {
			continue // certainly justified
		}
		rejs = append(rejs, rej{w.Return, w.Token.N})
	}
	sort.Slice(rejs, func(i, j int) bool { return rejs[i].ret < rejs[j].ret })
	sufMin := make([]uint64, len(rejs)+1)
	sufMin[len(rejs)] = math.MaxUint64
	for i := len(rejs) - 1; i >= 0; i-- {
		sufMin[i] = min(sufMin[i+1], rejs[i].tok)
	}
	mayJustify := func(w *history.Op) bool {
		i := sort.Search(len(rejs), func(i int) bool { return rejs[i].ret >= w.Call })
		return i < len(rejs) && justifies(sufMin[i], w.Token.N)
	}

	ids := porcClientIDs{}
	items := make([]porcItem, 0, len(writes)+len(reads))
	for _, w := range writes {
		var res porcResult
		ret, seen := w.Return, seenBy(w)
		switch w.Outcome {
		case history.OutcomeOk:
			res = porcAccepted
			ret = min(ret, seen)
		case history.OutcomeFail:
			res = porcStale
			if w.Error != "stale" || !valid(w) {
				if porcReduce {
					continue // reduction 1
				}
				res = porcRejected
			}
		default:
			if porcReduce && !observed[w.Value] && (!valid(w) || (!mayJustify(w) && !reported[w.Token.N])) {
				continue // reduction 3
			}
			res = porcUnknown
			ret = seen
		}
		// A write proven applied by a read keeps that read's return: the
		// read must stay in its segment, for the segment check to verify
		// that the write could apply (the state carried over relies on it).
		if (res == porcAccepted || (res == porcUnknown && seen == history.Never)) && valid(w) {
			ret = max(w.Call, min(ret, fencedBy(w.Token.N)))
		}
		in := porcRegInput{Kind: porcWrite, Tok: w.Token.N, TokOK: w.Token.State == history.TokenValid,
			Authentic: valid(w), Value: w.Value, Op: w.ID}
		out := porcRegOutput{Result: res}
		if res == porcStale && w.HighWater != "" {
			hw := history.ParseToken(w.HighWater)
			out.HWGiven, out.HW, out.HWOK = true, hw.N, hw.State == history.TokenValid && hw.Seal == ""
		}
		client, call, meta := ids.of(w.Process), w.Call, porcOpMeta{w}
		items = append(items, porcItem{op: w, call: call, ret: ret,
			applied: valid(w) && (res == porcAccepted || (res == porcUnknown && seen != history.Never)),
			build: func(seg int) porc.Operation {
				in.Seg = seg
				return porc.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: returnTime(ret), Metadata: meta}
			}})
	}
	for _, r := range reads {
		out := porcRegOutput{Result: porcReadResult, Value: r.Value, Tok: r.Token.N, TokOK: r.Token.State == history.TokenValid,
			NoToken: r.Token.State == history.TokenNone}
		in, client, call, ret, meta := porcRegInput{Kind: porcRead, Op: r.ID}, ids.of(r.Process), r.Call, r.Return, porcOpMeta{r}
		items = append(items, porcItem{op: r, call: call, ret: ret, build: func(seg int) porc.Operation {
			in.Seg = seg
			return porc.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: returnTime(ret), Metadata: meta}
		}})
	}

	// The state forced at a cut: the applied write with the highest token.
	var holders []porcItem // applied writes with the highest token so far
	forced := func() (porcRegState, bool) {
		if len(holders) == 0 {
			return porcRegState{}, true
		}
		last := holders[len(holders)-1]
		if accept && len(holders) > 1 {
			// Under accept one of them must follow all the others.
			found := false
			for _, h := range holders {
				after := true
				for _, o := range holders {
					if o.op != h.op && o.ret >= h.call {
						after = false
						break
					}
				}
				if after {
					last, found = h, true
					break
				}
			}
			if !found {
				return porcRegState{}, false
			}
		}
		// Under reject, equal tokens make the history illegal whatever we
		// carry over.
		return porcRegState{Written: true, HW: last.op.Token.N, Value: last.op.Value}, true
	}
	note := func(it porcItem) {
		if !it.applied {
			return
		}
		if len(holders) > 0 && it.op.Token.N < holders[0].op.Token.N {
			return
		}
		if len(holders) > 0 && it.op.Token.N > holders[0].op.Token.N {
			holders = holders[:0]
		}
		holders = append(holders, it)
	}
	return segment(items, ids, note, func(seg int) (porc.Operation, bool) {
		st, ok := forced()
		if !ok {
			return porc.Operation{}, false
		}
		return porc.Operation{Input: porcRegInput{Kind: porcSetState, Seg: seg, Init: st},
			Output: porcRegOutput{}, Metadata: porcOpMeta{}}, true
	})
}

// segment orders items by call and cuts them into segments (reduction 5):
// before item i when every earlier item returned before it was invoked and
// start can carry the state over. note sees each item once it is placed.
// start returns the set-state operation (its ClientId, Call and Return are
// filled in here), or false when the state is not forced there.
func segment(items []porcItem, ids porcClientIDs, note func(porcItem), start func(seg int) (porc.Operation, bool)) []porc.Operation {
	sort.SliceStable(items, func(i, j int) bool { return items[i].call < items[j].call })
	out := make([]porc.Operation, 0, len(items)+1)
	seg := 0
	maxRet := int64(math.MinInt64)
	for i, it := range items {
		if porcReduce && i > 0 && maxRet < it.call {
			if op, ok := start(seg + 1); ok {
				seg++
				op.ClientId = ids.of(-1)
				op.Call, op.Return = it.call-1, it.call-1
				out = append(out, op)
			}
		}
		out = append(out, it.build(seg))
		maxRet = max(maxRet, it.ret)
		note(it)
	}
	return out
}

// issuerOperations turns one scope's ok acquires into porcupine operations.
func issuerOperations(acquires []*history.Op) []porc.Operation {
	ids := porcClientIDs{}
	items := make([]porcItem, 0, len(acquires))
	for _, a := range acquires {
		in := porcIssuerInput{Tok: a.Token.N, TokOK: a.Token.State == history.TokenValid, Lock: a.Key, Op: a.ID}
		client, call, ret, meta := ids.of(a.Process), a.Call, a.Return, porcOpMeta{a}
		items = append(items, porcItem{op: a, call: call, ret: ret, applied: in.TokOK, build: func(seg int) porc.Operation {
			in.Seg = seg
			return porc.Operation{ClientId: client, Input: in, Call: call, Return: returnTime(ret), Metadata: meta}
		}})
	}
	var highest uint64
	anyTok := false
	note := func(it porcItem) {
		if it.applied && (!anyTok || it.op.Token.N > highest) {
			highest, anyTok = it.op.Token.N, true
		}
	}
	return segment(items, ids, note, func(seg int) (porc.Operation, bool) {
		return porc.Operation{Input: porcIssuerInput{Seg: seg, SetState: true, Tok: highest, TokOK: anyTok}, Metadata: porcOpMeta{}}, true
	})
}
