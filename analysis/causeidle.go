package analysis

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/fencing"
	"github.com/fencecheck/fencecheck/history"
	"github.com/fencecheck/fencecheck/nemesis"
)

// Idle time as a cause. A resource that forgets a key's mark once the key
// has had no accepted write for a while (an expiry, an eviction), or an
// issuer that forgets a free lock's counter, breaks fencing with no fault
// at all: the violation follows quiet time, not a crash. So the cause rule
// reads two more facts from the history:
//
//   - what the resource still knew: a write with a token at least as new as
//     the accepted stale one, rejected as stale by the same node (a history
//     that names no node proves nothing of one replica by another) before the
//     stale one was sent, proves the mark outlived every fault that had
//     ended by then; those faults no longer explain it (the idle probes'
//     ladders leave such rejections every 250 ms);
//   - how long the key or lock had been left alone: when no fault explains
//     a violation and that time is at least the shortest idle scale, the
//     idle time is named as its cause, not the last fault event before it.

// idleCauseMin is the shortest idle time named as a cause: the shortest
// idle scale coverage counts.
var idleCauseMin = int64(IdleScales[0])

// maxCauseScan bounds the operations the idle-time rule looks back over in
// one analysis, every violation's scans together: a history of millions
// with a violation on most writes to keys written seldom must not take
// minutes. Past it, the rule is the fault rule alone.
var maxCauseScan int64 = 20_000_000

// scanStep counts one operation looked back over; false once the budget
// is spent.
func (r *Result) scanStep() bool {
	r.causeScanned++
	return r.causeScanned <= maxCauseScan
}

// keyRecord is what the history shows of a key in the window of the write
// w that shows a write-side violation.
type keyRecord struct {
	// held is the call of the latest write rejected as stale on w's node
	// with a token at least w's, completed before w was sent (-1: none);
	// heldToken its token.
	held      int64
	heldToken string
	// from is where the window begins, and acts the writes in it that may
	// have taken effect (accepted, or of unknown outcome); known: the look
	// back ran within its budget.
	from  int64
	acts  []activity
	known bool
}

// activity is an operation that kept a key or lock in use, from its call
// to its completion (history.Never: for good).
type activity struct{ call, end int64 }

// longestGap is the longest time in [from, to) that no activity covered:
// its start and length (0 when none).
func longestGap(acts []activity, from, to int64) (int64, int64) {
	slices.SortFunc(acts, func(a, b activity) int { return cmp.Compare(a.call, b.call) })
	covered, at, best := from, int64(0), int64(0)
	for _, a := range acts {
		if a.call > covered && min(a.call, to)-covered > best {
			at, best = covered, min(a.call, to)-covered
		}
		if a.end == history.Never {
			return at, best
		}
		covered = max(covered, a.end)
	}
	if to-covered > best {
		at, best = covered, to-covered
	}
	return at, best
}

// opLookBack is how long before a window's start an operation may have
// been invoked and still be in flight in it (the workloads' operation
// timeouts are a second or two).
const opLookBack = int64(5 * time.Second)

// scanBack calls fn for each operation on w's key or lock invoked before w
// and at most opLookBack before from, latest invoked first, looking back at
// most maxWindowScan operations; false when the budget ran out.
func (r *Result) scanBack(w *history.Op, from int64, fn func(i int, b history.Brief)) bool {
	at := r.Ops.Find(w.ID)
	if at < 0 {
		return true
	}
	key := r.Ops.Brief(at).KeyID
	for i := at - 1; i >= 0 && i >= at-maxWindowScan; i-- {
		if !r.scanStep() {
			return false
		}
		b := r.Ops.Brief(i)
		if b.Call < from-opLookBack {
			return true
		}
		if b.KeyID == key && b.Call < w.Call {
			fn(i, b)
		}
	}
	return true
}

// scanKey reads the key's record in the window from from to w.
func (r *Result) scanKey(w *history.Op, from int64) keyRecord {
	rec := keyRecord{held: -1}
	var acts []activity
	var o history.Op
	ok := r.scanBack(w, from, func(i int, b history.Brief) {
		if b.F != history.Write {
			return
		}
		switch b.Outcome {
		case history.OutcomeOk, history.OutcomeInfo:
			if b.Completed == history.Never || b.Completed > from {
				acts = append(acts, activity{b.Call, b.Completed})
			}
		case history.OutcomeFail:
			if rec.held >= 0 || b.Completed >= w.Call {
				return
			}
			r.Ops.Load(i, &o)
			if o.Error == fencing.ErrWordStale && o.Token.State == history.TokenValid && w.Token.State == history.TokenValid &&
				o.Token.N >= w.Token.N && o.Node != "" && o.Node == w.Node {
				rec.held, rec.heldToken = o.Call, o.Token.Raw
			}
		}
	})
	if !ok {
		return keyRecord{held: -1}
	}
	rec.from, rec.acts, rec.known = from, acts, true
	return rec
}

// windowStart is the earliest call among ops but the one that shows the
// violation: where its window begins.
func windowStart(ops []*history.Op, shown *history.Op) int64 {
	from := shown.Call
	for _, op := range ops {
		if op != shown {
			from = min(from, op.Call)
		}
	}
	return from
}

