// Package redis is fencecheck's Redis fencing implementation: a
// fencing.Store whose every check runs inside Redis as one Lua script, and
// the container targets "redis" (AOF, fsync on every write) and
// "redis-volatile" (no persistence) that run it behind two adapters.
package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/fencing"
)

// Semantics is what the Redis store guarantees: a write needs a strictly
// newer token, and tokens are ordered per lock (one INCR counter per lock).
var Semantics = checkers.Semantics{Equal: checkers.EqualReject, Scope: checkers.ScopePerLock}

// acquireScript takes the lock only if it is free (SET NX PX) and only then
// draws the token from the lock's counter, so a refused acquire never burns a
// token. The holder's value becomes "owner|token" (same TTL) so that renew
// and release can insist on both.
//
// KEYS[1] holder key, KEYS[2] counter key; ARGV[1] owner, ARGV[2] ttl ms.
// Returns the token, or false when the lock is held.
var acquireScript = goredis.NewScript(`
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return false
end
local token = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], ARGV[1] .. '|' .. token, 'XX', 'KEEPTTL')
return token
`)

// renewScript extends the lease only for the current holder with that
// token. KEYS[1] holder key; ARGV[1] "owner|token", ARGV[2] ttl ms.
var renewScript = goredis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
`)

// releaseScript frees the lock only for the current holder with that token.
// KEYS[1] holder key; ARGV[1] "owner|token".
var releaseScript = goredis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
return 1
`)

// writeScript is the resource's whole check-and-set. Tokens are compared as
// decimal strings (longer is bigger, then byte order) because Lua numbers
// are doubles and would round tokens above 2^53; Go formats tokens without
// leading zeros, so the comparison is exact. An equal token is stale
// (equal: reject).
//
// KEYS[1] resource hash; ARGV[1] token, ARGV[2] value.
// Returns {1, token} when stored, {0, high-water} when stale.
var writeScript = goredis.NewScript(`
local hw = redis.call('HGET', KEYS[1], 'hw')
if hw then
  local t = ARGV[1]
  if #t < #hw or (#t == #hw and t <= hw) then
    return {0, hw}
  end
end
redis.call('HSET', KEYS[1], 'hw', ARGV[1], 'value', ARGV[2], 'token', ARGV[1])
return {1, ARGV[1]}
`)

// Store is a fencing.Store kept entirely in one Redis server.
type Store struct {
	client *goredis.Client
	prefix string
}

var _ fencing.Store = (*Store)(nil)

// StoreOptions configure OpenStore.
type StoreOptions struct {
	// Addr is host:port of the Redis server.
	Addr string
	// Prefix namespaces every key the store touches (default "fencecheck:").
	Prefix string
	// Timeout bounds dialing and each command (default 2 s). A command that
	// times out is reported as an error, which the server turns into 5xx
	// (info): it may have taken effect.
	Timeout time.Duration
	_       struct{}
}

// OpenStore connects to Redis. It does not wait for the server: the first
// operation fails if Redis is not up, and the adapter's health check says so.
func OpenStore(opts StoreOptions) *Store {
	timeout := opts.Timeout
	if timeout == 0 {
		timeout = 2 * time.Second
	}
	client := goredis.NewClient(&goredis.Options{
		Addr: opts.Addr,
		// Never retry: a script whose reply was lost may have run, and a
		// retried acquire or write would then come back "held" or "stale" —
		// a definite failure claimed for an operation that took effect. The
		// lost reply must surface as an error (info) instead.
		MaxRetries:            -1,
		DialTimeout:           timeout,
		ReadTimeout:           timeout,
		WriteTimeout:          timeout,
		ContextTimeoutEnabled: true,
	})
	return NewStore(client, opts.Prefix)
}

// NewStore wraps an existing client. prefix "" means "fencecheck:". The
// client should have retries disabled (see OpenStore).
func NewStore(client *goredis.Client, prefix string) *Store {
	if prefix == "" {
		prefix = "fencecheck:"
	}
	return &Store{client: client, prefix: prefix}
}

