package analysis

import (
	"fmt"
	"slices"

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

// keyRecord is what the history shows of a key before the write w that
// shows a write-side violation.
type keyRecord struct {
	// held is the call of the latest write rejected as stale on w's node
	// with a token at least w's, completed before w was sent (-1: none);
	// heldToken its token.
	held      int64
	heldToken string
	// idleFrom is the latest completion of a write that may have taken
	// effect (accepted, or of unknown outcome) invoked before w (-1: none;
	// history.Never: one may still land).
	idleFrom int64
}

// scanKey reads the key's record before w, looking back at most
// maxWindowScan operations and stopping at the write that set the mark
// being looked for (the latest accepted one: earlier writes on the key
// cannot move what is learnt).
func (r *Result) scanKey(w *history.Op) keyRecord {
	rec := keyRecord{held: -1, idleFrom: -1}
	at := r.Ops.Find(w.ID)
	if at < 0 {
		return rec
	}
	key := r.Ops.Brief(at).KeyID
	var o history.Op
	for i := at - 1; i >= 0 && i >= at-maxWindowScan; i-- {
		if !r.scanStep() {
			return keyRecord{held: -1, idleFrom: -1}
		}
		b := r.Ops.Brief(i)
		if b.KeyID != key || b.F != history.Write || b.Call >= w.Call {
			continue
		}
		switch b.Outcome {
		case history.OutcomeOk, history.OutcomeInfo:
			if rec.idleFrom != history.Never {
				if b.Completed == history.Never {
					rec.idleFrom = history.Never
				} else {
					rec.idleFrom = max(rec.idleFrom, b.Completed)
				}
			}
			if b.Outcome == history.OutcomeOk {
				return rec
			}
		case history.OutcomeFail:
			if rec.held >= 0 || b.Completed >= w.Call {
				continue
			}
			r.Ops.Load(i, &o)
			if o.Error == fencing.ErrWordStale && o.Token.State == history.TokenValid && w.Token.State == history.TokenValid &&
				o.Token.N >= w.Token.N && o.Node != "" && o.Node == w.Node {
				rec.held, rec.heldToken = o.Call, o.Token.Raw
			}
		}
	}
	return rec
}

// markHeldSince is when the history last showed the resource still knew a
// mark that forbids a's accepted stale write (-1: it does not show it), and
// the words that say so.
func (r *Result) markHeldSince(a *checkers.Anomaly, ops []*history.Op) (keyRecord, *history.Op) {
	rec := keyRecord{held: -1, idleFrom: -1}
	if r.Ops == nil || (a.Kind != checkers.KindStaleWriteAccepted && a.Kind != checkers.KindReplayAccepted) {
		return rec, nil
	}
	w := shows(ops)
	if w == nil || w.F != history.Write || w.Outcome != history.OutcomeOk {
		return rec, nil
	}
	rec = r.scanKey(w)
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

// heldWindow is the cause rule's window words once a rejection narrowed it.
func heldWindow(rec keyRecord) string {
	return fmt.Sprintf("since the resource last rejected a token at least as new (%s, at %s)", rec.heldToken, checkers.Secs(rec.held))
}

// idleTime is the idle time before a violation, from and to, in words:
// false when it was shorter than idleCauseMin or is not known.
func (r *Result) idleTime(a *checkers.Anomaly, ops []*history.Op, rec keyRecord, w *history.Op) (int64, int64, string, bool) {
	switch {
	case w != nil:
		if rec.idleFrom < 0 || rec.idleFrom == history.Never || w.Call-rec.idleFrom < idleCauseMin {
			return 0, 0, "", false
		}
		words := fmt.Sprintf("idle time (a resource that forgets a key's mark after idle time, by an expiry or an eviction, does this): the key had no write that may have taken effect for %s before this one (since %s)",
			checkers.Secs(w.Call-rec.idleFrom), checkers.Secs(rec.idleFrom))
		if rec.held >= 0 {
			words += fmt.Sprintf(", and the resource still rejected token %s at %s, after every fault that can lose a mark had ended", rec.heldToken, checkers.Secs(rec.held))
		}
		return rec.idleFrom, w.Call, words, true
	case a.Kind == checkers.KindTokenRegression || a.Kind == checkers.KindDuplicateToken:
		g := shows(ops)
		if g == nil || g.F != history.Acquire || r.Ops == nil || r.Semantics.Scope == checkers.ScopeGlobal {
			return 0, 0, "", false
		}
		from := r.lockIdleFrom(g)
		if from < 0 || g.Call-from < idleCauseMin {
			return 0, 0, "", false
		}
		return from, g.Call, fmt.Sprintf("idle time (an issuer that forgets a free lock's counter after idle time does this): the lock had no grant, renewal or release for %s before this grant (since %s)",
			checkers.Secs(g.Call-from), checkers.Secs(from)), true
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

// lockIdleFrom is the latest end of anything that kept g's lock in use
// before g was sent: a grant, renewal or release that returned, or an
// acquire of unknown outcome (-1: none within maxWindowScan operations, or
// one that never completed).
func (r *Result) lockIdleFrom(g *history.Op) int64 {
	at := r.Ops.Find(g.ID)
	if at < 0 {
		return -1
	}
	key := r.Ops.Brief(at).KeyID
	from := int64(-1)
	for i := at - 1; i >= 0 && i >= at-maxWindowScan; i-- {
		if !r.scanStep() {
			return -1
		}
		b := r.Ops.Brief(i)
		if b.KeyID != key || b.Call >= g.Call || b.F != history.Acquire && b.F != history.Renew && b.F != history.Release {
			continue
		}
		if b.Outcome == history.OutcomeOk || b.Outcome == history.OutcomeInfo && b.F == history.Acquire {
			if b.Completed == history.Never {
				return -1
			}
			from = max(from, b.Completed)
			if b.Outcome == history.OutcomeOk && b.F == history.Acquire {
				return from
			}
		}
	}
	return from
}

// idleOf is an idle-time cause: it names no fault (Fault -1); the faults
// that may explain it too go in Also.
func idleOf(a *checkers.Anomaly, from, to int64, text string) *checkers.Cause {
	return &checkers.Cause{Fault: -1, Start: from, Stop: to, Delay: a.At - from, Explains: true, Idle: to - from, Text: text}
}
