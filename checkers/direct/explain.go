package direct

import (
	"fmt"
	"strconv"

	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/history"
)

// nameWrite names a write by its unique value and its history index.
func nameWrite(op *dop) string {
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
		return "was accepted at " + checkers.Secs(w.appliedBy)
	}
	if w.op.Outcome == history.OutcomeOk {
		return fmt.Sprintf("was accepted (read op %d returned its value at %s, before the write returned)", w.observer.ID, checkers.Secs(w.appliedBy))
	}
	return fmt.Sprintf("had an unknown outcome but took effect (read op %d returned its value at %s)", w.observer.ID, checkers.Secs(w.appliedBy))
}

// nameAcquire is "acquire op 90 (lock l1)".
func nameAcquire(op *history.Op) string {
	return fmt.Sprintf("acquire op %d (lock %s)", op.ID, op.Key)
}

func nameRead(op *dop) string { return fmt.Sprintf("read op %d", op.ID) }

// readResult is "returned c3-17 (token 33)" or "returned nothing (never
// written)".
func readResult(op *dop) string {
	if op.Value == "" {
		return "returned nothing (key never written)"
	}
	if op.Token.State == history.TokenValid {
		return fmt.Sprintf("returned %s (token %s)", op.Value, op.Token.Raw)
	}
	return "returned " + op.Value
}

func orEqual(sem checkers.Semantics) string {
	if sem.Equal == checkers.EqualAccept {
		return ">"
	}
	return "≥"
}
