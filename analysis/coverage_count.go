package analysis

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/fencecheck/fencecheck/fencing"
	"github.com/fencecheck/fencecheck/history"
	"github.com/fencecheck/fencecheck/nemesis"
)

// The counting of coverage's situations (coverage.go) over the operations,
// per key and lock, each situation once.

// opsIndex is the operations coverage reads, per key and lock.
type opsIndex struct {
	acquires map[string][]timedOp // ok acquires per lock, by call: grants, each one reached the issuer
	events   map[string][]lockEvent
	writes   map[string][]timedOp  // every write per key, by call
	stored   map[string][]storedAt // ok writes per key, by return
	tampered map[string][]int64    // tampered writes that reached the resource, by strip mode
	forged   []int64               // writes with a forged token that reached the resource
	nodes    []string              // the nodes operations were sent to, by timedOp.node
}

type timedOp struct {
	id                   int64
	call, ret, completed int64
	n                    uint64
	valid, ok, failed    bool
	// timedOut: it ended info because its client gave up waiting (not
	// refused); node: the node it was sent to, by opsIndex.nodes.
	timedOut bool
	node     int32
}

// reached: the system answered (accepted, or rejected for certain). Only
// such an operation completes a situation: one that ended info may never
// have arrived (connection refused while its node restarted), so the
// system may never have been put in the situation at all.
func (t timedOp) reached() bool { return t.ok || t.failed }

// storedAt is an accepted write as the key's mark reads it (marker): when
// it returned and its token's number; 16 bytes, not a timedOp's 48 (a
// count's index is built anew each live count of a run).
type storedAt struct {
	ret int64
	n   uint64
}

// lockEvent is one lock's grant, renew or release for the free-lock count.
type lockEvent struct {
	at    int64
	kind  byte // 'g' grant (at call), 'i' a grant whose answer was lost (until: its completion), 'r' renew, 'x' release
	until int64
	raw   string
	id    int64
}

