// Package fast is the fast checker: a polynomial-time decision procedure for the fenced
// register and the issuer that uses what Porcupine cannot know: accepted
// writes are totally ordered by their tokens.
//
// # The fenced register, per key
//
// The sequential specification (the same as the Porcupine model): the state
// is (high-water, value, token of value), initially (none, "", none). A write
// with a valid token t is accepted iff there is no high-water yet or t > hw
// (equal=reject; t ≥ hw under equal=accept); it then sets all three. A write
// whose token is missing or malformed (or, for an authenticated target,
// unsealed) is never accepted. A stale rejection
// (fail, error "stale") of a valid token t is legal iff a high-water exists
// and hw ≥ t (equal=reject; hw > t under accept). Other failures change
// nothing. A read returns (value, token of value). An info write may or may
// not take effect, at any moment after its call.
//
// A history is linearizable iff the operations can be given points p(op) in
// their closed intervals [Call, Return] (Return = ∞ for info) such that
// executing them in order of p (ties broken suitably) is legal. (Given any
// linear order extending real-time order, p(x) = max of the calls of x and
// everything before it is such an assignment; the converse is immediate.)
//
// Elements. Every ok write with a valid token is accepted, and so is every
// info write whose value some read returned (values are unique); these are
// the forced elements. Info writes with a valid token that no read returned
// are optional: the checker decides whether they took effect. Reads pin
// themselves to the write whose value they returned ("" pins to the initial
// state). Locally checkable facts (an accepted write without a valid token, a
// read of a rejected or unknown value or with the wrong token) are reported
// before the search.
//
// The chain. Accepted writes raise the high-water, so in any linearization
// they appear in nondecreasing token order (strictly increasing under
// reject: two forced writes with one token are a violation, an optional write
// sharing a forced write's token can never be accepted, and of several
// optional writes sharing a token at most one can be, and the one with the
// earliest call dominates). Writes with equal tokens (accept only) form a
// group whose inner order is free. For an element e let g(e) = max(Call(e),
// calls of the reads of e) and R(e) = min(Return(e), returns of the reads of
// e). A chain of chosen elements is realisable iff, walking it in order with
// frontier f (initially the latest call of the reads of the initial state),
// each element e can be placed at p(e) = max(f, Call(e)) ≤ R(e), after which
// f := max(f, g(e)): the reads of e sit in [max(Call(r), p(e)), min(Return(r),
// p(next))], which is non-empty exactly under these inequalities.
//
// Why the earliest placement is optimal: let q be any valid placement of the
// chain. By induction q(e) ≥ p(e) for every e: q(e) ≥ Call(e); q(e) ≥ q(prev)
// ≥ p(prev); and every read r of prev lies between prev and e, so q(e) ≥ q(r)
// ≥ Call(r). Hence f under q is never below f under p, and as every
// constraint is an upper bound (p(e) ≤ R(e), and below for the stale
// deadlines), p meets every constraint q meets. Unchosen info writes are
// no-ops: they sit at the end, never applied.
//
// Inside an equal-token group the final f is the same for every order (the
// max of all g), and an order exists iff the backward greedy — repeatedly put
// last an element whose R is ≥ the largest g of the others, choosing among
// those the one with the largest g — empties the group. (Exchange: if the
// rest can be ordered after removing any candidate L, it can after removing
// the largest-g candidate M instead: put L where M was; L's R bounds every g,
// and every prefix maximum only drops.) An element e can go first iff g(e) ≤
// R of every other member and the group can be ordered at all.
//
// Stale rejections. A stale rejection s of token t needs some accepted write
// w with token ≥ θ (θ = t under reject, t+1 under accept) and p(w) ≤
// Return(s); s itself changes nothing, so it then sits at max(Call(s), p(w))
// right after w. As p is monotone along the chain, it suffices that the
// FIRST chosen element with token ≥ θ meets the deadline Return(s).
//
// Choosing the optional writes exactly. Walk the token groups in increasing
// order keeping a set of states (f, D): f the frontier, D the tightest
// deadline of the stale rejections whose θ lies above the last chosen token
// and at or below the current one (∞ if none). A state with smaller f and
// larger D dominates: every future constraint is monotone in both. At a group
// every state first folds in the deadlines of the stale rejections with θ in
// (previous token, this token]; states with f > D are dead. An optional-only
// group may be skipped (state unchanged) or entered through its earliest-
// called write u, giving (max(f, Call(u)), ∞) when max(f, Call(u)) ≤ D. A
// group with forced elements must be entered (with f ≤ R of every member):
// its first element must meet D, and it is either a forced e that can go
// first (option a) or the group's earliest optional write (option b, a
// strictly worse f, so only when a fails); the result is (max(f, max g of
// the group [, Call(u)]), ∞): entering a group settles every pending
// rejection, as its first element is the first chosen one with a token ≥
// each pending θ. Other optional members would only raise f and are never
// chosen. Of all states only the one with the least resulting f is kept.
// The
// non-dominated states form a staircase (f and D both increasing) with at
// most one D = ∞ state; every step above is a binary search, a truncation
// or an amortised pop at its end, so a key of n operations is checked in O(n log n) time after
// sorting. The history is linearizable iff a state with D = ∞ survives the
// last group and no stale rejection lies above every token. Because the
// states are exactly the non-dominated summaries of every choice of optional
// writes, this decision is exact, not greedy.
//
// # The issuer
//
// Per lock (scope per-lock) or over all locks (scope global): ok acquires
// must be orderable by strictly increasing token consistently with real
// time, i.e. no two share a token and none returns a token ≤ that of an
// acquire that completed before it began. One sweep in call order against
// the acquires sorted by return checks it.
//
// # Memory
//
// Add keeps one fixed-size record per client operation (recordBytes = 56
// bytes) plus the bytes of its value, in per-key slices grown by doubling;
// no event is kept. Fed by the streaming Pairer (CheckReader), that is
// under 100 bytes per operation in all (docs/performance.md measures 66-95,
// 69 at 1M operations: 66 MB). Deciding works one key at a time and needs, on top, about 150
// bytes per write of that key (value index, elements, groups), freed before
// the next key.

