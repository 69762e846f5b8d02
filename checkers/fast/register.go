package fast

import (
	"fmt"
	"math"
	"sort"
	"strconv"

	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/history"
)

// The fenced-register half of the fast checker; the argument is in fast.go.

const negInf int64 = math.MinInt64

// regElem is a write that is (forced) or may be (optional) in the chain.
type regElem struct {
	tok    uint64
	call   int64
	g      int64 // max(call, calls of its reads)
	r      int64 // min(return, returns of its reads)
	w      int32 // the write (index into keyLog.ops)
	gBy    int32 // the op whose call is g
	rBy    int32 // the op whose return is r
	forced bool
}

// regGroup is the elements sharing one token.
type regGroup struct {
	tok      uint64
	forced   []regElem
	optional *regElem // the earliest-called optional write, if any
}

// regState is one non-dominated summary of the choices so far.
type regState struct {
	f   int64 // frontier: no later element can be placed before it
	fBy int32
	d   int64 // tightest pending stale deadline (Never: none)
	dBy int32
}

type staleReq struct {
	theta uint64
	ret   int64
	op    int32
}

// pinReq is a stale rejection that reported its high-water h: it saw the
// mark h, so it sits after an element of group h and before the next
// chosen element, like a read of that group.
type pinReq struct {
	tok       uint64
	call, ret int64
	op        int32
}

type keyOutcome struct {
	anomalies []checkers.Anomaly
	unknown   string
}

type regCheck struct {
	k     *keyLog
	sem   checkers.Semantics
	out   keyOutcome
	max   int
	elem  map[int32]int // write op index -> index in elems
	byVal map[uint64]int32
	// elems, groups and stale are the search input; f0/f0By the frontier
	// set by reads of the initial state.
	elems  []regElem
	groups []regGroup
	stale  []staleReq
	pins   []pinReq
	f0     int64
	f0By   int32
	issued *checkers.Issued
}

// searchRegisterKey is the search and its explanations.
func searchRegisterKey(k *keyLog, sem checkers.Semantics, issued *checkers.Issued, max int) keyOutcome {
	c := &regCheck{k: k, sem: sem, max: max, f0: negInf, f0By: -1, issued: issued}
	if !c.prepare() {
		return c.out
	}
	c.search()
	return c.out
}

// vis is when an op's part of a violation became visible in the history:
// its completion, or its call for an op with unknown outcome.
func (c *regCheck) vis(i int32) int64 {
	o := &c.k.ops[i]
	if o.ret == history.Never {
		return o.call
	}
	return o.ret
}

func (c *regCheck) report(kind, text string, ops ...int32) {
	if len(c.out.anomalies) >= c.max {
		return
	}
	a := checkers.Anomaly{Kind: kind, Model: checkers.ModelRegister, Key: c.k.name, Text: text}
	seen := map[int32]bool{}
	for _, i := range ops {
		if i < 0 || seen[i] {
			continue
		}
		seen[i] = true
		a.Ops = append(a.Ops, c.k.ops[i].id)
		if v := c.vis(i); v > a.At {
			a.At = v
		}
	}
	c.out.anomalies = append(c.out.anomalies, a)
}

// Names for texts.

func (c *regCheck) tokText(i int32) string {
	o := &c.k.ops[i]
	switch o.ts {
	case history.TokenNone:
		return "no token"
	case history.TokenMalformed:
		return "a malformed token"
	}
	return "token " + strconv.FormatUint(o.tok, 10)
}

func (c *regCheck) name(i int32) string {
	o := &c.k.ops[i]
	if o.kind == readOk {
		return fmt.Sprintf("read op %d", o.id)
	}
	v := c.k.value(o)
	if v == "" {
		return fmt.Sprintf("write op %d (%s)", o.id, c.tokText(i))
	}
	return fmt.Sprintf("write %s (op %d, %s)", v, o.id, c.tokText(i))
}