func indexOps(ops *history.Ops) *opsIndex {
	h := &opsIndex{acquires: map[string][]timedOp{}, events: map[string][]lockEvent{}, writes: map[string][]timedOp{},
		stored: map[string][]storedAt{}, tampered: map[string][]int64{}}
	// Each key's lists by Brief.KeyID (no map per operation), into the
	// maps at the end: a key has an entry where it has an operation.
	type lists struct {
		key              string
		acquires, writes []timedOp
		stored           []storedAt
		events           []lockEvent
	}
	var byID []*lists
	// Each list made once at (about) its size: grown by appending, the
	// lists of a history of millions were most of the check's allocation,
	// and their copies were alive beside the checkers' records.
	type sizes struct{ acquires, writes, stored, events int }
	var size []sizes
	for i := range ops.Len() {
		b := ops.Brief(i)
		for int(b.KeyID) >= len(size) {
			size = append(size, sizes{})
		}
		n := &size[b.KeyID]
		ok := b.Outcome == history.OutcomeOk
		switch b.F {
		case history.Acquire:
			if ok {
				n.acquires++
				n.events++
			} else if b.Outcome == history.OutcomeInfo {
				n.events++
			}
		case history.Renew, history.Release:
			if ok {
				n.events++
			}
		case history.Write:
			n.writes++
			if ok {
				n.stored++
			}
		}
	}
	var maxIssued uint64
	var candidates []int // writes that may carry a forged token (below)
	var o history.Op
	for i := range ops.Len() {
		ops.Load(i, &o)
		kid := ops.Brief(i).KeyID
		for int(kid) >= len(byID) {
			byID = append(byID, nil)
		}
		l := byID[kid]
		if l == nil {
			n := size[kid]
			l = &lists{key: o.Key, acquires: make([]timedOp, 0, n.acquires), writes: make([]timedOp, 0, n.writes),
				stored: make([]storedAt, 0, n.stored), events: make([]lockEvent, 0, n.events)}
			byID[kid] = l
		}
		t := timedOp{id: o.ID, call: o.Call, ret: o.Return, completed: o.Completed, n: o.Token.N,
			valid: o.Token.State == history.TokenValid, ok: o.Outcome == history.OutcomeOk, failed: o.Outcome == history.OutcomeFail,
			timedOut: o.Outcome == history.OutcomeInfo && o.Error == fencing.ErrWordTimeout}
		if o.F == history.Write {
			t.node = h.nodeID(o.Node)
		}
		switch o.F {
		case history.Acquire:
			switch {
			case t.ok && t.valid:
				l.acquires = append(l.acquires, t)
				l.events = append(l.events, lockEvent{at: o.Call, kind: 'g', until: o.Return, raw: o.Token.Raw, id: o.ID})
				maxIssued = max(maxIssued, o.Token.N)
			case o.Outcome == history.OutcomeInfo:
				l.events = append(l.events, lockEvent{at: o.Call, kind: 'i', until: o.Completed, id: o.ID})
			}
		case history.Renew:
			if t.ok {
				l.events = append(l.events, lockEvent{at: o.Return, kind: 'r', until: o.Return})
			}
		case history.Release:
			if t.ok {
				l.events = append(l.events, lockEvent{at: o.Return, kind: 'x', raw: o.Token.Raw})
			}
		case history.Write:
			l.writes = append(l.writes, t)
			if t.ok && t.valid {
				l.stored = append(l.stored, storedAt{ret: t.ret, n: t.n})
			}
			if o.Tampered != "" && t.reached() {
				h.tampered[o.Tampered] = append(h.tampered[o.Tampered], o.ID)
			}
			// Above every number returned so far: it may be above every
			// number returned at all (a write's own token was most often
			// returned before it began, and is not a candidate).
			if o.Outcome != history.OutcomeInfo && o.Tampered == "" && t.valid && o.Token.N > maxIssued {
				candidates = append(candidates, i)
			}
		}
	}
	for _, l := range byID {
		if l == nil {
			continue
		}
		if len(l.acquires) > 0 {
			h.acquires[l.key] = l.acquires
		}
		if len(l.writes) > 0 {
			h.writes[l.key] = l.writes
		}
		if len(l.stored) > 0 {
			h.stored[l.key] = l.stored
		}
		if len(l.events) > 0 {
			h.events[l.key] = l.events
		}
	}
	// A forged token: one whose spelling no acquire returned, above every
	// number any returned (a straggler's or a garbled token is neither).
	var issued map[string]bool
	for _, i := range candidates {
		ops.Load(i, &o)
		if o.Token.N <= maxIssued {
			continue
		}
		if issued == nil {
			issued = map[string]bool{}
			var a history.Op
			for j := range ops.Len() {
				if ops.F(j) != history.Acquire {
					continue
				}
				ops.Load(j, &a)
				if a.Outcome == history.OutcomeOk && a.Token.State == history.TokenValid {
					issued[a.Token.Raw] = true
				}
			}
		}
		if !issued[o.Token.Raw] {
			h.forged = append(h.forged, o.ID)
		}
	}
	for _, s := range h.stored {
		slices.SortFunc(s, func(x, y storedAt) int { return cmp.Compare(x.ret, y.ret) })
	}
	for _, e := range h.events {
		slices.SortStableFunc(e, func(x, y lockEvent) int { return cmp.Compare(x.at, y.at) })
	}
	return h
}

// nodeID is node's index in h.nodes (a run has a handful).
func (h *opsIndex) nodeID(node string) int32 {
	if i := slices.Index(h.nodes, node); i >= 0 {
		return int32(i)
	}
	h.nodes = append(h.nodes, node)
	return int32(len(h.nodes) - 1)
}

// overtaken counts the writes with a valid token still in flight at the
// resource when a newer token's write on their key was accepted: the
// window a resource that checks the mark and then writes, in two steps,
// leaves open. Such a write counts only where it reached the resource
// after the newer one was accepted: answered (accepted or refused), or
// held inside its node (heldUntil: a pause of the node it was sent to
// froze it while in flight; its client gave up, but the request waits
// in the frozen node and is served when it thaws).
func (h *opsIndex) overtaken(heldUntil func(w timedOp) (int64, bool)) (int, []int64) {
	n, ex := 0, []int64(nil)
	for _, ws := range h.writes { // by call
		for i, w := range ws {
			if !w.valid {
				continue
			}
			end := w.ret
			if !w.reached() {
				held, ok := heldUntil(w)
				if !ok {
					continue
				}
				end = held
			}
			for _, newer := range ws[i+1:] {
				if newer.call >= end {
					break
				}
				if newer.ok && newer.valid && newer.n > w.n && newer.ret < end {
					n++
					ex = append(ex, w.id)
					break
				}
			}
		}
	}
	slices.Sort(ex)
	return n, ex
}

