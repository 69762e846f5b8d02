package fast

import (
	"fmt"
	"sort"
	"strconv"

	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/history"
)

// Explanations for the fast checker's register search. They run once, when
// the search has failed, and look for the smallest set of operations that
// cannot be ordered: first a conflict among writes that certainly took
// effect (two or three operations), then a stale rejection no write can
// justify on its own, and only then the general case.

// explainFailure is called when the search died at group gi (len(groups):
// at the end).
func (c *regCheck) explainFailure(gi int) {
	// A conflict among forced writes anywhere on the key is a violation by
	// itself (no choice can repair it) and usually the root cause, even
	// when the search stopped earlier at a rejection it made impossible.
	fBefore, fByBefore, forced := c.forcedConflict()
	// Stale rejections whose threshold the search had reached.
	limit := uint64(0)
	all := gi >= len(c.groups)
	if !all {
		limit = c.groups[gi].tok
	}
	ws := c.witnesses(fBefore, fByBefore)
	for si := range c.stale {
		s := &c.stale[si]
		if !all && s.theta > limit {
			break
		}
		if c.staleAlone(s, ws) {
			return
		}
	}
	if forced {
		return
	}
	// The general case: each requirement can be met alone, not all at once.
	var ops []int32
	var names []string
	for si := range c.stale {
		s := &c.stale[si]
		if !all && s.theta > limit {
			break
		}
		if len(ops) < 3 {
			ops = append(ops, s.op)
			names = append(names, fmt.Sprintf("%s (rejected as stale at %s)", c.name(s.op), checkers.Secs(s.ret)))
		}
	}
	for pi := range c.pins {
		p := &c.pins[pi]
		if !all && p.tok > limit {
			break
		}
		if len(ops) < 3 {
			ops = append(ops, p.op)
			names = append(names, fmt.Sprintf("%s (rejected as stale at %s with high-water %d)", c.name(p.op), checkers.Secs(p.ret), p.tok))
		}
	}
	var infos []string
	for x := 0; x < len(c.groups) && (all || x <= gi); x++ {
		if u := c.groups[x].optional; u != nil && len(infos) < 3 {
			ops = append(ops, u.w)
			infos = append(infos, c.name(u.w))
		}
	}
	text := "no choice of which unknown-outcome writes took effect justifies "
	text += joinNames(names)
	if !all {
		if g := &c.groups[gi]; len(g.forced) > 0 {
			st := c.stats(g)
			e := &g.forced[st.minRBy]
			ops = append(ops, e.w)
			text += fmt.Sprintf(" while letting %s take effect by %s", c.name(e.w), checkers.Secs(e.r))
		}
	}
	if len(infos) > 0 {
		text += " (candidates: " + joinNames(infos) + ")"
	}
	c.report(checkers.KindNotLinearizable, text, ops...)
}

func joinNames(ns []string) string {
	switch len(ns) {
	case 0:
		return "the history"
	case 1:
		return ns[0]
	}
	s := ns[0]
	for _, n := range ns[1 : len(ns)-1] {
		s += ", " + n
	}
	return s + " and " + ns[len(ns)-1]
}

// forcedConflict sweeps the forced writes of every group alone (the
// earliest possible frontier), reports the first pair (or equal-token
// group) that cannot be ordered, and returns the frontier before each group
// for the stale explanations.
func (c *regCheck) forcedConflict() (fBefore []int64, fBy []int32, found bool) {
	f, by := c.f0, c.f0By
	fBefore = make([]int64, len(c.groups)+1)
	fBy = make([]int32, len(c.groups)+1)
	for gi := range c.groups {
		fBefore[gi], fBy[gi] = f, by
		g := &c.groups[gi]
		if len(g.forced) == 0 {
			continue
		}
		if !found {
			for i := range g.forced {
				if e := &g.forced[i]; f > e.r {
					c.explainPair(c.bestBlame(gi, by, e.r), e)
					found = true
					break
				}
			}
		}
		if !found {
			if st := c.stats(g); !st.orderable {
				c.explainGroup(g, st.stuck)
				found = true
			}
		}
		for i := range g.forced {
			if e := &g.forced[i]; e.g > f {
				f, by = e.g, e.gBy
			}
		}
	}
	fBefore[len(c.groups)], fBy[len(c.groups)] = f, by
	return fBefore, fBy, found
}

// bestBlame prefers, among the forced writes before group gi, one whose own
// call came after deadline (a stale write accepted) over the read that
// pushed the frontier (a stale read): the write is the root cause.
func (c *regCheck) bestBlame(gi int, by int32, deadline int64) int32 {
	for x := 0; x < gi; x++ {
		for i := range c.groups[x].forced {
			if e := &c.groups[x].forced[i]; e.call > deadline {
				return e.w
			}
		}
	}
	return by
}

// readOf is the write whose value read i returned (-1: the initial state).
func (c *regCheck) readOf(i int32) int32 {
	o := &c.k.ops[i]
	if o.ts == history.TokenNone {
		return -1
	}
	if wi, ok := c.byVal[o.val]; ok {
		return wi
	}
	return -1
}