func (c *regCheck) readSaw(i int32) string {
	o := &c.k.ops[i]
	if o.n == 0 && o.ts == history.TokenNone {
		return "nothing (key never written)"
	}
	return fmt.Sprintf("%s (%s)", c.k.value(o), c.tokText(i))
}

// prepare turns the records into elements, reads pinned to them and stale
// requirements, reporting what is wrong locally. It returns false when the
// key cannot be decided.
func (c *regCheck) prepare() bool {
	ops := c.k.ops
	byVal := make(map[uint64]int32, len(ops)/2)
	c.byVal = byVal
	dup := map[uint64]bool{}
	for i := range ops {
		o := &ops[i]
		if o.kind > writeFail {
			continue
		}
		if j, ok := byVal[o.val]; ok {
			if o.kind == writeFail || o.kind == writeStale {
				continue // a rejected duplicate cannot be what a read saw
			}
			if ops[j].kind == writeFail || ops[j].kind == writeStale {
				byVal[o.val] = int32(i)
				continue
			}
			dup[o.val] = true
			continue
		}
		byVal[o.val] = int32(i)
	}
	c.elem = make(map[int32]int, len(byVal))
	// Elements, pins and stale requirements made once at (at most) their
	// size: grown by appending, they were much of the check's garbage.
	var nElems, nPins, nStale int
	for i := range ops {
		switch o := &ops[i]; {
		case o.kind == writeOk || o.kind == writeInfo:
			nElems++
		case o.kind == writeStale && o.hwState != hwNone:
			nPins++
		case o.kind == writeStale:
			nStale++
		}
	}
	c.elems = make([]regElem, 0, nElems)
	c.pins = make([]pinReq, 0, nPins)
	c.stale = make([]staleReq, 0, nStale)
	for i := range ops {
		o := &ops[i]
		switch o.kind {
		case writeOk:
			if !c.acceptable(o) {
				c.report(c.notAcceptableKind(o), fmt.Sprintf("%s was accepted at %s although it carried %s%s", c.name(int32(i)), checkers.Secs(o.ret), c.tokText(int32(i)), tamperNote(o)), int32(i))
				continue
			}
			c.addElem(int32(i), true)
		case writeInfo:
			if c.acceptable(o) {
				c.addElem(int32(i), false)
			}
		case writeStale:
			if !c.acceptable(o) {
				continue // a token that must be rejected claims nothing, whatever the word
			}
			if o.hwState != hwNone {
				if c.badHighWater(int32(i)) {
					continue
				}
				c.pins = append(c.pins, pinReq{tok: o.hw, call: o.call, ret: o.ret, op: int32(i)})
				continue
			}
			theta := o.tok
			if c.sem.Equal == checkers.EqualAccept {
				if o.tok == math.MaxUint64 {
					c.report(checkers.KindFalseStaleRejection, fmt.Sprintf("%s was rejected as stale at %s, but no token can be newer than it", c.name(int32(i)), checkers.Secs(o.ret)), int32(i))
					continue
				}
				theta++
			}
			c.stale = append(c.stale, staleReq{theta: theta, ret: o.ret, op: int32(i)})
		}
	}
	for i := range ops {
		o := &ops[i]
		if o.kind != readOk {
			continue
		}
		ri := int32(i)
		if o.ts != history.TokenValid && o.n > 0 || o.ts == history.TokenMalformed {
			// A violation by itself; its value still says which write
			// took effect.
			c.report(checkers.KindReadWithoutToken, fmt.Sprintf("%s answered 200 at %s with %s: a 200 carries the token of the write that stored the value (a key never written answers 404)", c.name(ri), checkers.Secs(o.ret), c.readSaw(ri)), ri)
		} else if o.ts == history.TokenNone { // 404: the initial state
			if o.call > c.f0 {
				c.f0, c.f0By = o.call, ri
			}
			continue
		}
		wi, ok := byVal[o.val]
		if !ok || c.k.value(&ops[wi]) != c.k.value(o) {
			c.report(checkers.KindPhantomRead, fmt.Sprintf("%s returned %s at %s, a value no write in the history wrote", c.name(ri), c.readSaw(ri), checkers.Secs(o.ret)), ri)
			continue
		}
		if dup[o.val] {
			c.out.unknown = fmt.Sprintf("value %q was written more than once, so %s cannot be attributed", c.k.value(o), c.name(ri))
			return false
		}
		w := &ops[wi]
		switch {
		case w.kind == writeStale || w.kind == writeFail:
			c.report(checkers.KindReadOfRejectedWrite, fmt.Sprintf("%s returned %s at %s, but %s was rejected (%s) at %s", c.name(ri), c.readSaw(ri), checkers.Secs(o.ret), c.name(wi), rejectWord(w), checkers.Secs(w.ret)), ri, wi)
			continue
		case !c.acceptable(w):
			if w.kind == writeOk {
				continue // reported above
			}
			c.report(c.notAcceptableKind(w), fmt.Sprintf("%s had an unknown outcome but took effect (%s returned its value at %s) although it carried %s%s", c.name(wi), c.name(ri), checkers.Secs(o.ret), c.tokText(wi), tamperNote(w)), wi, ri)
			continue
		case o.ts == history.TokenValid && o.tok != w.tok:
			c.report(checkers.KindReadTokenMismatch, fmt.Sprintf("%s returned %s's value with %s at %s, but that write carried %s", c.name(ri), c.name(wi), c.tokText(ri), checkers.Secs(o.ret), c.tokText(wi)), ri, wi)
			continue
		case o.ret < w.call:
			c.report(checkers.KindFutureRead, fmt.Sprintf("%s returned %s at %s, before %s was invoked at %s", c.name(ri), c.readSaw(ri), checkers.Secs(o.ret), c.name(wi), checkers.Secs(w.call)), ri, wi)
			continue
		}
		e := &c.elems[c.elem[wi]]
		e.forced = true
		if o.call > e.g {
			e.g, e.gBy = o.call, ri
		}
		if o.ret < e.r {
			e.r, e.rBy = o.ret, ri
		}
	}
	c.buildGroups()
	sort.Slice(c.stale, func(i, j int) bool { return c.stale[i].theta < c.stale[j].theta })
	sort.Slice(c.pins, func(i, j int) bool { return c.pins[i].tok < c.pins[j].tok })
	// A reported mark needs a write that could have been accepted with it.
	pins := c.pins[:0]
	gi := 0
	for _, p := range c.pins {
		for gi < len(c.groups) && c.groups[gi].tok < p.tok {
			gi++
		}
		if gi == len(c.groups) || c.groups[gi].tok != p.tok {
			o := &ops[p.op]
			c.report(checkers.KindWrongHighWater, fmt.Sprintf("%s was rejected as stale at %s with high-water %d, but no write with that token could have been accepted", c.name(p.op), checkers.Secs(o.ret), o.hw), p.op)
			continue
		}
		pins = append(pins, p)
	}
	c.pins = pins
	return true
}

