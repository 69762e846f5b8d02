package models

import (
	"context"
	"fmt"
	"hash/maphash"
	"math"
	"runtime"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anishathalye/porcupine"
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

// porcOpKind distinguishes the register's operations.
type porcOpKind uint8

const (
	porcWrite porcOpKind = iota
	porcRead
	// porcSetState starts a segment with the state its predecessors forced.
	porcSetState
)

// porcRegInput is a register operation's input (porcupine.Operation.Input).
type porcRegInput struct {
	Kind   porcOpKind
	Tok    uint64
	TokOK  bool // a decimal token (sealed or not)
	Sealed bool
	Value  string
	// Op is the history index of the invoke, for descriptions only.
	Op int64
	// Seg is the operation's segment (its Porcupine partition).
	Seg int
	// Init is the state a porcSetState operation carries over.
	Init porcRegState
}

// porcResult is how a register operation ended.
type porcResult uint8

const (
	porcAccepted porcResult = iota
	porcStale
	porcUnknown
	porcReadResult
	// porcRejected: rejected for another reason than staleness; a no-op
	// (only kept when the reductions are off).
	porcRejected
)

// porcReduce switches the reductions on; tests switch them off to show that
// they do not change any verdict.
var porcReduce = true

// porcRegOutput is a register operation's output.
type porcRegOutput struct {
	Result porcResult
	// Value and Tok are what a read returned (Value "" = never written).
	Value string
	Tok   uint64
	TokOK bool
}

// porcRegState is the register's state. The token of the current value always
// equals the high-water mark (every accepted write sets both to its token),
// so one field holds both; Written distinguishes "never written" from
// token 0. Small and comparable: porcupine caches states by ==.
type porcRegState struct {
	Written bool
	HW      uint64
	Value   string
}

var porcStateSeed = maphash.MakeSeed()

func registerModel(sem Semantics, abort *abortFlag) porcupine.Model {
	accept := sem.Equal == EqualAccept
	auth := sem.Authenticated
	acceptable := func(s porcRegState, in porcRegInput) bool {
		if !in.TokOK || (auth && !in.Sealed) {
			return false
		}
		return !s.Written || in.Tok > s.HW || (accept && in.Tok == s.HW)
	}
	return porcupine.Model{
		Partition: porcPartition,
		Init:      func() interface{} { return porcRegState{} },
		StepContext: func(_ context.Context, state, input, output interface{}) (bool, interface{}) {
			if abort.stop() {
				return false, state
			}
			s, in, out := state.(porcRegState), input.(porcRegInput), output.(porcRegOutput)
			if in.Kind == porcSetState {
				return true, in.Init
			}
			if in.Kind == porcRead {
				if out.Value == "" && !out.TokOK {
					// Never written (or, should a write have stored an
					// empty value, that value).
					return !s.Written || s.Value == "", s
				}
				return s.Written && s.Value == out.Value && (!out.TokOK || out.Tok == s.HW), s
			}
			switch out.Result {
			case porcAccepted:
				if !acceptable(s, in) {
					return false, s
				}
				return true, porcRegState{Written: true, HW: in.Tok, Value: in.Value}
			case porcStale:
				// Only a valid, authentic token's rejection claims anything
				// about the high-water mark.
				if !in.TokOK || (auth && !in.Sealed) {
					return true, s
				}
				return !acceptable(s, in), s
			case porcRejected:
				return true, s
			default: // unknown outcome: see reduction 2
				if acceptable(s, in) {
					return true, porcRegState{Written: true, HW: in.Tok, Value: in.Value}
				}
				return true, s
			}
		},
		Hash: func(state interface{}) uint64 {
			s := state.(porcRegState)
			return maphash.String(porcStateSeed, s.Value) ^ (s.HW * 0x9e3779b97f4a7c15)
		},
		DescribeOperation: describePorcRegOp,
		DescribeState: func(state interface{}) string {
			s := state.(porcRegState)
			if !s.Written {
				return "never written"
			}
			return fmt.Sprintf("%s (token %d = high-water)", s.Value, s.HW)
		},
		DescribeOperationMetadata: describePorcMetadata,
	}
}

func describePorcRegOp(input, output interface{}) string {
	in, out := input.(porcRegInput), output.(porcRegOutput)
	if in.Kind == porcSetState {
		if !in.Init.Written {
			return fmt.Sprintf("segment %d starts: never written", in.Seg)
		}
		return fmt.Sprintf("segment %d starts: %s (token %d), forced by the segments before", in.Seg, in.Init.Value, in.Init.HW)
	}
	if in.Kind == porcRead {
		if out.Value == "" {
			return "read → never written"
		}
		if out.TokOK {
			return fmt.Sprintf("read → %s (token %d)", out.Value, out.Tok)
		}
		return "read → " + out.Value
	}
	tok := "no valid token"
	if in.TokOK {
		tok = "token " + strconv.FormatUint(in.Tok, 10)
		if in.Sealed {
			tok += " (sealed)"
		}
	}
	switch out.Result {
	case porcAccepted:
		return fmt.Sprintf("write %s, %s → accepted", in.Value, tok)
	case porcStale:
		return fmt.Sprintf("write %s, %s → stale", in.Value, tok)
	case porcRejected:
		return fmt.Sprintf("write %s, %s → rejected", in.Value, tok)
	}
	return fmt.Sprintf("write %s, %s → unknown (may apply)", in.Value, tok)
}

// porcOpMeta is porcupine metadata: the op, for the visualization's tooltips.
type porcOpMeta struct{ op *history.Op }

func describePorcMetadata(info interface{}) string {
	m, ok := info.(porcOpMeta)
	if !ok || m.op == nil {
		return ""
	}
	op := m.op
	s := fmt.Sprintf("op %d, process %d, %s", op.ID, op.Process, op.Outcome)
	if op.Error != "" {
		s += " (" + op.Error + ")"
	}
	if op.Tampered != "" {
		s += ", token tampered (" + op.Tampered + ", client sent " + strconv.Quote(op.SentByClient) + ")"
	}
	if op.Node != "" {
		s += ", node " + op.Node
	}
	return s
}

// porcIssuerState is the highest token returned so far.
type porcIssuerState struct {
	Any bool
	Max uint64
}

type porcIssuerInput struct {
	Tok   uint64
	TokOK bool
	Lock  string
	Op    int64
	Seg   int
	// SetState starts a segment: the highest token so far is Tok.
	SetState bool
}

// issuerModel: the issuer is a counter whose acquires return strictly
// increasing tokens in linearization order. Equivalently: each acquire's
// token exceeds every token returned by acquires that completed before it
// began, and no token is returned twice.
func issuerModel(abort *abortFlag) porcupine.Model {
	return porcupine.Model{
		Partition: porcPartition,
		Init:      func() interface{} { return porcIssuerState{} },
		StepContext: func(_ context.Context, state, input, _ interface{}) (bool, interface{}) {
			if abort.stop() {
				return false, state
			}
			s, in := state.(porcIssuerState), input.(porcIssuerInput)
			if in.SetState {
				return true, porcIssuerState{Any: in.TokOK, Max: in.Tok}
			}
			if !in.TokOK || (s.Any && in.Tok <= s.Max) {
				return false, s
			}
			return true, porcIssuerState{Any: true, Max: in.Tok}
		},
		DescribeOperation: func(input, _ interface{}) string {
			in := input.(porcIssuerInput)
			if in.SetState {
				if !in.TokOK {
					return fmt.Sprintf("segment %d starts: no token issued yet", in.Seg)
				}
				return fmt.Sprintf("segment %d starts: highest token so far %d", in.Seg, in.Tok)
			}
			if !in.TokOK {
				return fmt.Sprintf("acquire %s → no valid token", in.Lock)
			}
			return fmt.Sprintf("acquire %s → token %d", in.Lock, in.Tok)
		},
		DescribeState: func(state interface{}) string {
			s := state.(porcIssuerState)
			if !s.Any {
				return "no token issued"
			}
			return fmt.Sprintf("highest token %d", s.Max)
		},
		DescribeOperationMetadata: describePorcMetadata,
	}
}

// abortFlag lets the caller's context stop a search: porcupine passes its
// own context to StepContext, not ours. Once set, every step fails, the
// search collapses quickly, and the key is reported Unknown (never Illegal).
type abortFlag struct {
	ctx     context.Context
	n       atomic.Uint32
	aborted atomic.Bool
}

func (a *abortFlag) stop() bool {
	if a == nil {
		return false
	}
	if a.aborted.Load() {
		return true
	}
	if a.n.Add(1)&255 == 0 && a.ctx.Err() != nil {
		a.aborted.Store(true)
		return true
	}
	return false
}

// returnTime maps Never to the largest time porcupine can sort.
func returnTime(t int64) int64 {
	if t == history.Never {
		return math.MaxInt64
	}
	return t
}

// porcClientIDs numbers processes densely per key, for the visualization.
type porcClientIDs map[int]int

func (c porcClientIDs) of(p int) int {
	if id, ok := c[p]; ok {
		return id
	}
	c[p] = len(c)
	return c[p]
}

// porcPartition splits a key's operations into its segments.
func porcPartition(h []porcupine.Operation) [][]porcupine.Operation {
	var out [][]porcupine.Operation
	for _, op := range h {
		seg := 0
		switch in := op.Input.(type) {
		case porcRegInput:
			seg = in.Seg
		case porcIssuerInput:
			seg = in.Seg
		}
		for len(out) <= seg {
			out = append(out, nil)
		}
		out[seg] = append(out[seg], op)
	}
	return out
}

// porcItem is an operation on its way to Porcupine.
type porcItem struct {
	op        *history.Op
	call, ret int64 // ret: Never for unknown outcomes
	// applied: a write certainly applied (ok, or its value read), with a
	// valid token: it shapes the state forced at a cut.
	applied bool
	build   func(seg int) porcupine.Operation
}

// registerOperations turns one key's writes (any outcome) and ok reads into
// porcupine operations, applying the reductions above.
func registerOperations(writes, reads []*history.Op, sem Semantics) []porcupine.Operation {
	accept := sem.Equal == EqualAccept
	valid := func(w *history.Op) bool {
		return w.Token.State == history.TokenValid && (!sem.Authenticated || w.Token.Seal != "")
	}
	// Reads of each value; a value written once identifies its write.
	writers := make(map[string]int, len(writes))
	for _, w := range writes {
		writers[w.Value]++
	}
	observed := make(map[string]bool, len(reads))
	firstSeen := make(map[string]int64, len(reads))
	for _, r := range reads {
		observed[r.Value] = true
		if t, ok := firstSeen[r.Value]; !ok || r.Return < t {
			firstSeen[r.Value] = r.Return
		}
	}
	// seenBy is when a read proved w took effect (reduction 4), or Never.
	seenBy := func(w *history.Op) int64 {
		if t, ok := firstSeen[w.Value]; ok && porcReduce && w.Value != "" && writers[w.Value] == 1 && t >= w.Call {
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
		if w.Token.State != history.TokenValid {
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
		if w.Outcome != history.OutcomeFail || w.Error != "stale" || w.Token.State != history.TokenValid {
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
			if w.Error != "stale" || w.Token.State != history.TokenValid {
				if porcReduce {
					continue // reduction 1
				}
				res = porcRejected
			}
		default:
			if porcReduce && !observed[w.Value] && (!valid(w) || !mayJustify(w)) {
				continue // reduction 3
			}
			res = porcUnknown
			ret = seen
		}
		// A write proven applied by a read keeps that read's return: the
		// read must stay in its segment, for the segment check to verify
		// that the write could apply (the state carried over relies on it).
		if (res == porcAccepted || (res == porcUnknown && seen == history.Never)) && w.Token.State == history.TokenValid {
			ret = max(w.Call, min(ret, fencedBy(w.Token.N)))
		}
		in := porcRegInput{Kind: porcWrite, Tok: w.Token.N, TokOK: w.Token.State == history.TokenValid,
			Sealed: w.Token.Seal != "", Value: w.Value, Op: w.ID}
		client, call, out, meta := ids.of(w.Process), w.Call, porcRegOutput{Result: res}, porcOpMeta{w}
		items = append(items, porcItem{op: w, call: call, ret: ret,
			applied: valid(w) && (res == porcAccepted || (res == porcUnknown && seen != history.Never)),
			build: func(seg int) porcupine.Operation {
				in.Seg = seg
				return porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: returnTime(ret), Metadata: meta}
			}})
	}
	for _, r := range reads {
		out := porcRegOutput{Result: porcReadResult, Value: r.Value, Tok: r.Token.N, TokOK: r.Token.State == history.TokenValid}
		in, client, call, ret, meta := porcRegInput{Kind: porcRead, Op: r.ID}, ids.of(r.Process), r.Call, r.Return, porcOpMeta{r}
		items = append(items, porcItem{op: r, call: call, ret: ret, build: func(seg int) porcupine.Operation {
			in.Seg = seg
			return porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: returnTime(ret), Metadata: meta}
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
	return segment(items, ids, note, func(seg int) (porcupine.Operation, bool) {
		st, ok := forced()
		if !ok {
			return porcupine.Operation{}, false
		}
		return porcupine.Operation{Input: porcRegInput{Kind: porcSetState, Seg: seg, Init: st},
			Output: porcRegOutput{}, Metadata: porcOpMeta{}}, true
	})
}

// segment orders items by call and cuts them into segments (reduction 5):
// before item i when every earlier item returned before it was invoked and
// start can carry the state over. note sees each item once it is placed.
// start returns the set-state operation (its ClientId, Call and Return are
// filled in here), or false when the state is not forced there.
func segment(items []porcItem, ids porcClientIDs, note func(porcItem), start func(seg int) (porcupine.Operation, bool)) []porcupine.Operation {
	sort.SliceStable(items, func(i, j int) bool { return items[i].call < items[j].call })
	out := make([]porcupine.Operation, 0, len(items)+1)
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
func issuerOperations(acquires []*history.Op) []porcupine.Operation {
	ids := porcClientIDs{}
	items := make([]porcItem, 0, len(acquires))
	for _, a := range acquires {
		in := porcIssuerInput{Tok: a.Token.N, TokOK: a.Token.State == history.TokenValid, Lock: a.Key, Op: a.ID}
		client, call, ret, meta := ids.of(a.Process), a.Call, a.Return, porcOpMeta{a}
		items = append(items, porcItem{op: a, call: call, ret: ret, applied: in.TokOK, build: func(seg int) porcupine.Operation {
			in.Seg = seg
			return porcupine.Operation{ClientId: client, Input: in, Call: call, Return: returnTime(ret), Metadata: meta}
		}})
	}
	var highest uint64
	anyTok := false
	note := func(it porcItem) {
		if it.applied && (!anyTok || it.op.Token.N > highest) {
			highest, anyTok = it.op.Token.N, true
		}
	}
	return segment(items, ids, note, func(seg int) (porcupine.Operation, bool) {
		return porcupine.Operation{Input: porcIssuerInput{Seg: seg, SetState: true, Tok: highest, TokOK: anyTok}, Metadata: porcOpMeta{}}, true
	})
}

// porcupineKey is one porcupine partition: one key of one model.
type porcupineKey struct {
	model string
	key   string
	// ops are the key's operations as the models see them (for prefixes).
	writes, reads, acquires []*history.Op
	sem                     Semantics
	result                  KeyResult
}

func (k *porcupineKey) operations(writes, reads, acquires []*history.Op) []porcupine.Operation {
	if k.model == ModelIssuer {
		return issuerOperations(acquires)
	}
	return registerOperations(writes, reads, k.sem)
}

func (k *porcupineKey) porcupineModel(abort *abortFlag) porcupine.Model {
	if k.model == ModelIssuer {
		return issuerModel(abort)
	}
	return registerModel(k.sem, abort)
}

// KeyResult is Porcupine's verdict on one key of one model.
type KeyResult struct {
	Model   string  `json:"model"`
	Key     string  `json:"key"`
	Verdict Verdict `json:"verdict"`
	Ops     int     `json:"ops"`
	// Segments is how many independent pieces the key was cut into.
	Segments int           `json:"segments"`
	Elapsed  time.Duration `json:"duration_ns"`
	// FirstInvalidAt is, for an invalid key, the earliest history time at
	// which the key's history up to then was already not linearizable
	// (-1 when not found within the time budget, or not invalid).
	FirstInvalidAt int64 `json:"first_invalid_at_ns"`
	// Culprits are the operations whose completion at FirstInvalidAt made
	// the history non-linearizable.
	Culprits []int64 `json:"culprits,omitempty"`
}

// run checks one key with porcupine until deadline.
func (k *porcupineKey) run(ctx context.Context, deadline time.Time) {
	start, before := time.Now(), k.result.Elapsed
	ops := k.operations(k.writes, k.reads, k.acquires)
	k.result = KeyResult{Model: k.model, Key: k.key, FirstInvalidAt: -1}
	for _, op := range ops {
		if m, ok := op.Metadata.(porcOpMeta); ok && m.op != nil {
			k.result.Ops++
		} else {
			k.result.Segments++
		}
	}
	if len(ops) > 0 {
		k.result.Segments++
	}
	k.result.Verdict = k.check(ctx, ops, deadline)
	k.result.Elapsed = before + time.Since(start)
}

func (k *porcupineKey) check(ctx context.Context, ops []porcupine.Operation, deadline time.Time) Verdict {
	if len(ops) == 0 {
		return Valid
	}
	remaining := time.Until(deadline)
	if remaining <= 0 || ctx.Err() != nil {
		return Unknown
	}
	abort := &abortFlag{ctx: ctx}
	res := porcupine.CheckOperationsTimeout(k.porcupineModel(abort), ops, remaining)
	if abort.aborted.Load() || ctx.Err() != nil {
		return Unknown
	}
	switch res {
	case porcupine.Ok:
		return Valid
	case porcupine.Illegal:
		return Invalid
	}
	return Unknown
}

// findFirstInvalid binary-searches the earliest completion time T such that
// the key's history as it stood at T is already not linearizable: that is
// when the history first showed the violation (time to detection).
//
// The history at T keeps the operations invoked by T; those still in flight
// at T become unknown-outcome (writes) or are dropped (reads, acquires). Non-
// linearizability is monotone in T: the operations completed by T are
// linearized by T, before everything invoked later, so a linearization of
// the whole history restricted to them is one of the history at T.
func (k *porcupineKey) findFirstInvalid(ctx context.Context, deadline time.Time) {
	var times []int64
	for _, list := range [][]*history.Op{k.writes, k.reads, k.acquires} {
		for _, op := range list {
			if op.Return != history.Never {
				times = append(times, op.Return)
			}
		}
	}
	sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
	times = compactTimes(times)
	if len(times) == 0 {
		return
	}
	lo, hi := 0, len(times)-1 // invariant: invalid at times[hi]; valid below lo
	for lo < hi {
		mid := (lo + hi) / 2
		w, r, a := prefixAt(k.writes, times[mid]), prefixAt(k.reads, times[mid]), prefixAt(k.acquires, times[mid])
		switch k.check(ctx, k.operations(w, r, a), deadline) {
		case Invalid:
			hi = mid
		case Valid:
			lo = mid + 1
		default:
			return // out of time: no exact answer
		}
	}
	at := times[hi]
	k.result.FirstInvalidAt = at
	for _, list := range [][]*history.Op{k.writes, k.reads, k.acquires} {
		for _, op := range list {
			if op.Return == at {
				k.result.Culprits = append(k.result.Culprits, op.ID)
			}
		}
	}
	sort.Slice(k.result.Culprits, func(i, j int) bool { return k.result.Culprits[i] < k.result.Culprits[j] })
}

func compactTimes(ts []int64) []int64 {
	out := ts[:0]
	for i, t := range ts {
		if i == 0 || t != ts[i-1] {
			out = append(out, t)
		}
	}
	return out
}

// prefixAt is ops as the history showed them at time t: invoked by t; a
// completion after t is not yet known (writes become unknown-outcome; reads
// and acquires, which then constrain nothing, are dropped).
func prefixAt(ops []*history.Op, t int64) []*history.Op {
	out := make([]*history.Op, 0, len(ops))
	for _, op := range ops {
		if op.Call > t {
			continue
		}
		if op.Completed > t {
			if op.F != history.Write {
				continue
			}
			c := *op
			c.Outcome, c.Return, c.Completed, c.Error = history.OutcomeInfo, history.Never, history.Never, ""
			op = &c
		}
		out = append(out, op)
	}
	return out
}

// runPorcupine checks every key, a few at a time, within one deadline.
//
// One hard key must not starve the others: in a first pass each key gets a
// fair share of the time left (time left × workers / keys left); keys not
// decided in their share are retried in a second pass with all the time that
// is left, easiest first. Only then, with what remains, are the first points
// of violation of invalid keys narrowed down.
func runPorcupine(ctx context.Context, keys []*porcupineKey, deadline time.Time) {
	size := func(k *porcupineKey) int { return len(k.writes) + len(k.reads) + len(k.acquires) }
	order := append([]*porcupineKey(nil), keys...)
	sort.SliceStable(order, func(i, j int) bool { return size(order[i]) < size(order[j]) })
	workers := max(1, min(runtime.GOMAXPROCS(0), len(order)))

	var mu sync.Mutex
	left := len(order)
	share := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		d := time.Until(deadline) * time.Duration(workers) / time.Duration(max(left, 1))
		left--
		if t := time.Now().Add(d); t.Before(deadline) {
			return t
		}
		return deadline
	}
	parallel(order, workers, func(k *porcupineKey) { k.run(ctx, share()) })

	var retry []*porcupineKey
	for _, k := range order {
		if k.result.Verdict == Unknown {
			retry = append(retry, k)
		}
	}
	if ctx.Err() == nil && time.Now().Before(deadline) {
		parallel(retry, workers, func(k *porcupineKey) { k.run(ctx, deadline) })
	}

	var invalid []*porcupineKey
	for _, k := range order {
		if k.result.Verdict == Invalid {
			invalid = append(invalid, k)
		}
	}
	parallel(invalid, workers, func(k *porcupineKey) {
		start := time.Now()
		k.findFirstInvalid(ctx, deadline)
		k.result.Elapsed += time.Since(start)
	})
}

// parallel calls fn on every key, with at most workers at once.
func parallel(keys []*porcupineKey, workers int, fn func(*porcupineKey)) {
	work := make(chan *porcupineKey)
	var wg sync.WaitGroup
	for range min(workers, len(keys)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range work {
				fn(k)
			}
		}()
	}
	for _, k := range keys {
		work <- k
	}
	close(work)
	wg.Wait()
}