// writeWindow reads the key in a write-side violation's window (keyRecord)
// and the write that shows it; the zero record and nil for other kinds.
func (r *Result) writeWindow(a *checkers.Anomaly, ops []*history.Op) (keyRecord, *history.Op) {
	rec := keyRecord{held: -1}
	if r.Ops == nil || (a.Kind != checkers.KindStaleWriteAccepted && a.Kind != checkers.KindReplayAccepted) {
		return rec, nil
	}
	w := shows(ops)
	if w == nil || w.F != history.Write || w.Outcome != history.OutcomeOk {
		return rec, nil
	}
	rec = r.scanKey(w, windowStart(ops, w))
	if a.Kind != checkers.KindStaleWriteAccepted {
		// An equal token's acceptance says no more than that the mark was
		// not above it: a rejection of one at least as new proves nothing
		// forgotten.
		rec.held = -1
	}
	return rec, w
}

// shows is the latest invoked of ops: the operation that shows a violation
// (checkers.Brief.Shows).
func shows(ops []*history.Op) *history.Op {
	var out *history.Op
	for _, op := range ops {
		if out == nil || op.ID > out.ID {
			out = op
		}
	}
	return out
}

// heldWords say, after an idle time no fault explains, that the resource
// still knew the mark after the faults.
func heldWords(rec keyRecord) string {
	return fmt.Sprintf(", and the resource still rejected token %s at %s, after every fault that can lose a mark had ended", rec.heldToken, checkers.Secs(rec.held))
}

// heldWindow is the cause rule's window words once a rejection narrowed it.
func heldWindow(rec keyRecord) string {
	return fmt.Sprintf("since the resource last rejected a token at least as new (%s, at %s)", rec.heldToken, checkers.Secs(rec.held))
}

// idleTime is the longest quiet idle time in a violation's window (no
// activity on its key or lock, and no fault of busy, the faults that can
// lose state which explain it), from and to, in words: false when it was
// shorter than idleCauseMin or is not known.
func (r *Result) idleTime(a *checkers.Anomaly, ops []*history.Op, rec keyRecord, w *history.Op, busy []int) (int64, int64, string, bool) {
	faults := func(acts []activity) []activity {
		for _, fi := range busy {
			f := r.Faults[fi]
			acts = append(acts, activity{f.Start, f.Stop})
		}
		return acts
	}
	switch {
	case w != nil:
		if !rec.known {
			return 0, 0, "", false
		}
		from, idle := longestGap(faults(rec.acts), rec.from, w.Call)
		if idle < idleCauseMin {
			return 0, 0, "", false
		}
		return from, from + idle, fmt.Sprintf("idle time (a resource that forgets a key's mark after idle time, by an expiry or an eviction, does this): the key had no write that may have taken effect for %s (%s–%s) since the overwritten write",
			checkers.Secs(idle), strings.TrimSuffix(checkers.Secs(from), " s"), checkers.Secs(from+idle)), true
	case a.Kind == checkers.KindTokenRegression || a.Kind == checkers.KindDuplicateToken:
		g := shows(ops)
		if g == nil || g.F != history.Acquire || r.Ops == nil || r.Semantics.Scope == checkers.ScopeGlobal {
			return 0, 0, "", false
		}
		start := windowStart(ops, g)
		acts, ok := r.lockActs(g, start)
		if !ok {
			return 0, 0, "", false
		}
		from, idle := longestGap(faults(acts), start, g.Call)
		if idle < idleCauseMin {
			return 0, 0, "", false
		}
		return from, from + idle, fmt.Sprintf("idle time (an issuer that forgets a free lock's counter after idle time does this): the lock had no grant, renewal or release for %s (%s–%s) between the acquires",
			checkers.Secs(idle), strings.TrimSuffix(checkers.Secs(from), " s"), checkers.Secs(from+idle)), true
	}
	return 0, 0, "", false
}

// onlyDelays: fault fi only delays requests (nemesis.Delays, no effect on
// what a node keeps).
func (r *Result) onlyDelays(fi int) bool {
	n := r.Faults[fi].Nemesis
	return nemesis.HasEffect(n, nemesis.Delays) && !hasEffect(n, []nemesis.Effect{nemesis.LosesState, nemesis.FailsWrites, nemesis.Separates})
}

// withoutDelays is tiers without the faults that only delay requests.
func withoutDelays(tiers [][]nemesis.Effect) [][]nemesis.Effect {
	var out [][]nemesis.Effect
	for _, t := range tiers {
		if !slices.Equal(t, []nemesis.Effect{nemesis.Delays}) {
			out = append(out, t)
		}
	}
	return out
}

// lockActs are what kept g's lock in use from from to g's call (a grant,
// renewal or release that returned, or an acquire of unknown outcome);
// false when the look-back's budget ran out.
func (r *Result) lockActs(g *history.Op, from int64) ([]activity, bool) {
	var acts []activity
	ok := r.scanBack(g, from, func(_ int, b history.Brief) {
		inUse := b.Outcome == history.OutcomeOk && (b.F == history.Acquire || b.F == history.Renew || b.F == history.Release) ||
			b.Outcome == history.OutcomeInfo && b.F == history.Acquire
		if inUse && (b.Completed == history.Never || b.Completed > from) {
			acts = append(acts, activity{b.Call, b.Completed})
		}
	})
	return acts, ok
}

// idleOf is an idle-time cause: it names no fault (Fault -1); the faults
// that may explain it too go in Also.
func idleOf(a *checkers.Anomaly, from, to int64, text string) *checkers.Cause {
	return &checkers.Cause{Fault: -1, Start: from, Stop: to, Delay: a.At - from, Explains: true, Idle: to - from, Text: text}
}
