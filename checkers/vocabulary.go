// Package checkers is the vocabulary every checker of fencecheck shares: the
// semantics a target declares, verdicts, one checker's Result, anomalies and
// their kinds, the model and checker names, and the few helpers the checkers
// need to word and bound what they report.
//
// The checkers themselves are packages of their own: checkers/direct (sound
// checks that name each anomaly in words), checkers/porcupine (Porcupine,
// per key, within a time budget) and checkers/fast (a polynomial-time decision
// procedure for these models), with checkers/overlap (lease overlaps) beside
// them. Package analysis runs them over a history and combines their
// answers into one verdict.
package checkers

import (
	"fmt"
	"time"
)

// Equal is what a resource does with a token equal to its high-water mark.
type Equal string

const (
	// EqualReject: strict fencing, every write needs a strictly newer token
	// (an equal token is a replay). The default.
	EqualReject Equal = "reject"
	// EqualAccept: reentrant fencing, a holder may write many times with its
	// token.
	EqualAccept Equal = "accept"
)

// Scope says over which set of locks tokens are ordered.
type Scope string

const (
	ScopePerLock Scope = "per-lock"
	ScopeGlobal  Scope = "global"
)

// Semantics is what a target declares about its tokens.
type Semantics struct {
	Equal         Equal `json:"equal"`
	Scope         Scope `json:"scope"`
	Authenticated bool  `json:"authenticated"`
}

// DefaultSemantics is strict, per-lock, unauthenticated.
func DefaultSemantics() Semantics {
	return Semantics{Equal: EqualReject, Scope: ScopePerLock}
}

// Normalize fills empty fields with the defaults and rejects values no
// checker knows.
func (s Semantics) Normalize() (Semantics, error) {
	if s.Equal == "" {
		s.Equal = EqualReject
	}
	if s.Scope == "" {
		s.Scope = ScopePerLock
	}
	if s.Equal != EqualReject && s.Equal != EqualAccept {
		return s, fmt.Errorf("semantics: equal must be %q or %q, not %q", EqualReject, EqualAccept, s.Equal)
	}
	if s.Scope != ScopePerLock && s.Scope != ScopeGlobal {
		return s, fmt.Errorf("semantics: scope must be %q or %q, not %q", ScopePerLock, ScopeGlobal, s.Scope)
	}
	return s, nil
}

// Verdict is a checker's answer. Unknown is a first-class answer (checker
// timeout, too few operations) and is never folded into Valid.
type Verdict string

const (
	Valid   Verdict = "valid"
	Invalid Verdict = "invalid"
	Unknown Verdict = "unknown"
)

// Anomaly is one violation (or finding) explained in words.
type Anomaly struct {
	// Kind is a stable machine-readable name, e.g. "stale-write-accepted",
	// "replay-accepted", "missing-token-accepted", "false-stale-rejection",
	// "stale-read", "token-regression", "forged-token-accepted",
	// "not-linearizable".
	Kind string `json:"kind"`
	// Model is the model that found it: "fenced-register" or "issuer".
	Model string `json:"model"`
	Key   string `json:"key,omitempty"`
	// Text says what happened in words, with the operations involved, and
	// (once the analysis named one) the fault that explains it.
	Text string `json:"text"`
	// Ops are the history indices (Event.Index of the invoke events) of the
	// operations involved.
	Ops []int64 `json:"ops,omitempty"`
	// At is the history time (ns) at which the history first showed the
	// anomaly: the completion of the latest operation it needs.
	At int64 `json:"at_ns"`
	// Finding marks an observation that is not a violation of the declared
	// semantics (e.g. "tokens are not authenticated").
	Finding bool `json:"finding,omitempty"`
	// Cause is the fault the analysis attributes a violation to (see
	// Cause); nil for findings and when the history has no fault before it.
	Cause *Cause `json:"cause,omitempty"`
}