// Keys use a hash tag per lock so the pair a script touches would live in one
// slot on a Redis Cluster too.
func (s *Store) holderKey(lock string) string  { return s.prefix + "lock:{" + lock + "}:holder" }
func (s *Store) counterKey(lock string) string { return s.prefix + "lock:{" + lock + "}:counter" }
func (s *Store) resourceKey(key string) string { return s.prefix + "resource:" + key }

func holderValue(owner string, token uint64) string {
	return owner + "|" + strconv.FormatUint(token, 10)
}

// ttlMillis rounds up so a sub-millisecond TTL never becomes PX 0 (an error).
func ttlMillis(ttl time.Duration) (int64, error) {
	if ttl <= 0 {
		return 0, fmt.Errorf("ttl %v: must be positive", ttl)
	}
	return int64((ttl + time.Millisecond - 1) / time.Millisecond), nil
}

// Acquire implements fencing.Store.
func (s *Store) Acquire(ctx context.Context, lock, owner string, ttl time.Duration) (uint64, error) {
	ms, err := ttlMillis(ttl)
	if err != nil {
		return 0, err
	}
	token, err := acquireScript.Run(ctx, s.client, []string{s.holderKey(lock), s.counterKey(lock)}, owner, ms).Int64()
	if errors.Is(err, goredis.Nil) {
		return 0, fencing.ErrHeld
	}
	if err != nil {
		return 0, fmt.Errorf("redis acquire %q: %w", lock, err)
	}
	return uint64(token), nil
}

// Renew implements fencing.Store.
func (s *Store) Renew(ctx context.Context, lock, owner string, token uint64, ttl time.Duration) error {
	ms, err := ttlMillis(ttl)
	if err != nil {
		return err
	}
	ok, err := renewScript.Run(ctx, s.client, []string{s.holderKey(lock)}, holderValue(owner, token), ms).Int64()
	if err != nil {
		return fmt.Errorf("redis renew %q: %w", lock, err)
	}
	if ok != 1 {
		return fencing.ErrLost
	}
	return nil
}

// Release implements fencing.Store.
func (s *Store) Release(ctx context.Context, lock, owner string, token uint64) error {
	ok, err := releaseScript.Run(ctx, s.client, []string{s.holderKey(lock)}, holderValue(owner, token)).Int64()
	if err != nil {
		return fmt.Errorf("redis release %q: %w", lock, err)
	}
	if ok != 1 {
		return fencing.ErrLost
	}
	return nil
}

// Write implements fencing.Store.
func (s *Store) Write(ctx context.Context, key string, token uint64, value []byte) error {
	res, err := writeScript.Run(ctx, s.client, []string{s.resourceKey(key)}, strconv.FormatUint(token, 10), value).Slice()
	if err != nil {
		return fmt.Errorf("redis write %q: %w", key, err)
	}
	if len(res) != 2 {
		return fmt.Errorf("redis write %q: unexpected reply %v", key, res)
	}
	stored, _ := res[0].(int64)
	if stored == 1 {
		return nil
	}
	hwText, _ := res[1].(string)
	hw, err := strconv.ParseUint(hwText, 10, 64)
	if err != nil {
		return fmt.Errorf("redis write %q: bad high-water mark %q in store: %w", key, hwText, err)
	}
	return &fencing.StaleError{HighWater: hw}
}

// Read implements fencing.Store.
func (s *Store) Read(ctx context.Context, key string) ([]byte, uint64, error) {
	vals, err := s.client.HMGet(ctx, s.resourceKey(key), "value", "token").Result()
	if err != nil {
		return nil, 0, fmt.Errorf("redis read %q: %w", key, err)
	}
	value, ok := vals[0].(string)
	if !ok {
		return nil, 0, fencing.ErrNotFound
	}
	tokenText, _ := vals[1].(string)
	token, err := strconv.ParseUint(tokenText, 10, 64)
	if err != nil {
		return nil, 0, fmt.Errorf("redis read %q: bad token %q in store: %w", key, tokenText, err)
	}
	return []byte(value), token, nil
}

// Health reports whether Redis answers (fencing.HealthChecker): the adapter
// is not ready while its Redis is down.
func (s *Store) Health(ctx context.Context) error { return s.client.Ping(ctx).Err() }

// Close implements fencing.Store.
func (s *Store) Close() error { return s.client.Close() }
