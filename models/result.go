package models

import "time"

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
	// Text says what happened in words, with the operations involved.
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
}

// Result is one checker's verdict on one model over a whole history.
type Result struct {
	// Checker is "porcupine", "fast" or "direct".
	Checker string `json:"checker"`
	// Model is "fenced-register" or "issuer".
	Model     string    `json:"model"`
	Verdict   Verdict   `json:"verdict"`
	Reason    string    `json:"reason,omitempty"`
	Anomalies []Anomaly `json:"anomalies,omitempty"`
	// KindCounts counts every anomaly found by kind, including those left
	// out of Anomalies (which lists only the earliest of each kind).
	KindCounts map[string]int `json:"kind_counts,omitempty"`
	// OmittedAnomalies is how many anomalies were found but not listed.
	OmittedAnomalies int `json:"omitted_anomalies,omitempty"`
	// Keys and Ops count what was checked.
	Keys     int           `json:"keys"`
	Ops      int           `json:"ops"`
	Duration time.Duration `json:"duration_ns"`
}