// Cause is the fault a violation is attributed to, by one rule: a fault that
// can explain that kind of anomaly (a restart of the issuer between the two
// acquires of a token regression, a restart of the resource since the
// overwritten write of a stale read, the strip proxy's tampering with the
// accepted write), and only when none fits the last fault event before the
// violation. Explains says which of the two it is; Text says it in words, and
// is what the analysis appends to the anomaly's Text.
type Cause struct {
	// Fault is the index of the fault period in the analysis's fault list.
	Fault   int    `json:"fault"`
	Nemesis string `json:"nemesis"`
	Node    string `json:"node,omitempty"`
	Start   int64  `json:"start_ns"`
	// Stop is the fault's stop (the end of the history when it was never
	// stopped: Open).
	Stop int64 `json:"stop_ns"`
	Open bool  `json:"open,omitempty"`
	// Delay is how long after the fault started the violation showed.
	Delay int64 `json:"delay_ns"`
	// Explains: the fault is one that can explain the anomaly; false: it is
	// only the last fault event before it.
	Explains bool   `json:"explains"`
	Text     string `json:"text"`
	// Also are the other faults that can explain it, in the rule's order
	// (the fault above is the first): a cause is a hypothesis, and every
	// fault that fits is named; `fencecheck shrink` proves which are
	// needed.
	Also []Suspect `json:"also,omitempty"`
	// Idle: no fault explains it, but the key (or lock) had been left
	// alone this long (ns) before it, from Start to Stop: an idle-time flaw
	// (a mark or a counter forgotten after idle time) does this. Fault is
	// -1 then, and Nemesis empty.
	Idle int64 `json:"idle_ns,omitempty"`
}

// Suspect is one more fault that can explain a violation.
type Suspect struct {
	Fault   int    `json:"fault"`
	Nemesis string `json:"nemesis"`
	Node    string `json:"node,omitempty"`
	Start   int64  `json:"start_ns"`
	Stop    int64  `json:"stop_ns"`
}

// Brief is an anomaly without its words: enough to merge the checkers'
// reports of one violation and to name its cause.
type Brief struct {
	Kind, Model, Key string
	Ops              []int64
	At               int64
}

// Shows is the operation that shows the violation: the latest invoked of
// its operations (the acquire that returned a reused token, the stale write
// accepted, the read that returned an overwritten value), or -1 when it
// names none. Two checkers' reports of one violation share it.
func (b Brief) Shows() int64 {
	id := int64(-1)
	for _, o := range b.Ops {
		id = max(id, o)
	}
	return id
}

// Result is one checker's verdict on one model over a whole history.
type Result struct {
	// Checker is "porcupine", "fast" or "direct".
	Checker string `json:"checker"`
	// Model is "fenced-register" or "issuer" (or "lease": findings only).
	Model     string    `json:"model"`
	Verdict   Verdict   `json:"verdict"`
	Reason    string    `json:"reason,omitempty"`
	Anomalies []Anomaly `json:"anomalies,omitempty"`
	// KindCounts counts every anomaly found by kind, including those left
	// out of Anomalies (which lists only the earliest of each kind).
	KindCounts map[string]int `json:"kind_counts,omitempty"`
	// OmittedAnomalies is how many anomalies were found but not listed.
	OmittedAnomalies int `json:"omitted_anomalies,omitempty"`
	// Found is every anomaly found, listed or not, in brief (no text): what
	// the analysis merges across checkers into distinct violations and
	// groups by root cause (CapAnomalies keeps it). Not in results.json.
	Found []Brief `json:"-"`
	// Complete: the checker decides the model: its "valid" means that no
	// linearization is violated (Porcupine, fast; the direct checks for the
	// issuer). The direct checks of the register are sound, not complete:
	// their "valid" only means that no listed pattern was found.
	Complete bool `json:"complete,omitempty"`
	// Proofs: each violation listed is a proof on its own, a few operations
	// a reader can check by hand (the direct checks): one of them makes the
	// history invalid whatever the other checkers say.
	Proofs bool `json:"proofs,omitempty"`
	// Keys and Ops count what was checked.
	Keys     int           `json:"keys"`
	Ops      int           `json:"ops"`
	Duration time.Duration `json:"duration_ns"`
}

// KeyResult is the verdict of a checker that decides key by key (Porcupine)
// on one key of one model.
type KeyResult struct {
	Model   string  `json:"model"`
	Key     string  `json:"key"`
	Verdict Verdict `json:"verdict"`
	Ops     int     `json:"ops"`
	// Segments is how many independent pieces the key was cut into.
	Segments int           `json:"segments"`
	Elapsed  time.Duration `json:"duration_ns"`
	// FirstInvalidAt is, for an invalid key, the earliest history time at
	// which the key's history up to then was already not linearizable
	// (-1 when not found within the time budget, or not invalid).
	FirstInvalidAt int64 `json:"first_invalid_at_ns"`
	// Culprits are the operations whose completion at FirstInvalidAt made
	// the history non-linearizable.
	Culprits []int64 `json:"culprits,omitempty"`
}

// Annotation is a labelled stretch of history time drawn on a checker's
// visualization: a fault period, or an anomaly (at Start; End 0).
type Annotation struct {
	Tag, Description, Details string
	Start, End                int64
	// Color is a CSS colour for the background.
	Color string
}
