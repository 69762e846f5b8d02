package porcupine

import (
	"fmt"
	"io"
	"time"

	porc "github.com/anishathalye/porcupine"
	"github.com/fencecheck/fencecheck/checkers"
)

// Visualize writes Porcupine's HTML visualization of one key of one model
// (checkers.ModelRegister with a resource key, checkers.ModelIssuer with a lock
// name, or "" for scope=global) of the last Check to w: every operation on a
// timeline per client, the longest linearizations found, and the given
// annotations (fault periods, anomalies). The search is re-run (verbosely)
// within the check's timeout, or within VisualizeUnknownBudget for a key
// Porcupine could not decide: such a key shows partial linearizations only.
// Keys are cut into segments (see operations.go); each is one partition of
// the visualization.
func (c *Checker) Visualize(model, key string, notes []checkers.Annotation, w io.Writer) error {
	k := c.key(model, key)
	if k == nil {
		return fmt.Errorf("porcupine did not check %s %q", model, key)
	}
	budget := c.timeout()
	if k.result.Verdict == checkers.Unknown {
		budget = min(budget, VisualizeUnknownBudget)
	}
	m := k.porcupineModel(nil)
	ops, window := visualWindow(k.operations(k.ops()), k.result.FirstInvalidAt, MaxVisualizedOps)
	_, info := porc.CheckOperationsVerbose(m, ops, budget)
	out := make([]porc.Annotation, 0, len(notes)+1)
	if window != "" {
		out = append(out, porc.Annotation{Tag: "window", Start: ops[0].Call, End: ops[len(ops)-1].Return, Description: "the window drawn", Details: window, BackgroundColor: "#eef2f8"})
	}
	for _, n := range notes {
		out = append(out, porc.Annotation{Tag: n.Tag, Start: n.Start, End: n.End,
			Description: n.Description, Details: n.Details, BackgroundColor: n.Color})
	}
	info.AddAnnotations(out)
	return porc.Visualize(m, info, w)
}

// VisualizeUnknownBudget bounds the search behind the visualization of a key
// Porcupine could not decide: it would only time out again.
var VisualizeUnknownBudget = 10 * time.Second

// MaxVisualizedOps bounds the operations a visualization draws: a page of
// a whole 250,000-operation key is 50 MB, and no browser opens a 1.5 GB
// one. Above it, the visualization draws the window around the key's first
// violation (around its start for a valid key): whole segments (each starts
// from a state the history forces, so a window of them is checked as the
// key is), the one with the violation and its neighbours, until the bound.
var MaxVisualizedOps = 5000

// visualWindow is ops cut to the segments around at (ns; -1: the start),
// at most about max operations, renumbered from 0, and the window in words
// ("" when nothing was cut).
func visualWindow(ops []porc.Operation, at int64, max int) ([]porc.Operation, string) {
	if len(ops) <= max {
		return ops, ""
	}
	type span struct{ from, to, call, ret int64 }
	var segs []span // by segment: [from, to) into ops, and its times
	for i, op := range ops {
		s := segOf(op)
		for len(segs) <= s {
			segs = append(segs, span{from: int64(i), to: int64(i), call: op.Call, ret: op.Return})
		}
		g := &segs[s]
		g.to = int64(i) + 1
		g.ret = maxI64(g.ret, op.Return)
	}
	center := 0
	if at >= 0 {
		for i, g := range segs {
			if g.call <= at {
				center = i
			}
		}
	}
	lo, hi := center, center
	n := segs[center].to - segs[center].from
	for int(n) < max && (lo > 0 || hi < len(segs)-1) {
		if hi < len(segs)-1 {
			hi++
			n += segs[hi].to - segs[hi].from
		}
		if lo > 0 && int(n) < max {
			lo--
			n += segs[lo].to - segs[lo].from
		}
	}
	out := make([]porc.Operation, 0, n)
	for i := segs[lo].from; i < segs[hi].to; i++ {
		out = append(out, withSeg(ops[i], segOf(ops[i])-lo))
	}
	why := fmt.Sprintf("the key has %d operations in %d segments; this page draws the %d operations of segments %d–%d (%s–%s), around ",
		len(ops), len(segs), len(out), lo+1, hi+1, checkers.Secs(segs[lo].call), checkers.Secs(segs[hi].ret))
	if at >= 0 {
		why += "the first violation, at " + checkers.Secs(at)
	} else {
		why += "the start"
	}
	return out, why
}

func segOf(op porc.Operation) int {
	switch in := op.Input.(type) {
	case porcRegInput:
		return in.Seg
	case porcIssuerInput:
		return in.Seg
	}
	return 0
}

func withSeg(op porc.Operation, seg int) porc.Operation {
	switch in := op.Input.(type) {
	case porcRegInput:
		in.Seg = seg
		op.Input = in
	case porcIssuerInput:
		in.Seg = seg
		op.Input = in
	}
	return op
}

func maxI64(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}
