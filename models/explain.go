package models

import (
	"fmt"
	"strconv"

	"github.com/fencecheck/fencecheck/history"
)

// Model names, as in Result.Model and Anomaly.Model.
const (
	ModelRegister = "fenced-register"
	ModelIssuer   = "issuer"
)

// Checker names, as in Result.Checker.
const (
	CheckerPorcupine = "porcupine"
	CheckerDirect    = "direct"
	CheckerFast      = "fast"
)

// Anomaly kinds. They are stable names: reports count them and users grep
// for them. Every kind but KindTokensNotAuthenticated is a violation.
const (
	// An accepted write's token was older than one accepted before it began.
	KindStaleWriteAccepted = "stale-write-accepted"
	// Under equal=reject, two accepted writes carried the same token.
	KindReplayAccepted = "replay-accepted"
	// A write that reached the resource without a token was accepted.
	KindMissingTokenAccepted = "missing-token-accepted"
	// A write whose token is not a decimal number was accepted.
	KindMalformedTokenAccepted = "malformed-token-accepted"
	// An authenticating target accepted a token no issuer sealed.
	KindForgedTokenAccepted = "forged-token-accepted"
	// A write was rejected as stale although no write with a token at least
	// as new (newer, under equal=accept) could have been accepted before.
	KindFalseStaleRejection = "false-stale-rejection"
	// A read returned a value older than one whose write was accepted
	// before the read began.
	KindStaleRead = "stale-read"
	// A read returned the value of a write the resource definitely rejected.
	KindReadOfRejectedWrite = "read-of-rejected-write"
	// A read returned a value no write in the history wrote.
	KindPhantomRead = "phantom-read"
	// A read returned the value of a write invoked only after the read
	// returned.
	KindFutureRead = "future-read"
	// A read returned a value with a token other than the one its write
	// carried.
	KindReadTokenMismatch = "read-token-mismatch"
	// The issuer returned a token smaller than one returned by an acquire
	// that completed before this acquire began.
	KindTokenRegression = "token-regression"
	// The issuer returned the same token to two acquires.
	KindDuplicateToken = "duplicate-token"
	// An acquire succeeded without returning a valid token.
	KindInvalidTokenIssued = "invalid-token-issued"
	// Porcupine found no linearization of a key's operations.
	KindNotLinearizable = "not-linearizable"
	// Finding, not a violation: an unauthenticated target accepted a token
	// number no issuer returned (anyone can forge tokens for it).
	KindTokensNotAuthenticated = "tokens-not-authenticated"
)

// secs renders a history time (ns) the way anomaly texts show it.
func secs(ns int64) string {
	if ns == history.Never {
		return "never"
	}
	return strconv.FormatFloat(float64(ns)/1e9, 'f', 2, 64) + " s"
}

// nameWrite names a write by its unique value and its history index.
func nameWrite(op *history.Op) string {
	if op.Value == "" {
		return fmt.Sprintf("write (op %d)", op.ID)
	}
	return fmt.Sprintf("write %s (op %d)", op.Value, op.ID)
}

// tokenPhrase is "with token 33", "without a token", "with malformed token
// "x"", plus what the strip proxy did to it.
func tokenPhrase(op *history.Op) string {
	var s string
	switch op.Token.State {
	case history.TokenNone:
		s = "without a token"
	case history.TokenMalformed:
		s = fmt.Sprintf("with malformed token %q", op.Token.Raw)
	default:
		s = "with token " + op.Token.Raw
	}
	if op.Tampered != "" {
		sent := "no token"
		if op.SentByClient != "" {
			sent = "token " + op.SentByClient
		}
		s += fmt.Sprintf(" (the client sent %s; the strip proxy tampered with it, mode %s)", sent, op.Tampered)
	}
	return s
}

// tokenNum is a token's number for texts.
func tokenNum(t history.Token) string {
	if t.State == history.TokenValid {
		return strconv.FormatUint(t.N, 10)
	}
	return t.String()
}

// appliedPhrase says how we know a write took effect: "was accepted at
// 12.41 s", or for an info write "timed out but took effect (read op 900
// returned its value at 12.50 s)".
func appliedPhrase(w *writeFact) string {
	if w.observer == nil {
		return "was accepted at " + secs(w.appliedBy)
	}
	if w.op.Outcome == history.OutcomeOk {
		return fmt.Sprintf("was accepted (read op %d returned its value at %s, before the write returned)", w.observer.ID, secs(w.appliedBy))
	}
	return fmt.Sprintf("had an unknown outcome but took effect (read op %d returned its value at %s)", w.observer.ID, secs(w.appliedBy))
}

// nameAcquire is "acquire op 90 (lock l1)".
func nameAcquire(op *history.Op) string {
	return fmt.Sprintf("acquire op %d (lock %s)", op.ID, op.Key)
}

func nameRead(op *history.Op) string { return fmt.Sprintf("read op %d", op.ID) }

// readResult is "returned c3-17 (token 33)" or "returned nothing (never
// written)".
func readResult(op *history.Op) string {
	if op.Value == "" {
		return "returned nothing (key never written)"
	}
	if op.Token.State == history.TokenValid {
		return fmt.Sprintf("returned %s (token %s)", op.Value, op.Token.Raw)
	}
	return "returned " + op.Value
}

func orEqual(sem Semantics) string {
	if sem.Equal == EqualAccept {
		return ">"
	}
	return "≥"
}
