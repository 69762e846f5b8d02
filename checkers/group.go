package checkers

import (
	"sort"

	"github.com/fencecheck/fencecheck/history"
)

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

// Ops are the operations h holds positions into.
func (h *ByKey) Ops() *history.Ops { return h.ops }

// RegisterAt is where Register's operations are in Ops (writes, then
// reads; each in invoke order), for a checker that copies out only what
// it reads. They must not be modified.
func (h *ByKey) RegisterAt(k string) (writes, reads []int32) {
	if p := h.register[k]; p != nil {
		return p.writes, p.reads
	}
	return nil, nil
}

// IssuerAt is where Issuer's operations are in Ops. They must not be
// modified.
func (h *ByKey) IssuerAt(k string) []int32 { return h.issuer[k] }

// LargestKey is the most operations one key, or one token scope, has: a
// checker that copies keys out one at a time into a buffer it reuses can
// make room for the largest at once.
func (h *ByKey) LargestKey() int {
	n := 0
	for _, p := range h.register {
		n = max(n, len(p.writes)+len(p.reads))
	}
	for _, at := range h.issuer {
		n = max(n, len(at))
	}
	return n
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
	tw, tr := 0, 0    // w[:tw] and r[:tr] were touched (Ops.Touch)
	for wi, ri := 0, 0; wi < len(w) || ri < len(r); {
		var j int32
		if ri == len(r) || wi < len(w) && w[wi] < r[ri] {
			if wi == tw {
				tw = min(wi+history.TouchBatch, len(w))
				h.ops.Touch(w[wi:tw])
			}
			j, wi = w[wi], wi+1
		} else {
			if ri == tr {
				tr = min(ri+history.TouchBatch, len(r))
				h.ops.Touch(r[ri:tr])
			}
			j, ri = r[ri], ri+1
		}
		h.ops.Load(int(j), &op)
		fn(&op)
	}
}

// EachIssuer is EachRegister for the ok acquires of token scope k.
func (h *ByKey) EachIssuer(k string, fn func(op *history.Op)) { h.each(h.issuer[k], fn) }

func (h *ByKey) each(at []int32, fn func(op *history.Op)) {
	var op history.Op // one copy, reused: fn must not keep it
	for i, j := range at {
		if i%history.TouchBatch == 0 {
			h.ops.Touch(at[i:min(i+history.TouchBatch, len(at))])
		}
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
