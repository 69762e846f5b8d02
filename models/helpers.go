package models

import (
	"sort"
	"strconv"

	"github.com/fencecheck/fencecheck/history"
)

// Secs renders a history time (ns) the way anomaly texts show it: "12.41 s".
func Secs(ns int64) string {
	if ns == history.Never {
		return "never"
	}
	return strconv.FormatFloat(float64(ns)/1e9, 'f', 2, 64) + " s"
}

// MaxAnomaliesPerKind bounds how many anomalies of one kind a Result lists
// (the earliest ones); KindCounts still counts them all. A broken target can
// produce one anomaly per operation, and a report of a million lines helps
// no one.
var MaxAnomaliesPerKind = 20

// CapAnomalies sorts r's anomalies by time and keeps the first perKind of
// each kind, counting all of them in r.KindCounts.
func CapAnomalies(r *Result, perKind int) {
	SortAnomalies(r.Anomalies)
	if len(r.Anomalies) == 0 {
		return
	}
	if r.KindCounts == nil {
		r.KindCounts = map[string]int{}
	}
	kept := r.Anomalies[:0]
	for _, a := range r.Anomalies {
		r.KindCounts[a.Kind]++
		if r.KindCounts[a.Kind] <= perKind {
			kept = append(kept, a)
		} else {
			r.OmittedAnomalies++
		}
	}
	r.Anomalies = kept
}

// SortAnomalies orders anomalies earliest first, deterministically.
func SortAnomalies(as []Anomaly) {
	sort.SliceStable(as, func(i, j int) bool {
		if as[i].At != as[j].At {
			return as[i].At < as[j].At
		}
		if as[i].Kind != as[j].Kind {
			return as[i].Kind < as[j].Kind
		}
		if as[i].Key != as[j].Key {
			return as[i].Key < as[j].Key
		}
		return len(as[i].Ops) > 0 && len(as[j].Ops) > 0 && as[i].Ops[0] < as[j].Ops[0]
	})
}

// HasViolation reports whether any anomaly is a violation (not a finding).
func HasViolation(as []Anomaly) bool {
	for _, a := range as {
		if !a.Finding {
			return true
		}
	}
	return false
}

// ByKey is a history's operations as the models see them: per register key
// its writes (every outcome) and ok reads, per token scope (a lock, or ""
// for scope=global) its ok acquires; each list in invoke order. It holds
// only positions into the history's Ops: Register and Issuer copy one key's
// operations out when asked, so a checker that goes key by key holds one
// key's copies at a time, not the whole history's.
type ByKey struct {
	RegisterKeys []string // sorted
	IssuerKeys   []string // sorted
	// Issued applies the forgery rule (every acquire, any outcome).
	Issued *Issued

	ops      *history.Ops
	register map[string]*keyPos
	issuer   map[string][]int32
}

type keyPos struct{ writes, reads []int32 }

// KeyOps are one register key's operations.
type KeyOps struct {
	Writes []*history.Op // every outcome
	Reads  []*history.Op // ok only
}

// Register copies out the operations of register key k.
func (h *ByKey) Register(k string) KeyOps {
	p := h.register[k]
	if p == nil {
		return KeyOps{}
	}
	return KeyOps{Writes: h.copyOut(p.writes), Reads: h.copyOut(p.reads)}
}

// Issuer copies out the ok acquires of token scope k.
func (h *ByKey) Issuer(k string) []*history.Op { return h.copyOut(h.issuer[k]) }

// Scratch copies out one key at a time into buffers it reuses, for a
// checker that is done with a key before it asks for the next: what
// Register and Issuer return is valid until its next call.
type Scratch struct {
	h     *ByKey
	slab  []history.Op
	ptrs  []*history.Op
	reads []*history.Op
}

// Scratch returns an empty Scratch over h.
func (h *ByKey) Scratch() *Scratch { return &Scratch{h: h} }

func (s *Scratch) fill(at []int32, into []*history.Op, slab []history.Op) []*history.Op {
	into = into[:0]
	for i, j := range at {
		s.h.ops.Load(int(j), &slab[i])
		into = append(into, &slab[i])
	}
	return into
}

func (s *Scratch) grow(n int) {
	if cap(s.slab) < n {
		s.slab = make([]history.Op, n)
		s.ptrs, s.reads = nil, nil
	}
}

// Register is ByKey.Register into the buffers.
func (s *Scratch) Register(k string) KeyOps {
	p := s.h.register[k]
	if p == nil {
		return KeyOps{}
	}
	s.grow(len(p.writes) + len(p.reads))
	s.ptrs = s.fill(p.writes, s.ptrs, s.slab[:len(p.writes)])
	s.reads = s.fill(p.reads, s.reads, s.slab[len(p.writes):len(p.writes)+len(p.reads)])
	return KeyOps{Writes: s.ptrs, Reads: s.reads}
}

// Issuer is ByKey.Issuer into the buffers.
func (s *Scratch) Issuer(k string) []*history.Op {
	at := s.h.issuer[k]
	s.grow(len(at))
	s.ptrs = s.fill(at, s.ptrs, s.slab[:len(at)])
	return s.ptrs
}

// EachRegister calls fn with each operation of register key k in turn, in
// invoke order, copying none out: fn must not keep op.
func (h *ByKey) EachRegister(k string, fn func(op *history.Op)) {
	p := h.register[k]
	if p == nil {
		return
	}
	w, r := p.writes, p.reads
	var op history.Op // one copy, reused: fn must not keep it
	for len(w) > 0 || len(r) > 0 {
		var j int32
		if len(r) == 0 || len(w) > 0 && w[0] < r[0] {
			j, w = w[0], w[1:]
		} else {
			j, r = r[0], r[1:]
		}
		h.ops.Load(int(j), &op)
		fn(&op)
	}
}

