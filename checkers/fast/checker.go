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
	for i, name := range h.RegisterKeys {
		if err := ctx.Err(); err != nil {
			unknown = append(unknown, fmt.Sprintf("interrupted (%v) with %d of %d keys left", err, len(h.RegisterKeys)-i, len(h.RegisterKeys)))
			break
		}
		w, r := h.RegisterLen(name)
		k := &keyLog{name: name, ops: make([]record, 0, w+r)}
		h.EachRegister(name, func(op *history.Op) { c.addRegister(k, op) })
		reg.Ops += len(k.ops)
		out := checkRegisterKey(k, c.sem, c.issued, c.MaxAnomaliesPerKey)
		if out.unknown != "" {
			unknown = append(unknown, fmt.Sprintf("key %s: %s", k.name, out.unknown))
		}
		reg.Anomalies = append(reg.Anomalies, out.anomalies...)
	}
	finishResult(&reg, unknown)

	isr := checkers.Result{Checker: checkers.CheckerFast, Model: checkers.ModelIssuer, Verdict: checkers.Valid, Complete: true, Keys: len(h.IssuerKeys)}
	unknown = nil
	for i, name := range h.IssuerKeys {
		if err := ctx.Err(); err != nil {
			unknown = append(unknown, fmt.Sprintf("interrupted (%v) with %d of %d locks left", err, len(h.IssuerKeys)-i, len(h.IssuerKeys)))
			break
		}
		k := &keyLog{name: name, ops: make([]record, 0, h.IssuerLen(name))}
		h.EachIssuer(name, func(op *history.Op) { addAcquire(k, op) })
		isr.Ops += len(k.ops)
		isr.Anomalies = append(isr.Anomalies, checkIssuerScope(k, c.sem, c.MaxAnomaliesPerKey)...)
	}
	finishResult(&isr, unknown)
	res := []checkers.Result{reg, isr}
	for i := range res {
		res[i].Duration = time.Since(start)
	}
	return res
}