package fast

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"
	"unsafe"

	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/history"
)

// opKind is what a record is.
type opKind uint8

const (
	writeOk    opKind = iota // accepted write
	writeInfo                // unknown outcome
	writeStale               // definite rejection, error "stale"
	writeFail                // any other definite rejection
	readOk                   // ok read
	acquireOk                // ok acquire
)

// record is the compact record of one operation. Value text lives in the
// key's arena (text[off:off+n]).
type record struct {
	id   int64
	call int64
	ret  int64 // Never for info
	tok  uint64
	val  uint64 // FNV-1a of the value, to match reads to writes
	off  uint32
	n    uint32
	kind opKind
	ts   history.TokenState
	// tampered: the strip proxy changed this write's token.
	tampered bool
	sealed   bool
	// hwState: a stale rejection's reported high-water (hw): hwNone,
	// hwNumber or hwBad (not a bare token number).
	hwState uint8
	hw      uint64
	// tokh: the hash of a sealed token's spelling (checkers.Issued).
	tokh uint64
}

const (
	hwNone uint8 = iota
	hwNumber
	hwBad
)

const recordBytes = int(unsafe.Sizeof(record{}))

// keyLog holds one key's (or one issuer scope's) records.
type keyLog struct {
	name string
	ops  []record
	text []byte
}

func (k *keyLog) value(o *record) string { return string(k.text[o.off : o.off+o.n]) }