// badHighWater reports a stale rejection's high-water that contradicts
// itself: not a token number, or one that would have accepted the token.
func (c *regCheck) badHighWater(i int32) bool {
	o := &c.k.ops[i]
	why := ""
	switch {
	case o.hwState == hwBad:
		why = "which is not a token number"
	case o.hw < o.tok:
		why = fmt.Sprintf("%d, below the rejected token", o.hw)
	case o.hw == o.tok && c.sem.Equal == checkers.EqualAccept:
		c.report(checkers.KindFalseStaleRejection, fmt.Sprintf("%s was rejected as stale at %s with high-water %d: under equal=accept a mark equal to the token accepts it", c.name(i), checkers.Secs(o.ret), o.hw), i)
		return true
	default:
		return false
	}
	c.report(checkers.KindWrongHighWater, fmt.Sprintf("%s was rejected as stale at %s with a high-water %s", c.name(i), checkers.Secs(o.ret), why), i)
	return true
}

// acceptable says whether o's token could ever be accepted: a token of the
// grammar, and under authenticated semantics sealed and not forged
// (checkers.Issued).
func (c *regCheck) acceptable(o *record) bool {
	if o.ts != history.TokenValid {
		return false
	}
	return !c.sem.Authenticated || (o.sealed && !c.issued.Forged(o.tokh, o.call))
}