// explainPair: the op "by" (a write's call or a read's call) forces the
// frontier past e's deadline e.r, although e's token is newer.
func (c *regCheck) explainPair(by int32, e *regElem) {
	ops := c.k.ops
	later := fmt.Sprintf("%s %s", c.name(e.w), c.applied(e))
	if e.rBy != e.w {
		later = fmt.Sprintf("%s had returned %s at %s", c.name(e.rBy), c.readSaw(e.rBy), checkers.Secs(ops[e.rBy].ret))
	}
	b := &ops[by]
	if b.kind == readOk {
		w := c.readOf(by)
		c.report(checkers.KindStaleRead, fmt.Sprintf("%s began at %s and returned %s, but %s, with a newer token, before that read began",
			c.name(by), checkers.Secs(b.call), c.readSaw(by), later), by, w, e.w, e.rBy)
		return
	}
	c.report(checkers.KindStaleWriteAccepted, fmt.Sprintf("%s took effect (%s) although it was invoked only at %s, after %s: its token is older",
		c.name(by), c.appliedOp(by), checkers.Secs(b.call), later), by, e.w, e.rBy)
}

func (c *regCheck) appliedOp(w int32) string {
	for gi := range c.groups {
		for x := range c.groups[gi].forced {
			if c.groups[gi].forced[x].w == w {
				return c.applied(&c.groups[gi].forced[x])
			}
		}
	}
	return "returned at " + checkers.Secs(c.k.ops[w].ret)
}

// explainGroup: writes sharing a token (equal=accept) whose reads pin them
// in an impossible order.
func (c *regCheck) explainGroup(g *regGroup, stuck []regElem) {
	// Prefer a 2-cycle: each must come after the other.
	for i := range stuck {
		for j := range stuck {
			x, y := &stuck[i], &stuck[j]
			if i != j && x.g > y.r && y.g > x.r {
				c.report(checkers.KindNotLinearizable, fmt.Sprintf("%s and %s both carried token %d and cannot be ordered: %s began at %s, after %s returned at %s, and %s began at %s, after %s returned at %s",
					c.name(x.w), c.name(y.w), g.tok,
					c.name(x.gBy), checkers.Secs(x.g), c.name(y.rBy), checkers.Secs(y.r),
					c.name(y.gBy), checkers.Secs(y.g), c.name(x.rBy), checkers.Secs(x.r)),
					x.w, x.gBy, y.rBy, y.w, y.gBy, x.rBy)
				return
			}
		}
	}
	var ops []int32
	var names []string
	for i := range stuck {
		if i < 4 {
			ops = append(ops, stuck[i].w, stuck[i].gBy, stuck[i].rBy)
			names = append(names, c.name(stuck[i].w))
		}
	}
	c.report(checkers.KindNotLinearizable, fmt.Sprintf("the %d writes with token %d (%s) cannot be ordered consistently with the reads of their values", len(stuck), g.tok, joinNames(names)), ops...)
}

// witness is the earliest point at which some write with a token at least
// a group's could take effect, ignoring every other requirement.
type witness struct {
	p     int64
	w, by int32
}

// witnesses[gi] is the best witness among groups gi.. (a suffix minimum),
// so each stale rejection is judged alone in O(log groups).
func (c *regCheck) witnesses(fBefore []int64, fBy []int32) []witness {
	out := make([]witness, len(c.groups)+1)
	out[len(c.groups)] = witness{p: history.Never, w: -1, by: -1}
	for gi := len(c.groups) - 1; gi >= 0; gi-- {
		best := out[gi+1]
		g := &c.groups[gi]
		try := func(call int64, w int32) {
			p, by := fBefore[gi], fBy[gi]
			if call >= p {
				p, by = call, w
			}
			if p < best.p {
				best = witness{p: p, w: w, by: by}
			}
		}
		if len(g.forced) > 0 {
			if st := c.stats(g); st.cABy >= 0 {
				try(st.cA, st.cABy)
			}
		}
		if g.optional != nil {
			try(g.optional.call, g.optional.w)
		}
		out[gi] = best
	}
	return out
}

// staleAlone reports s if no write with a token at least θ can be placed
// before s returned even on its own, and says whether it did.
func (c *regCheck) staleAlone(s *staleReq, ws []witness) bool {
	gi := sort.Search(len(c.groups), func(i int) bool { return c.groups[i].tok >= s.theta })
	best := ws[gi]
	if best.p <= s.ret {
		return false
	}
	o := &c.k.ops[s.op]
	cmp := "≥"
	if c.sem.Equal == checkers.EqualAccept {
		cmp = ">"
	}
	head := fmt.Sprintf("%s was rejected as stale at %s, but no write with a token %s %s could have taken effect by then",
		c.name(s.op), checkers.Secs(o.ret), cmp, strconv.FormatUint(o.tok, 10))
	if best.w < 0 {
		c.report(checkers.KindFalseStaleRejection, head+": the history has none", s.op)
		return true
	}
	why := fmt.Sprintf("the earliest, %s, was invoked at %s", c.name(best.w), checkers.Secs(c.k.ops[best.w].call))
	if best.by != best.w && best.by >= 0 {
		why = fmt.Sprintf("the earliest, %s, must follow %s, which began at %s", c.name(best.w), c.name(best.by), checkers.Secs(c.k.ops[best.by].call))
	}
	c.report(checkers.KindFalseStaleRejection, head+": "+why, s.op, best.w, best.by)
	return true
}
