package analysis

import (
	"fmt"
	"sort"

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
	// Accepted were accepted: each is a violation.
	Accepted int `json:"accepted"`
	// Indeterminate timed out or never completed: they may or may not have
	// taken effect.
	Indeterminate int `json:"indeterminate"`
	// Examples are the invoke indices of the first few (accepted ones
	// first).
	Examples []int64 `json:"examples,omitempty"`
}

// maxLateExamples bounds LateWrites.Examples.
const maxLateExamples = 10

// Line says the count and how the writes ended, in one line.
func (l LateWrites) Line() string {
	s := fmt.Sprintf("late writes by expired holders: %d (rejected as stale %d, accepted %d, indeterminate %d", l.Total, l.RejectedStale, l.Accepted, l.Indeterminate)
	if l.RejectedOther > 0 {
		s += fmt.Sprintf(", rejected for another reason %d", l.RejectedOther)
	}
	return s + ")"
}

// lateWrites finds them in ops (sorted by invoke index, i.e. call time).
func lateWrites(ops []*history.Op) LateWrites {
	type grant struct {
		ret int64
		n   uint64
	}
	grants := map[string][]grant{} // ok acquires per lock
	for _, o := range ops {
		if o.F == history.Acquire && o.Outcome == history.OutcomeOk && o.Token.State == history.TokenValid {
			grants[o.Key] = append(grants[o.Key], grant{o.Return, o.Token.N})
		}
	}
	for _, g := range grants {
		sort.Slice(g, func(i, j int) bool { return g[i].ret < g[j].ret })
	}
	next := map[string]int{}      // per lock: grants seen so far
	newest := map[string]uint64{} // per lock: newest token granted so far
	type holder struct {
		proc int
		lock string
	}
	held := map[holder]string{} // token the process's last ok acquire of the lock returned
	var out LateWrites
	var accepted, others []int64
	for _, o := range ops {
		switch {
		case o.F == history.Acquire && o.Outcome == history.OutcomeOk:
			held[holder{o.Process, o.Key}] = o.Token.Raw
			continue
		case o.F != history.Write:
			continue
		}
		sent := o.Token.Raw
		if o.Tampered != "" {
			sent = o.SentByClient
		}
		if held[holder{o.Process, o.Key}] != sent {
			continue // not a holder writing with its own token (a forger, another tool)
		}
		t := history.ParseToken(sent)
		if t.State != history.TokenValid {
			continue
		}
		g, i := grants[o.Key], next[o.Key]
		for i < len(g) && g[i].ret < o.Call {
			newest[o.Key] = max(newest[o.Key], g[i].n)
			i++
		}
		next[o.Key] = i
		if newest[o.Key] <= t.N {
			continue
		}
		out.Total++
		switch {
		case o.Outcome == history.OutcomeOk:
			out.Accepted++
			accepted = append(accepted, o.ID)
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
	out.Examples = append(accepted, others...)
	if len(out.Examples) > maxLateExamples {
		out.Examples = out.Examples[:maxLateExamples]
	}
	return out
}
