package checkers

// Model names, as in Result.Model and Anomaly.Model.
const (
	ModelRegister = "fenced-register"
	ModelIssuer   = "issuer"
	// ModelLease holds lease overlaps: findings, never violations.
	ModelLease = "lease"
)

// Checker names, as in Result.Checker.
const (
	CheckerPorcupine = "porcupine"
	CheckerDirect    = "direct"
	CheckerFast      = "fast"
)

// Anomaly kinds. They are stable names: reports count them and users grep
// for them. Every kind but KindTokensNotAuthenticated and KindLeaseOverlap is
// a violation.
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
	// A read answered 200 without a valid token: a value without a token
	// (a 200 carries the token of the write that stored the value; 404 has
	// neither), or a token outside the grammar.
	KindReadWithoutToken = "read-without-token"
	// A stale rejection reported a high_water that the resource cannot have
	// had during the request: not a token number, below the rejected token
	// (not above it, under equal=accept), or no write that could have been
	// accepted carried it (fencing/PROTOCOL.md).
	KindWrongHighWater = "wrong-high-water"
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
	// Finding, not a violation: two clients both believed they held one
	// lock's lease (checkers/overlap).
	KindLeaseOverlap = "lease-overlap"
)
