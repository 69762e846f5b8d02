package analysis

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/fencecheck/fencecheck/history"
)

// LateWrites counts the seeds' scenario as it happened in the history: writes
// by expired holders, i.e. writes a client sent with the token its own acquire
// of that lock returned, after an acquire of the same lock had already
// returned a newer token to someone. Only the resource's check can stop such
// a write; how each ended is what the run shows about fencing.
//
// It is counted from the operations alone (not from what the workload meant
// to do), once, here; the summary, results.json and the report show it.
type LateWrites struct {
	Total int `json:"total"`
	// RejectedStale were rejected as stale (409): fencing worked.
	RejectedStale int `json:"rejected_stale"`
	// RejectedOther were rejected for another reason (a token the strip
	// proxy removed or garbled, a forged-token answer).
	RejectedOther int `json:"rejected_other"`
	// Accepted were accepted although a write with a newer token had
	// already been accepted on the key: each is a violation.
	Accepted int `json:"accepted"`
	// AcceptedUnfenced were accepted before any newer token had reached
	// the resource (the newer holder's write had not completed, or failed):
	// the resource could not know; the checkers judge them.
	AcceptedUnfenced int `json:"accepted_unfenced"`
	// Indeterminate timed out or never completed: they may or may not have
	// taken effect.
	Indeterminate int `json:"indeterminate"`
	// AfterNewerWrite counts those (of any outcome) sent after a write with
	// a newer token had been accepted on the key: the ones a resource must
	// reject by its mark, whatever else it knows (coverage counts them).
	AfterNewerWrite int `json:"after_newer_write"`
	// Examples are the invoke indices of the first few (accepted ones
	// first).
	Examples []int64 `json:"examples,omitempty"`
}

// maxLateExamples bounds LateWrites.Examples.
const maxLateExamples = 10

// Line says the count and how the writes ended, in one line.
func (l LateWrites) Line() string {
	s := fmt.Sprintf("late writes by expired holders: %d (rejected as stale %d, accepted %d, indeterminate %d", l.Total, l.RejectedStale, l.Accepted, l.Indeterminate)
	if l.AcceptedUnfenced > 0 {
		s += fmt.Sprintf(", accepted before a newer token reached the resource %d", l.AcceptedUnfenced)
	}
	if l.RejectedOther > 0 {
		s += fmt.Sprintf(", rejected for another reason %d", l.RejectedOther)
	}
	return s + ")"
}

// lateWrites finds them in ops (sorted by invoke index, i.e. call time),
// and lists apart those after a newer write that reached the resource
// (accepted or rejected, not info): the ones coverage counts.
func lateWrites(ops *history.Ops) (LateWrites, []int64) {
	// grants are ok acquires per lock, stored ok writes per key, each by
	// return time: what had happened before a write was sent.
	// (By Brief.KeyID: no map per operation.)
	// Each list is made once, at most its size (the ok acquires or
	// writes of its key, counted first).
	var grants, stored []*returned
	var nGrants, nStored []int
	for i := range ops.Len() {
		b := ops.Brief(i)
		if b.Outcome != history.OutcomeOk {
			continue
		}
		for int(b.KeyID) >= len(nGrants) {
			nGrants, nStored = append(nGrants, 0), append(nStored, 0)
		}
		switch b.F {
		case history.Acquire:
			nGrants[b.KeyID]++
		case history.Write:
			nStored[b.KeyID]++
		}
	}
	add := func(m *[]*returned, kid uint32, o *history.Op) {
		for int(kid) >= len(*m) {
			*m = append(*m, nil)
		}
		if (*m)[kid] == nil {
			n := nStored[kid]
			if o.F == history.Acquire {
				n = nGrants[kid]
			}
			(*m)[kid] = &returned{ops: make([]grant, 0, n)}
		}
		(*m)[kid].ops = append((*m)[kid].ops, grant{o.Return, o.Token.N})
	}
	at := func(m []*returned, kid uint32) *returned {
		if int(kid) < len(m) {
			return m[kid]
		}
		return nil
	}
	var o history.Op
	for i := range ops.Len() {
		b := ops.Brief(i)
		if b.Outcome != history.OutcomeOk || b.F != history.Acquire && b.F != history.Write {
			continue
		}
		ops.Load(i, &o)
		if o.Token.State != history.TokenValid {
			continue
		}
		switch o.F {
		case history.Acquire:
			add(&grants, b.KeyID, &o)
		case history.Write:
			add(&stored, b.KeyID, &o)
		}
	}
	for _, m := range [][]*returned{grants, stored} {
		for _, r := range m {
			if r != nil {
				slices.SortFunc(r.ops, func(x, y grant) int { return cmp.Compare(x.ret, y.ret) })
			}
		}
	}
	type holder struct {
		proc int
		lock uint32 // Brief.KeyID
	}
	held := map[holder]string{} // token the process's last ok acquire of the lock returned
	var out LateWrites
	var violations, others, reached []int64
	for i := range ops.Len() {
		b := ops.Brief(i)
		switch {
		case b.F == history.Acquire && b.Outcome == history.OutcomeOk:
			ops.Load(i, &o)
			held[holder{o.Process, b.KeyID}] = o.Token.Raw
			continue
		case b.F != history.Write:
			continue
		}
		ops.Load(i, &o)
		sent := o.Token.Raw
		if o.Tampered != "" {
			sent = o.SentByClient
		}
		if held[holder{o.Process, b.KeyID}] != sent {
			continue // not a holder writing with its own token (a forger, another tool)
		}
		t := history.ParseToken(sent)
		if t.State != history.TokenValid || at(grants, b.KeyID).newestBefore(o.Call) <= t.N {
			continue
		}
		out.Total++
		newer := at(stored, b.KeyID).newestBefore(o.Call) > t.N
		if newer {
			out.AfterNewerWrite++
			if o.Outcome != history.OutcomeInfo {
				reached = append(reached, o.ID)
			}
		}
		switch {
		case o.Outcome == history.OutcomeOk && newer:
			out.Accepted++
			violations = append(violations, o.ID)
		case o.Outcome == history.OutcomeOk:
			out.AcceptedUnfenced++
			others = append(others, o.ID)
		case o.Outcome == history.OutcomeFail && o.Error == "stale":
			out.RejectedStale++
			others = append(others, o.ID)
		case o.Outcome == history.OutcomeFail:
			out.RejectedOther++
			others = append(others, o.ID)
		default:
			out.Indeterminate++
			others = append(others, o.ID)
		}
	}
	out.Examples = append(violations, others...)
	if len(out.Examples) > maxLateExamples {
		out.Examples = out.Examples[:maxLateExamples]
	}
	return out, reached
}

type grant struct {
	ret int64
	n   uint64
}

// returned is one key's operations by return time, with a cursor: calls
// come in time order, so each operation is passed once.
type returned struct {
	ops    []grant
	next   int
	newest uint64
}

// newestBefore is the newest token among the operations that returned
// before t (0 when none; nil: none at all).
func (r *returned) newestBefore(t int64) uint64 {
	if r == nil {
		return 0
	}
	for r.next < len(r.ops) && r.ops[r.next].ret < t {
		r.newest = max(r.newest, r.ops[r.next].n)
		r.next++
	}
	return r.newest
}
