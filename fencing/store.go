// Package fencing is the Fencing API v1 server: the HTTP front end shared by
// the reference (backed by a durable file store) and the adapters (backed by
// etcd or Redis). All fencing state and every atomic check live in the Store;
// the server only parses, validates and maps errors to status codes.
package fencing

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrHeld: acquire while someone else holds an unexpired lease (409 held).
var ErrHeld = errors.New("held")

// ErrLost: renew/release by someone who is not the current holder with that
// token (409 lost).
var ErrLost = errors.New("lost")

// ErrNotFound: read of a key never written (404).
var ErrNotFound = errors.New("not found")

// StaleError: the write's token is not newer than the high-water mark (409
// stale, with high_water).
type StaleError struct{ HighWater uint64 }

func (e *StaleError) Error() string { return fmt.Sprintf("stale: high-water mark is %d", e.HighWater) }

// Store is where a fencing implementation keeps its state. Every method is
// atomic with respect to the others and durable (as the implementation
// declares) before it returns. Tokens here are bare numbers; sealing is the
// server's business.
type Store interface {
	// Acquire grants lock to owner for ttl when it is free or expired and
	// returns a token greater than every token issued before for this lock
	// (or globally, for global-scope stores).
	Acquire(ctx context.Context, lock, owner string, ttl time.Duration) (token uint64, err error)
	Renew(ctx context.Context, lock, owner string, token uint64, ttl time.Duration) error
	Release(ctx context.Context, lock, owner string, token uint64) error
	// Write stores value under key when token is newer than the key's
	// high-water mark (or equal, for reentrant stores), and raises the mark;
	// otherwise it returns *StaleError.
	Write(ctx context.Context, key string, token uint64, value []byte) error
	// Read returns the value and the token of the write that stored it.
	Read(ctx context.Context, key string) (value []byte, token uint64, err error)
	Close() error
}

// UncheckedWriter is implemented by stores that can store a value without
// the token check. Only the reference's missing-as-zero bug uses it: it models
// a resource that reads an absent token as 0 and skips the comparison, so the
// value and its token-of-value change while the high-water mark does not.
type UncheckedWriter interface {
	WriteUnchecked(ctx context.Context, key string, token uint64, value []byte) error
}

// LeaseGranter is implemented by stores whose lease is not always the ttl
// asked for: a ZooKeeper session's timeout is negotiated by the ensemble, and
// etcd raises a short lease to its minimum. The acquire and renew answers
// then say what was granted (ttl_ms), which is what a careful client, and a
// pause sized to outlast the lease, must go by. The server prefers these
// methods to Acquire and Renew when a store has them.
type LeaseGranter interface {
	AcquireLease(ctx context.Context, lock, owner string, ttl time.Duration) (token uint64, granted time.Duration, err error)
	RenewLease(ctx context.Context, lock, owner string, token uint64, ttl time.Duration) (granted time.Duration, err error)
}

// HealthChecker is implemented by stores that can tell whether they are ready
// (a reachable backend); GET /v1/health answers 503 while it returns an error.
type HealthChecker interface {
	Health(ctx context.Context) error
}
