package fast

import (
	"slices"

	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/history"
)

// When a key became invalid. An explanation names a few operations (three
// of each kind at most), and its time is the latest of those; but the
// requirements that cannot all be met may include later ones it did not
// name (a read at 4.8 s that makes three rejections at 0.6-1.1 s
// unjustifiable). The time a user reads as "first visible", and the
// matrix as time to detection, must not come before the history was
// invalid: it is the earliest prefix of the key's history that the same
// search rejects, found by bisection over the operations' times.

// prefix is k as it stood at time t: operations called after t are gone,
// a read still under way says nothing yet, and a write still under way
// is of unknown outcome.
func (k *keyLog) prefix(t int64) *keyLog {
	p := &keyLog{name: k.name, text: k.text}
	for _, o := range k.ops {
		if o.call > t {
			continue
		}
		if o.ret != history.Never && o.ret > t {
			if o.kind == readOk {
				continue
			}
			o.kind, o.ret, o.hwState = writeInfo, history.Never, hwNone
		}
		p.ops = append(p.ops, o)
	}
	return p
}

// violates reports whether an outcome holds a violation (not a finding).
func (out keyOutcome) violates() bool {
	return slices.ContainsFunc(out.anomalies, func(a checkers.Anomaly) bool { return !a.Finding })
}

// maxPrefixChecks bounds the galloping and the bisection each: 2^24
// distinct times is more than any key holds.
const maxPrefixChecks = 24

// invalidFrom is the earliest time t from lo on (the earliest a violation
// was said visible) at which k's prefix is invalid; lo when the search
// already rejects that prefix, and lo as well if no prefix is rejected (a
// violation only the whole key shows, as one the end decides).
func invalidFrom(k *keyLog, sem checkers.Semantics, issued *checkers.Issued, lo int64) int64 {
	var times []int64
	for _, o := range k.ops {
		for _, t := range []int64{o.call, o.ret} {
			if t != history.Never && t >= lo {
				times = append(times, t)
			}
		}
	}
	slices.Sort(times)
	times = slices.Compact(times)
	bad := func(t int64) bool { return searchRegisterKey(k.prefix(t), sem, issued, 1).violates() }
	// Galloping from lo, then bisection: the prefix that is invalid is
	// most often a few operations past the time the explanation gave, and
	// the prefixes probed on the way there are short.
	i, j := 0, -1 // times[i-1] (if any) valid, times[j] invalid
	for step, n := 1, 0; i < len(times) && n < maxPrefixChecks; step, n = step*2, n+1 {
		at := min(i+step-1, len(times)-1)
		if bad(times[at]) {
			j = at
			break
		}
		i = at + 1
	}
	if j < 0 {
		return lo
	}
	for n := 0; i < j && n < maxPrefixChecks; n++ {
		m := (i + j) / 2
		if bad(times[m]) {
			j = m
		} else {
			i = m + 1
		}
	}
	return times[j]
}

// checkRegisterKey checks one key of the register: the search, then its
// anomalies dated no earlier than the key's earliest rejected prefix.
func checkRegisterKey(k *keyLog, sem checkers.Semantics, issued *checkers.Issued, max int) keyOutcome {
	out := searchRegisterKey(k, sem, issued, max)
	// No violation is visible before the key's history was invalid
	// (prefix.go): an explanation is dated by the operations it names, and
	// an unknown-outcome write by its call, though what proves the
	// violation may have come later.
	at := int64(-1)
	for _, a := range out.anomalies {
		if !a.Finding && (at < 0 || a.At < at) {
			at = a.At
		}
	}
	if at >= 0 {
		from := invalidFrom(k, sem, issued, at)
		for i := range out.anomalies {
			if a := &out.anomalies[i]; !a.Finding && a.At < from {
				a.At = from
			}
		}
	}
	return out
}