// notAcceptableKind names the violation of accepting o.
func (c *regCheck) notAcceptableKind(o *record) string {
	switch o.ts {
	case history.TokenNone:
		return checkers.KindMissingTokenAccepted
	case history.TokenMalformed:
		return checkers.KindMalformedTokenAccepted
	}
	return checkers.KindForgedTokenAccepted
}

func (c *regCheck) addElem(i int32, forced bool) {
	o := &c.k.ops[i]
	c.elem[i] = len(c.elems)
	c.elems = append(c.elems, regElem{tok: o.tok, call: o.call, g: o.call, r: o.ret, w: i, gBy: i, rBy: i, forced: forced})
}

func rejectWord(o *record) string {
	if o.kind == writeStale {
		return "stale"
	}
	return "definite failure"
}

func tamperNote(o *record) string {
	if o.tampered {
		return " (the strip proxy had tampered with it)"
	}
	return ""
}

// buildGroups sorts the elements into token groups and applies the
// structural rules of the declared semantics.
func (c *regCheck) buildGroups() {
	sort.Slice(c.elems, func(i, j int) bool {
		a, b := &c.elems[i], &c.elems[j]
		if a.tok != b.tok {
			return a.tok < b.tok
		}
		if a.forced != b.forced {
			return a.forced
		}
		return a.call < b.call
	})
	for i := 0; i < len(c.elems); {
		j := i
		for j < len(c.elems) && c.elems[j].tok == c.elems[i].tok {
			j++
		}
		g := regGroup{tok: c.elems[i].tok}
		for x := i; x < j; x++ {
			e := &c.elems[x]
			if e.forced {
				g.forced = append(g.forced, *e)
			} else if g.optional == nil {
				g.optional = e // sorted by call: the earliest
			}
		}
		if c.sem.Equal != checkers.EqualAccept {
			if len(g.forced) > 1 {
				a, b := g.forced[0], g.forced[1]
				c.report(checkers.KindReplayAccepted, fmt.Sprintf("%s %s and %s %s: two writes with token %d were both accepted, but equal tokens must be rejected",
					c.name(a.w), c.applied(&a), c.name(b.w), c.applied(&b), g.tok), a.w, a.rBy, b.w, b.rBy)
				g.forced = g.forced[:1]
			}
			if len(g.forced) > 0 {
				g.optional = nil // an equal token can never be accepted after it
			}
		}
		c.groups = append(c.groups, g)
		i = j
	}
}

// applied says how we know e took effect.
func (c *regCheck) applied(e *regElem) string {
	w := &c.k.ops[e.w]
	if w.kind == writeOk {
		return "was accepted at " + checkers.Secs(w.ret)
	}
	return fmt.Sprintf("had an unknown outcome but took effect (%s returned its value at %s)", c.name(e.rBy), checkers.Secs(c.k.ops[e.rBy].ret))
}

// groupStats summarises a forced group for the search.
type groupStats struct {
	orderable bool
	minR      int64
	minRBy    int32 // element whose R is minR
	gMax      int64
	gMaxBy    int32 // op whose call is gMax
	cA        int64 // earliest call of a forced element that can go first
	cABy      int32 // that element's write
	stuck     []regElem
}