// markBefore is the key's high-water mark as the clients saw it: the
// newest token of the writes accepted (returned) before t.
func (h *opsIndex) markBefore(key string, t int64) uint64 {
	m := marker{stored: h.stored[key]}
	return m.before(t)
}

// marker reads one key's mark at times that only grow, each accepted write
// passed once.
type marker struct {
	stored []storedAt
	next   int
	mark   uint64
}

func (m *marker) before(t int64) uint64 {
	for m.next < len(m.stored) && m.stored[m.next].ret < t {
		m.mark = max(m.mark, m.stored[m.next].n)
		m.next++
	}
	return m.mark
}

// regrantsAfter counts the faults after which a lock granted before the
// fault began was granted again once the fault ended (the node was back).
func (h *opsIndex) regrantsAfter(faults []Fault) (int, []int64) {
	n, ex := 0, []int64(nil)
	for _, f := range faults {
		first := int64(-1)
		for _, acq := range h.acquires {
			before := slices.ContainsFunc(acq, func(a timedOp) bool { return a.ret < f.Start })
			if !before {
				continue
			}
			if i := slices.IndexFunc(acq, func(a timedOp) bool { return a.call >= f.Stop }); i >= 0 && (first < 0 || acq[i].id < first) {
				first = acq[i].id
			}
		}
		if first >= 0 {
			n++
			ex = append(ex, first)
		}
	}
	return n, ex
}

// clockBackRegrants counts the clock faults that stepped an issuer's clock
// back between two grants on one lock: a step back is a step to a negative
// offset at its start, the end of a step forward, or a strobe (back once
// every other period).
func (h *opsIndex) clockBackRegrants(faults []Fault) (int, []int64) {
	n, ex := 0, []int64(nil)
	for _, f := range faults {
		var around func(a, b timedOp) bool
		switch f.Mode() {
		case "step":
			var off int64
			fmt.Sscan(plainJSON(f.Details["offset_ms"]), &off)
			at := f.Start
			if off > 0 {
				at = f.Stop
			} else if off == 0 {
				continue
			}
			around = func(a, b timedOp) bool { return a.ret < at && b.call > at }
		case "strobe":
			// Two grants of one lock in the strobe at least two periods
			// apart have a step back between them (not necessarily
			// between consecutive ones: a hot lock is granted every few
			// milliseconds).
			var period int64
			fmt.Sscan(plainJSON(f.Details["period_ms"]), &period)
			if id := h.spanGranted(f.Start, f.Stop, 2*period*int64(time.Millisecond)); id >= 0 {
				n++
				ex = append(ex, id)
			}
			continue
		default:
			continue
		}
		if id := h.pairGranted(around); id >= 0 {
			n++
			ex = append(ex, id)
		}
	}
	return n, ex
}

// spanGranted finds a lock granted twice in [from, to], the second call at
// least gap after the first's return, and returns the second's id (-1:
// none).
func (h *opsIndex) spanGranted(from, to, gap int64) int64 {
	best := int64(-1)
	for _, acq := range h.acquires {
		i := slices.IndexFunc(acq, func(a timedOp) bool { return a.call >= from })
		if i < 0 {
			continue
		}
		for _, b := range acq[i+1:] {
			if b.call > to {
				break
			}
			if b.call-acq[i].ret >= gap {
				if best < 0 || b.id < best {
					best = b.id
				}
				break
			}
		}
	}
	return best
}