// EachIssuer is EachRegister for the ok acquires of token scope k.
func (h *ByKey) EachIssuer(k string, fn func(op *history.Op)) { h.each(h.issuer[k], fn) }

func (h *ByKey) each(at []int32, fn func(op *history.Op)) {
	var op history.Op // one copy, reused: fn must not keep it
	for _, j := range at {
		h.ops.Load(int(j), &op)
		fn(&op)
	}
}

// IssuerLen counts what Issuer would copy.
func (h *ByKey) IssuerLen(k string) int { return len(h.issuer[k]) }

// RegisterLen counts what Register would copy.
func (h *ByKey) RegisterLen(k string) (writes, reads int) {
	if p := h.register[k]; p != nil {
		return len(p.writes), len(p.reads)
	}
	return 0, 0
}

func (h *ByKey) copyOut(at []int32) []*history.Op {
	if len(at) == 0 {
		return nil
	}
	slab := make([]history.Op, len(at))
	out := make([]*history.Op, len(at))
	for i, j := range at {
		h.ops.Load(int(j), &slab[i])
		out[i] = &slab[i]
	}
	return out
}

// Group sorts paired operations into what the models check. Operations the
// models ignore (renew, release, reads and acquires that did not end ok) are
// left out.
//
// The grouping is computed once per operations and token scope, and shared
// (ops.Memo): it must not be modified.
func Group(ops *history.Ops, sem Semantics) *ByKey {
	return ops.Memo(groupKey{sem.Scope == ScopeGlobal}, func() any { return group(ops, sem) }).(*ByKey)
}

type groupKey struct{ global bool }

func group(ops *history.Ops, sem Semantics) *ByKey {
	h := &ByKey{ops: ops, register: map[string]*keyPos{}, issuer: map[string][]int32{}, Issued: NewIssued()}
	reg := func(k string) *keyPos {
		ko := h.register[k]
		if ko == nil {
			ko = &keyPos{}
			h.register[k] = ko
			h.RegisterKeys = append(h.RegisterKeys, k)
		}
		return ko
	}
	var byID []*keyPos // reg by Brief.KeyID: no map per operation
	regOf := func(b history.Brief) *keyPos {
		for int(b.KeyID) >= len(byID) {
			byID = append(byID, nil)
		}
		if byID[b.KeyID] == nil {
			byID[b.KeyID] = reg(b.Key)
		}
		return byID[b.KeyID]
	}
	var op history.Op
	for i := range ops.Len() {
		b := ops.Brief(i)
		switch b.F {
		case history.Write:
			ko := regOf(b)
			ko.writes = append(ko.writes, int32(i))
		case history.Read:
			if b.Outcome == history.OutcomeOk {
				ko := regOf(b)
				ko.reads = append(ko.reads, int32(i))
			}
		case history.Acquire:
			ops.Load(i, &op)
			h.Issued.Add(&op)
			if op.Outcome != history.OutcomeOk {
				continue
			}
			scope := op.Key
			if sem.Scope == ScopeGlobal {
				scope = ""
			}
			if _, ok := h.issuer[scope]; !ok {
				h.IssuerKeys = append(h.IssuerKeys, scope)
			}
			h.issuer[scope] = append(h.issuer[scope], int32(i))
		}
	}
	// ops are in invoke order, and so is each list.
	sort.Strings(h.RegisterKeys)
	sort.Strings(h.IssuerKeys)
	return h
}

// Issued is what a history's acquires say about which sealed tokens are
// authentic, for the forgery rule (the one rule every checker applies):
//
// Under authenticated semantics a sealed token is forged unless an acquire
// returned exactly that spelling, or an acquire whose answer was lost (info,
// or no completion) was invoked before the write (it may have issued it). A
// history with no acquire at all (the issuer is not recorded) holds no
// sealed token forged. Unsealed tokens are never authentic there.
//
// Only hashes of the spellings are kept (one 64-bit FNV-1a each).
type Issued struct {
	any  bool
	raw  map[uint64]struct{}
	lost int64 // earliest call of an acquire whose answer was lost
}

// NewIssued is an Issued with no acquire yet.
func NewIssued() *Issued {
	return &Issued{raw: map[uint64]struct{}{}, lost: history.Never}
}

// TokenHash is the hash Issued keeps of a token's spelling.
func TokenHash(raw string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(raw); i++ {
		h ^= uint64(raw[i])
		h *= 1099511628211
	}
	return h
}

// Add notes one acquire (any outcome; other operations are ignored).
func (is *Issued) Add(op *history.Op) {
	if op.F != history.Acquire {
		return
	}
	is.any = true
	switch op.Outcome {
	case history.OutcomeOk:
		if op.Token.State == history.TokenValid {
			is.raw[TokenHash(op.Token.Raw)] = struct{}{}
		}
	case history.OutcomeInfo:
		is.lost = min(is.lost, op.Call)
	}
}

// Forged says whether a sealed token with the spelling hash h, sent by a
// write invoked at call, is forged.
func (is *Issued) Forged(h uint64, call int64) bool {
	if !is.any {
		return false
	}
	if _, ok := is.raw[h]; ok {
		return false
	}
	return is.lost >= call
}

// Authentic says whether w's token could ever be accepted under sem: it
// matches the grammar and, under authenticated semantics, is sealed and not
// forged. Only an authentic token's stale rejection claims anything.
func (is *Issued) Authentic(w *history.Op, sem Semantics) bool {
	if w.Token.State != history.TokenValid {
		return false
	}
	if !sem.Authenticated {
		return true
	}
	return w.Token.Seal != "" && !is.Forged(TokenHash(w.Token.Raw), w.Call)
}