func (c *regCheck) stats(g *regGroup) groupStats {
	s := groupStats{minR: history.Never, gMax: negInf, cA: history.Never, minRBy: -1, gMaxBy: -1, cABy: -1}
	minR2 := history.Never
	for i := range g.forced {
		e := &g.forced[i]
		if e.r < s.minR {
			minR2 = s.minR
			s.minR, s.minRBy = e.r, int32(i)
		} else if e.r < minR2 {
			minR2 = e.r
		}
		if e.g > s.gMax {
			s.gMax, s.gMaxBy = e.g, e.gBy
		}
	}
	for i := range g.forced {
		e := &g.forced[i]
		other := s.minR
		if int32(i) == s.minRBy {
			other = minR2
		}
		if e.g <= other && e.call < s.cA {
			s.cA, s.cABy = e.call, e.w
		}
	}
	if len(g.forced) == 1 {
		s.orderable = true
		return s
	}
	s.stuck = orderGroup(g.forced)
	s.orderable = s.stuck == nil
	return s
}

// orderGroup runs the backward greedy on an equal-token group: repeatedly
// place last an element whose R is at least the largest g of the others,
// the one with the largest g among those. It returns nil when the group can
// be ordered, else the elements left when no element can go last.
func orderGroup(es []regElem) []regElem {
	n := len(es)
	byG := make([]int, n)
	byR := make([]int, n)
	for i := range byG {
		byG[i], byR[i] = i, i
	}
	sort.Slice(byG, func(a, b int) bool { return es[byG[a]].g > es[byG[b]].g })
	sort.Slice(byR, func(a, b int) bool { return es[byR[a]].r > es[byR[b]].r })
	removed := make([]bool, n)
	// next[q] skips removed positions of byG (path-compressed).
	next := make([]int, n+1)
	for i := range next {
		next[i] = i
	}
	alive := func(q int) int {
		r := q
		for r < n && removed[byG[r]] {
			if next[r] == r {
				next[r] = r + 1
			}
			r = next[r]
		}
		for q < r && next[q] != q {
			q, next[q] = next[q], r
		}
		return r
	}
	rp := 0
	var heap gHeap // candidates with r >= current max g, by g
	for left := n; left > 0; left-- {
		gp := alive(0)
		m := byG[gp]
		second := negInf
		if q := alive(gp + 1); q < n {
			second = es[byG[q]].g
		}
		if es[m].r >= second {
			removed[m] = true
			continue
		}
		for rp < n && es[byR[rp]].r >= es[m].g {
			heap.push(byR[rp], es)
			rp++
		}
		x := -1
		for heap.len() > 0 {
			y := heap.pop(es)
			if !removed[y] && y != m {
				x = y
				break
			}
		}
		if x < 0 {
			var stuck []regElem
			for i := range es {
				if !removed[i] {
					stuck = append(stuck, es[i])
				}
			}
			return stuck
		}
		removed[x] = true
	}
	return nil
}

// gHeap is a max-heap of element indices by g.
type gHeap struct{ a []int }

func (h *gHeap) len() int { return len(h.a) }
func (h *gHeap) push(i int, es []regElem) {
	h.a = append(h.a, i)
	for j := len(h.a) - 1; j > 0; {
		p := (j - 1) / 2
		if es[h.a[p]].g >= es[h.a[j]].g {
			break
		}
		h.a[p], h.a[j] = h.a[j], h.a[p]
		j = p
	}
}
func (h *gHeap) pop(es []regElem) int {
	top := h.a[0]
	last := len(h.a) - 1
	h.a[0] = h.a[last]
	h.a = h.a[:last]
	for j := 0; ; {
		l, r, big := 2*j+1, 2*j+2, j
		if l < len(h.a) && es[h.a[l]].g > es[h.a[big]].g {
			big = l
		}
		if r < len(h.a) && es[h.a[r]].g > es[h.a[big]].g {
			big = r
		}
		if big == j {
			break
		}
		h.a[big], h.a[j] = h.a[j], h.a[big]
		j = big
	}
	return top
}