// Stream is the streaming front of the fast checker: feed it every
// operation the Pairer yields (in any order), then call Results.
type Stream struct {
	sem       checkers.Semantics
	keys      map[string]*keyLog
	keyOrder  []*keyLog
	locks     map[string]*keyLog
	lockOrder []*keyLog
	regOps    int
	acqOps    int
	issued    *checkers.Issued
	// MaxAnomaliesPerKey bounds the explanations kept per key (default 3).
	MaxAnomaliesPerKey int
	// ctx, when set, is checked between keys.
	ctx context.Context
}

func (c *Stream) interrupted() error {
	if c.ctx == nil {
		return nil
	}
	return c.ctx.Err()
}

// NewStream returns an empty checker for the declared semantics.
func NewStream(sem checkers.Semantics) *Stream {
	if sem.Equal == "" {
		sem.Equal = checkers.EqualReject
	}
	if sem.Scope == "" {
		sem.Scope = checkers.ScopePerLock
	}
	return &Stream{sem: sem, keys: map[string]*keyLog{}, locks: map[string]*keyLog{}, MaxAnomaliesPerKey: 3, issued: checkers.NewIssued()}
}

func fnv64(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

// Add records one paired operation. Operations the models ignore (failed
// or unknown reads, renew, release, failed or unknown acquires) are dropped.
func (c *Stream) Add(op *history.Op) {
	switch op.F {
	case history.Write, history.Read:
		if op.F == history.Read && op.Outcome != history.OutcomeOk {
			return
		}
		k := c.keys[op.Key]
		if k == nil {
			k = &keyLog{name: op.Key}
			c.keys[op.Key] = k
			c.keyOrder = append(c.keyOrder, k)
		}
		c.addRegister(k, op)
		c.regOps++
	case history.Acquire:
		c.issued.Add(op)
		if op.Outcome != history.OutcomeOk {
			return
		}
		scope := op.Key
		if c.sem.Scope == checkers.ScopeGlobal {
			scope = ""
		}
		k := c.locks[scope]
		if k == nil {
			k = &keyLog{name: scope}
			c.locks[scope] = k
			c.lockOrder = append(c.lockOrder, k)
		}
		addAcquire(k, op)
		c.acqOps++
	}
}

// addRegister records a write (any outcome) or an ok read on its key.
func (c *Stream) addRegister(k *keyLog, op *history.Op) {
	var kind opKind
	switch {
	case op.F == history.Read:
		kind = readOk
	case op.Outcome == history.OutcomeOk:
		kind = writeOk
	case op.Outcome == history.OutcomeInfo:
		kind = writeInfo
	case op.Error == "stale":
		kind = writeStale
	default:
		kind = writeFail
	}
	ret := op.Return
	if op.Outcome == history.OutcomeInfo {
		ret = history.Never
	}
	rec := record{id: op.ID, call: op.Call, ret: ret, tok: op.Token.N, val: fnv64(op.Value),
		off: uint32(len(k.text)), n: uint32(len(op.Value)), kind: kind, ts: op.Token.State, tampered: op.Tampered != "", sealed: op.Token.Seal != ""}
	if rec.sealed {
		rec.tokh = checkers.TokenHash(op.Token.Raw)
	}
	if kind == writeStale && op.HighWater != "" {
		rec.hwState = hwBad
		if hw := history.ParseToken(op.HighWater); hw.State == history.TokenValid && hw.Seal == "" {
			rec.hwState, rec.hw = hwNumber, hw.N
		}
	}
	k.ops = append(k.ops, rec)
	k.text = append(k.text, op.Value...)
}

// addAcquire records an ok acquire in its token scope.
func addAcquire(k *keyLog, op *history.Op) {
	k.ops = append(k.ops, record{id: op.ID, call: op.Call, ret: op.Return, tok: op.Token.N,
		off: uint32(len(k.text)), n: uint32(len(op.Key)), kind: acquireOk, ts: op.Token.State})
	k.text = append(k.text, op.Key...)
}

// Results decides both models over everything added so far.
func (c *Stream) Results() []checkers.Result {
	return []checkers.Result{c.RegisterResult(), c.IssuerResult()}
}

// RegisterResult decides the fenced-register model.
func (c *Stream) RegisterResult() checkers.Result {
	start := time.Now()
	res := checkers.Result{Checker: checkers.CheckerFast, Model: checkers.ModelRegister, Verdict: checkers.Valid, Complete: true, Keys: len(c.keyOrder), Ops: c.regOps}
	var unknown []string
	for i, k := range c.keyOrder {
		if err := c.interrupted(); err != nil {
			unknown = append(unknown, fmt.Sprintf("interrupted (%v) with %d of %d keys left", err, len(c.keyOrder)-i, len(c.keyOrder)))
			break
		}
		out := checkRegisterKey(k, c.sem, c.issued, c.MaxAnomaliesPerKey)
		if out.unknown != "" {
			unknown = append(unknown, fmt.Sprintf("key %s: %s", k.name, out.unknown))
		}
		res.Anomalies = append(res.Anomalies, out.anomalies...)
	}
	finishResult(&res, unknown)
	res.Duration = time.Since(start)
	return res
}

// IssuerResult decides the issuer model.
func (c *Stream) IssuerResult() checkers.Result {
	start := time.Now()
	res := checkers.Result{Checker: checkers.CheckerFast, Model: checkers.ModelIssuer, Verdict: checkers.Valid, Complete: true, Keys: len(c.lockOrder), Ops: c.acqOps}
	var unknown []string
	for i, k := range c.lockOrder {
		if err := c.interrupted(); err != nil {
			unknown = append(unknown, fmt.Sprintf("interrupted (%v) with %d of %d locks left", err, len(c.lockOrder)-i, len(c.lockOrder)))
			break
		}
		res.Anomalies = append(res.Anomalies, checkIssuerScope(k, c.sem, c.MaxAnomaliesPerKey)...)
	}
	finishResult(&res, unknown)
	res.Duration = time.Since(start)
	return res
}

func finishResult(res *checkers.Result, unknown []string) {
	checkers.CapAnomalies(res, checkers.MaxAnomaliesPerKind)
	for _, a := range res.Anomalies {
		if !a.Finding {
			res.Verdict = checkers.Invalid
			break
		}
	}
	if res.Verdict != checkers.Invalid && len(unknown) > 0 {
		res.Verdict = checkers.Unknown
	}
	if len(unknown) > 0 {
		res.Reason = strings.Join(unknown, "; ")
	}
}

// CheckEvents pairs an in-memory history and runs the fast checker on it.
func CheckEvents(events []history.Event, sem checkers.Semantics) ([]checkers.Result, error) {
	c := NewStream(sem)
	p := history.NewPairer()
	for _, e := range events {
		op, err := p.Add(e)
		if err != nil {
			return nil, err
		}
		if op != nil {
			c.Add(op)
		}
	}
	rest, err := p.Finish()
	if err != nil {
		return nil, err
	}
	for _, op := range rest {
		c.Add(op)
	}
	return c.Results(), nil
}

// CheckReader reads a history from r, pairing and checking as it goes:
// only the open operations and the compact records are held. progress, if
// not nil, is called with the bytes read so far every 4 MiB and at the end.
func CheckReader(r io.Reader, sem checkers.Semantics, progress func(bytesRead int64)) ([]checkers.Result, error) {
	c := NewStream(sem)
	p := history.NewPairer()
	rd := history.NewReader(r)
	var next int64 = 4 << 20
	defer func() {
		if progress != nil {
			progress(rd.BytesRead)
		}
	}()
	for {
		if progress != nil && rd.BytesRead >= next {
			progress(rd.BytesRead)
			next = rd.BytesRead + 4<<20
		}
		e, err := rd.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		op, err := p.Add(e)
		if err != nil {
			return nil, err
		}
		if op != nil {
			c.Add(op)
		}
	}
	rest, err := p.Finish()
	if err != nil {
		return nil, err
	}
	for _, op := range rest {
		c.Add(op)
	}
	return c.Results(), nil
}
