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
// for scope=global) its ok acquires; each list in invoke order.
type ByKey struct {
	Register     map[string]*KeyOps
	RegisterKeys []string // sorted
	Issuer       map[string][]*history.Op
	IssuerKeys   []string // sorted
	// Acquires are every ok acquire, in invoke order.
	Acquires []*history.Op
}

// KeyOps are one register key's operations.
type KeyOps struct {
	Writes []*history.Op // every outcome
	Reads  []*history.Op // ok only
}

// Group sorts paired operations into what the models check. Operations the
// models ignore (renew, release, reads and acquires that did not end ok) are
// left out.
func Group(ops []*history.Op, sem Semantics) *ByKey {
	h := &ByKey{Register: map[string]*KeyOps{}, Issuer: map[string][]*history.Op{}}
	reg := func(k string) *KeyOps {
		ko := h.Register[k]
		if ko == nil {
			ko = &KeyOps{}
			h.Register[k] = ko
			h.RegisterKeys = append(h.RegisterKeys, k)
		}
		return ko
	}
	for _, op := range ops {
		switch op.F {
		case history.Write:
			ko := reg(op.Key)
			ko.Writes = append(ko.Writes, op)
		case history.Read:
			if op.Outcome == history.OutcomeOk {
				ko := reg(op.Key)
				ko.Reads = append(ko.Reads, op)
			}
		case history.Acquire:
			if op.Outcome != history.OutcomeOk {
				continue
			}
			scope := op.Key
			if sem.Scope == ScopeGlobal {
				scope = ""
			}
			if _, ok := h.Issuer[scope]; !ok {
				h.IssuerKeys = append(h.IssuerKeys, scope)
			}
			h.Issuer[scope] = append(h.Issuer[scope], op)
			h.Acquires = append(h.Acquires, op)
		}
	}
	// Operations in invoke order within each key: deterministic output.
	byID := func(ops []*history.Op) {
		sort.Slice(ops, func(i, j int) bool { return ops[i].ID < ops[j].ID })
	}
	for _, ko := range h.Register {
		byID(ko.Writes)
		byID(ko.Reads)
	}
	for _, acqs := range h.Issuer {
		byID(acqs)
	}
	byID(h.Acquires)
	sort.Strings(h.RegisterKeys)
	sort.Strings(h.IssuerKeys)
	return h
}
