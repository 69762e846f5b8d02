package checkers

import "github.com/fencecheck/fencecheck/history"

// Issued is what a history's acquires say about which sealed tokens are
// authentic, for the forgery rule (the one rule every checker applies):
//
// Under authenticated semantics a sealed token is forged unless an acquire
// returned exactly that spelling, or an acquire whose answer was lost (info,
// or no completion) was invoked before the write (it may have issued it). A
// history with no acquire at all (the issuer is not recorded) holds no
// sealed token forged. Unsealed tokens are never authentic there.
//
// Only hashes of the spellings are kept (one 64-bit FNV-1a each).
type Issued struct {
	any  bool
	raw  map[uint64]struct{}
	lost int64 // earliest call of an acquire whose answer was lost
}

// NewIssued is an Issued with no acquire yet.
func NewIssued() *Issued {
	return &Issued{raw: map[uint64]struct{}{}, lost: history.Never}
}

// TokenHash is the hash Issued keeps of a token's spelling.
func TokenHash(raw string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(raw); i++ {
		h ^= uint64(raw[i])
		h *= 1099511628211
	}
	return h
}

// Add notes one acquire (any outcome; other operations are ignored).
func (is *Issued) Add(op *history.Op) {
	if op.F != history.Acquire {
		return
	}
	is.any = true
	switch op.Outcome {
	case history.OutcomeOk:
		if op.Token.State == history.TokenValid {
			is.raw[TokenHash(op.Token.Raw)] = struct{}{}
		}
	case history.OutcomeInfo:
		is.lost = min(is.lost, op.Call)
	}
}

// Forged says whether a sealed token with the spelling hash h, sent by a
// write invoked at call, is forged.
func (is *Issued) Forged(h uint64, call int64) bool {
	if !is.any {
		return false
	}
	if _, ok := is.raw[h]; ok {
		return false
	}
	return is.lost >= call
}

// Authentic says whether w's token could ever be accepted under sem: it
// matches the grammar and, under authenticated semantics, is sealed and not
// forged. Only an authentic token's stale rejection claims anything.
func (is *Issued) Authentic(w *history.Op, sem Semantics) bool {
	if w.Token.State != history.TokenValid {
		return false
	}
	if !sem.Authenticated {
		return true
	}
	return w.Token.Seal != "" && !is.Forged(TokenHash(w.Token.Raw), w.Call)
}