// pairGranted finds consecutive grants on one lock that around accepts,
// and returns the second's id (-1: none).
func (h *opsIndex) pairGranted(around func(a, b timedOp) bool) int64 {
	best := int64(-1)
	for _, acq := range h.acquires {
		for i := 1; i < len(acq); i++ {
			if around(acq[i-1], acq[i]) && (best < 0 || acq[i].id < best) {
				best = acq[i].id
				break
			}
		}
	}
	return best
}

// separatedGrants counts partitions whose groups put nodes holding issuer
// state on two sides while a lock was granted. (Clients reach the issuer
// through nodes outside the groups, adapters, as often as through the
// replicas themselves, so which side granted is not asked.)
func (h *opsIndex) separatedGrants(faults []Fault, issuers map[string]bool, oneWay bool) (int, []int64) {
	n, ex := 0, []int64(nil)
	for _, f := range faults {
		if f.Nemesis != nemesis.Partition || f.Instant() {
			continue
		}
		if !separatesIssuers(f, issuers, oneWay) {
			continue
		}
		first := int64(-1)
		for _, acq := range h.acquires {
			for _, a := range acq {
				if a.call >= f.Start && a.call <= f.Stop && (first < 0 || a.id < first) {
					first = a.id
				}
			}
		}
		if first >= 0 {
			n++
			ex = append(ex, first)
		}
	}
	return n, ex
}

// separatesIssuers says whether a partition put nodes holding issuer state
// (all nodes but the clients when issuers is nil) out of each other's
// reach: on two sides of its groups, or, for a grudge (the majorities
// ring), one unable to reach another. With oneWay, only a cut one way
// counts: groups cut one way, or a grudge of a against b while b reaches a;
// and where the cut records the leader the target named as it was drawn
// (one holding issuer state), only a replica that could not reach the
// leader while the leader still reached it: the leader then keeps
// granting, sure of that replica, while the replica may take over. The
// other way the leader cannot reach the replica, the leader is the one
// that notices.
func separatesIssuers(f Fault, issuers map[string]bool, oneWay bool) bool {
	holds := func(node string) bool { return issuers == nil && node != "clients" || issuers[node] }
	var leader string
	if oneWay && json.Unmarshal(f.Details["leader"], &leader) == nil && !holds(leader) {
		leader = ""
	}
	// cutOff: a, holding issuer state, cannot reach b, holding it too
	// (mutual: nor b a). One way: b reaches a, and is the leader when one
	// is recorded.
	cutOff := func(a, b string, mutual bool) bool {
		if !holds(a) || !holds(b) || oneWay && mutual {
			return false
		}
		return leader == "" || a != leader && b == leader
	}
	var groups [][]string
	if json.Unmarshal(f.Details["groups"], &groups) == nil && len(groups) > 0 {
		if oneWay && plainJSON(f.Details["one_way"]) != "true" {
			return false
		}
		// One way, the first group cannot reach the second; both ways,
		// every group cannot reach every other.
		for i, g := range groups {
			for j, h := range groups {
				if i == j || oneWay && i != 0 {
					continue
				}
				for _, a := range g {
					for _, b := range h {
						if cutOff(a, b, !oneWay) {
							return true
						}
					}
				}
			}
		}
		return false
	}
	var grudge map[string][]string
	if json.Unmarshal(f.Details["grudge"], &grudge) != nil {
		return false
	}
	for a, cut := range grudge {
		for _, b := range cut {
			if cutOff(a, b, slices.Contains(grudge[b], a)) {
				return true
			}
		}
	}
	return false
}

// idlePeriod is one idle period of a key or lock: from its start to the
// call of the operation that ended it (ns), and that operation's invoke
// index.
type idlePeriod struct{ from, to, id int64 }