// search walks the token groups with the staircase of non-dominated states.
func (c *regCheck) search() {
	front := []regState{{f: c.f0, fBy: c.f0By, d: history.Never, dBy: -1}}
	si, pi := 0, 0
	for gi := range c.groups {
		g := &c.groups[gi]
		for si < len(c.stale) && c.stale[si].theta <= g.tok {
			s := &c.stale[si]
			front = foldDeadline(front, s.ret, s.op)
			si++
		}
		// Rejections that saw this group's mark: its first element must
		// come before each returned, and the next group after each began.
		pinned := false
		pinG, pinGBy := negInf, int32(-1)
		for pi < len(c.pins) && c.pins[pi].tok == g.tok {
			p := &c.pins[pi]
			front = foldDeadline(front, p.ret, p.op)
			if p.call > pinG {
				pinG, pinGBy = p.call, p.op
			}
			pinned = true
			pi++
		}
		if len(front) == 0 {
			c.explainFailure(gi)
			return
		}
		if len(g.forced) == 0 && pinned {
			u := g.optional
			i := firstWithD(front, u.call)
			if i < 0 {
				c.explainFailure(gi)
				return
			}
			best := regState{f: front[i].f, fBy: front[i].fBy, d: history.Never, dBy: -1}
			if u.call > best.f {
				best.f, best.fBy = u.call, u.w
			}
			if pinG > best.f {
				best.f, best.fBy = pinG, pinGBy
			}
			front = append(front[:0], best)
			continue
		}
		if len(g.forced) == 0 {
			u := g.optional
			i := firstWithD(front, u.call)
			if i < 0 {
				continue
			}
			nf, nBy := front[i].f, front[i].fBy
			if u.call > nf {
				nf, nBy = u.call, u.w
			}
			for len(front) > 0 && front[len(front)-1].f >= nf {
				front = front[:len(front)-1]
			}
			if len(front) == 0 || front[len(front)-1].d != history.Never {
				front = append(front, regState{f: nf, fBy: nBy, d: history.Never, dBy: -1})
			}
			continue
		}
		st := c.stats(g)
		if !st.orderable {
			c.explainFailure(gi)
			return
		}
		best := regState{f: history.Never, d: history.Never, dBy: -1}
		if i := firstWithD(front, st.cA); i >= 0 && front[i].f <= st.minR {
			best.f, best.fBy = front[i].f, front[i].fBy
			if st.gMax > best.f {
				best.f, best.fBy = st.gMax, st.gMaxBy
			}
		}
		if u := g.optional; u != nil && best.f == history.Never {
			if i := firstWithD(front, u.call); i >= 0 && front[i].f <= st.minR && u.call <= st.minR {
				best.f, best.fBy = front[i].f, front[i].fBy
				if u.call > best.f {
					best.f, best.fBy = u.call, u.w
				}
				if st.gMax > best.f {
					best.f, best.fBy = st.gMax, st.gMaxBy
				}
			}
		}
		if best.f == history.Never {
			c.explainFailure(gi)
			return
		}
		if pinG > best.f {
			best.f, best.fBy = pinG, pinGBy
		}
		front = append(front[:0], best)
	}
	if si < len(c.stale) {
		c.explainFailure(len(c.groups))
		return
	}
	if front[len(front)-1].d != history.Never {
		c.explainFailure(len(c.groups))
	}
}

// foldDeadline adds a stale deadline to every state (min), keeping the
// staircase: the states with d >= dl collapse into the first of them.
func foldDeadline(front []regState, dl int64, by int32) []regState {
	j := sort.Search(len(front), func(i int) bool { return front[i].d >= dl })
	if j == len(front) {
		return front
	}
	front[j].d, front[j].dBy = dl, by
	front = front[:j+1]
	if front[j].f > dl {
		front = front[:j]
	}
	return front
}

// firstWithD is the first state whose pending deadline allows a point at
// t (-1: none). States are alive (f <= d), so max(f, t) <= d follows.
func firstWithD(front []regState, t int64) int {
	i := sort.Search(len(front), func(i int) bool { return front[i].d >= t })
	if i == len(front) {
		return -1
	}
	return i
}
