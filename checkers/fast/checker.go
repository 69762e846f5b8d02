package fast

import (
	"context"
	"fmt"
	"time"

	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/history"
)

// Checker is the fast checker behind the analysis's Checker interface.
type Checker struct{}

// New returns the fast checker.
func New() *Checker { return &Checker{} }

// Name is "fast".
func (*Checker) Name() string { return checkers.CheckerFast }

// Check decides both models key by key: it copies one key's records out of
// ops (it does not modify them), decides it and drops them before the next,
// so it holds one key's records at a time beside ops. ctx is honoured
// between keys: an interrupted check answers Unknown, never Valid.
func (*Checker) Check(ctx context.Context, ops *history.Ops, sem checkers.Semantics) []checkers.Result {
	start := time.Now()
	h := checkers.Group(ops, sem)
	c := NewStream(sem)
	c.issued = h.Issued
	reg := checkers.Result{Checker: checkers.CheckerFast, Model: checkers.ModelRegister, Verdict: checkers.Valid, Complete: true, Keys: len(h.RegisterKeys)}
	var unknown []string
	// One key's records at a time, in buffers reused from key to key
	// (nothing keeps a key's records once it is decided), made at once
	// for the largest key.
	var recs []record
	var text []byte
	room := func(n int) *keyLog {
		if cap(recs) < n {
			recs = make([]record, 0, max(n, h.LargestKey()))
		}
		return &keyLog{ops: recs[:0], text: text[:0]}
	}
	done := func(k *keyLog) { recs, text = k.ops[:0], k.text[:0] }
	for i, name := range h.RegisterKeys {
		if err := ctx.Err(); err != nil {
			unknown = append(unknown, fmt.Sprintf("interrupted (%v) with %d of %d keys left", err, len(h.RegisterKeys)-i, len(h.RegisterKeys)))
			break
		}
		w, r := h.RegisterLen(name)
		k := room(w + r)
		k.name = name
		h.EachRegister(name, func(op *history.Op) { c.addRegister(k, op) })
		reg.Ops += len(k.ops)
		out := checkRegisterKey(k, c.sem, c.issued, c.MaxAnomaliesPerKey)
		if out.unknown != "" {
			unknown = append(unknown, fmt.Sprintf("key %s: %s", k.name, out.unknown))
		}
		reg.Anomalies = append(reg.Anomalies, out.anomalies...)
		done(k)
	}
	finishResult(&reg, unknown)

	isr := checkers.Result{Checker: checkers.CheckerFast, Model: checkers.ModelIssuer, Verdict: checkers.Valid, Complete: true, Keys: len(h.IssuerKeys)}
	unknown = nil
	for i, name := range h.IssuerKeys {
		if err := ctx.Err(); err != nil {
			unknown = append(unknown, fmt.Sprintf("interrupted (%v) with %d of %d locks left", err, len(h.IssuerKeys)-i, len(h.IssuerKeys)))
			break
		}
		k := room(h.IssuerLen(name))
		k.name = name
		h.EachIssuer(name, func(op *history.Op) { addAcquire(k, op) })
		isr.Ops += len(k.ops)
		isr.Anomalies = append(isr.Anomalies, checkIssuerScope(k, c.sem, c.MaxAnomaliesPerKey)...)
		done(k)
	}
	finishResult(&isr, unknown)
	res := []checkers.Result{reg, isr}
	for i := range res {
		res[i].Duration = time.Since(start)
	}
	return res
}