// idleStale finds the idle periods of d or more on a key that ended with a
// write that reached the resource with a token older than the key's mark.
// Idle: no write that may have taken effect (accepted, or with an unknown
// outcome, until its completion; one never completed keeps the key busy
// for good); a rejected write changed nothing, so it does not end the idle
// time.
func (h *opsIndex) idleStale(d time.Duration) []idlePeriod {
	var out []idlePeriod
	for key, ws := range h.writes {
		m := marker{stored: h.stored[key]}
		busy := int64(-1) // latest end of a write so far (Never: one may still land)
		counted := false  // this idle period's stale write was counted (retries are not)
		for _, w := range ws {
			mark := m.before(w.call)
			if !counted && busy >= 0 && busy != history.Never && w.call-busy >= int64(d) && w.valid && w.n < mark && w.reached() {
				out = append(out, idlePeriod{busy, w.call, w.id})
				counted = true
			}
			if w.failed {
				continue
			}
			counted = false
			end := w.completed
			if busy == history.Never || end == history.Never {
				busy = history.Never
			} else {
				busy = max(busy, end)
			}
		}
	}
	return out
}

// freeRegrants finds the grants of a lock that had been free for d or
// more: its last holder released it, or the lease ran out (lease after the
// grant or renew returned), and no grant was possible meanwhile. (A grant
// is an ok acquire: it reached the issuer.)
func (h *opsIndex) freeRegrants(d, lease time.Duration) []idlePeriod {
	var out []idlePeriod
	for _, es := range h.events {
		held := int64(-1) // the latest the lock may have been held to (-1: never granted)
		token := ""
		// ghost is how long the lock had been free when an acquire whose
		// answer was lost was sent (-1: none since the last grant): if it
		// granted, that was the grant after the free time; if not, the next
		// grant is. Either way one situation, counted at the next grant,
		// its period running to that grant (which of the two the issuer
		// saw is not known, so a fault in either disqualifies it).
		ghost, ghostFrom := int64(-1), int64(0)
		for _, e := range es {
			switch e.kind {
			case 'g':
				switch {
				case held >= 0 && held != history.Never && e.at-held >= int64(d):
					out = append(out, idlePeriod{held, e.at, e.id})
				case ghost >= int64(d):
					out = append(out, idlePeriod{ghostFrom, e.at, e.id})
				}
				ghost = -1
				if held != history.Never {
					held = max(held, e.until+int64(lease))
				}
				token = e.raw
			case 'i':
				// A grant that may have happened before its answer was lost:
				// no one knows its token to renew it, so its lease ends at
				// most a lease after the completion (never, without one).
				if ghost < 0 && held >= 0 && held != history.Never {
					ghost, ghostFrom = e.at-held, held
				}
				if e.until == history.Never || held == history.Never {
					held = history.Never
				} else {
					held = max(held, e.until+int64(lease))
				}
			case 'r':
				if held != history.Never {
					held = max(held, e.until+int64(lease))
				}
			case 'x':
				if e.raw == token && held != history.Never {
					held = min(held, e.at)
				}
			}
		}
	}
	return out
}

// staleAfter counts the faults after which some key's first write that
// reached the resource once the node was back carried a token older than
// the key's mark from before the fault. Writes that ended info on the way
// are passed over (a node still coming up refuses them) unless their token
// was not older: such a one may have landed and raised the mark again.
func (h *opsIndex) staleAfter(faults []Fault) (int, []int64) {
	n, ex := 0, []int64(nil)
	for _, f := range faults {
		first := int64(-1)
		for key, ws := range h.writes {
			i := slices.IndexFunc(ws, func(w timedOp) bool { return w.call >= f.Stop })
			if i < 0 {
				continue
			}
			mark := h.markBefore(key, f.Start)
			for _, w := range ws[i:] {
				if !w.valid {
					continue // a stripped or garbled token changes no mark
				}
				if w.reached() {
					if w.n < mark && (first < 0 || w.id < first) {
						first = w.id
					}
					break
				}
				if w.n >= mark {
					break
				}
			}
		}
		if first >= 0 {
			n++
			ex = append(ex, first)
		}
	}
	return n, ex
}

// replays counts writes that reached the resource with the very token
// their key's mark is (a write with that token accepted and returned
// before).
func (h *opsIndex) replays() (int, []int64) {
	n, ex := 0, []int64(nil)
	for key, ws := range h.writes {
		m := marker{stored: h.stored[key]}
		for _, w := range ws {
			if w.valid && w.reached() && w.n > 0 && w.n == m.before(w.call) {
				n++
				ex = append(ex, w.id)
			}
		}
	}
	slices.Sort(ex)
	return n, ex
}
