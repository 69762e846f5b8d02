// Package history is fencecheck's record of a run: one JSON object per line
// (JSON Lines), appended and flushed as each event happens so that a run that
// dies half-way still leaves a checkable file.
//
// The client event fields follow Jepsen's vocabulary so histories written by
// other tools can be checked too:
//
//	{"index":12,"time":120034000,"process":3,"type":"ok","f":"write","key":"r1","token":"42","value":"c3-17"}
//
// Lines whose f is not a client operation (nemesis events, process -1) are
// carried through untouched and ignored by the checkers.
package history

import (
	"encoding/json"
	"time"
)

// Type is the outcome class of an event: invoke opens an operation; ok, fail
// and info close it.
type Type string

const (
	Invoke Type = "invoke"
	// Ok: the operation took effect (2xx).
	Ok Type = "ok"
	// Fail: a definite rejection (409, 428, 400, 403): the operation did not
	// take effect.
	Fail Type = "fail"
	// Info: unknown outcome (timeout, reset, 5xx): it may or may not have
	// taken effect, now or later. A process that saw info is retired.
	Info Type = "info"
)

// Valid reports whether t is one of the four types.
func (t Type) Valid() bool {
	switch t {
	case Invoke, Ok, Fail, Info:
		return true
	}
	return false
}

// Client operation names. Any other F is a nemesis or annotation event.
const (
	Acquire = "acquire"
	Renew   = "renew"
	Release = "release"
	Write   = "write"
	Read    = "read"
)

// IsClientOp reports whether f names an operation the models check.
func IsClientOp(f string) bool {
	switch f {
	case Acquire, Renew, Release, Write, Read:
		return true
	}
	return false
}

// NemesisProcess is the process number of every nemesis event.
const NemesisProcess = -1

// Event is one line of a history.
//
// Token is the decimal token (optionally "N.SEAL") as sent or received; ""
// means the write carried no token. Value is a write's unique value or what a
// read saw. Error is the server's error word ("stale", "held", "lost",
// "missing-token", "timeout", ...). Extra carries nemesis details (targets,
// offsets, ...) and any field this version does not know, so nothing read is
// lost when a history is rewritten.
type Event struct {
	Index   int64  `json:"index"`
	Time    int64  `json:"time"`
	Process int    `json:"process"`
	Type    Type   `json:"type"`
	F       string `json:"f"`
	Key     string `json:"key,omitempty"`
	Token   string `json:"token,omitempty"`
	Value   string `json:"value,omitempty"`
	Error   string `json:"error,omitempty"`
	// HighWater is the high-water mark a stale rejection reported, when the
	// target sent one.
	HighWater string `json:"high_water,omitempty"`
	// Node names the target node a client operation went to, or the nodes a
	// nemesis event acted on (comma separated).
	Node string `json:"node,omitempty"`
	// Extra holds nemesis details and unknown fields.
	Extra map[string]json.RawMessage `json:"extra,omitempty"`
}

// IsClient reports whether e is a client operation event.
func (e *Event) IsClient() bool { return e.Process >= 0 && IsClientOp(e.F) }

// Tamper is the f of the event the strip proxy records for each write whose
// token it changed; the strip nemesis's own start and stop events share the
// name but carry extra.action.
const Tamper = "strip"

// IsTamper reports whether e records one tampered write (not the start or
// stop of the strip fault).
func (e *Event) IsTamper() bool {
	if e.Process != NemesisProcess || e.F != Tamper {
		return false
	}
	_, action := e.Extra[ExtraAction]
	return !action
}

// DefaultTTL is the lease fencecheck's clients ask for unless told otherwise
// (--ttl), and so the lease assumed for acquires and renews whose events
// carry no extra.ttl_ms: the one default of the project's leases.
const DefaultTTL = time.Second

// Extra fields of client events.
const (
	// ExtraTTL is an acquire's or renew's requested lease, in ms.
	ExtraTTL = "ttl_ms"
	// ExtraLeaseLeft is, on a write, how much of its lease the client
	// believed was left by its own wall clock when it decided to write, in
	// ms; recorded only while that clock was off.
	ExtraLeaseLeft = "lease_left_ms"
	// ExtraGrantedTTL is, on an ok acquire's or renew's completion, the
	// lease the system said it granted (the answer's ttl_ms), in ms: etcd
	// raises short leases to its minimum, ZooKeeper negotiates a session's.
	// Lease reckoning goes by it when present.
	ExtraGrantedTTL = "granted_ttl_ms"
	// ExtraStalled is, on a write, how long the client stalled (a holder
	// pause) between checking its lease and sending the write, in ms. Its
	// extra.lease_left_ms is then what it found at the check: a paused
	// client wakes still believing in it.
	ExtraStalled = "stalled_ms"
	// ExtraStraggler is, on a straggler's write (an old token sent right
	// after a node's restart), the node whose restart it followed.
	ExtraStraggler = "straggler_after_restart_of"
	// ExtraIdle is, on an idle probe's late write, how long its key sat
	// idle, in ms.
	ExtraIdle = "idle_ms"
)

// IsLateByIntent says whether e is a write its client sent knowing its
// token may be old (a stalled holder waking, a straggler, an idle probe's
// late write): such a client goes no further with its key, so no newer
// write of its own follows it.
func (e *Event) IsLateByIntent() bool {
	if e.F != Write {
		return false
	}
	for _, k := range []string{ExtraStalled, ExtraStraggler, ExtraIdle} {
		if _, ok := e.Extra[k]; ok {
			return true
		}
	}
	return false
}
