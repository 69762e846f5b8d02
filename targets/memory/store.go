// Package memory is fencecheck's reference fencing implementation: a durable
// file-backed fencing.Store, the deliberate bug switches that break it in each
// known way, and Node, an in-process server the harness and nemeses drive
// (start, kill, restart, pause, clock skew).
package memory

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencecheck/fencecheck/durable"
	"github.com/fencecheck/fencecheck/fencing"
)

// Persistence: one JSON snapshot of the whole state, rewritten on every
// change (write temp file, fsync, rename, fsync dir), with group commit.
//
// Why a snapshot and not an append-only log: the reference's state is tiny
// (a counter and a holder per lock, a mark and a short value per key), so a
// snapshot costs about what a log append does, and it needs no replay, no
// compaction and no torn-tail handling, which are where durable logs hide
// their bugs. A reference must be obviously right first.
//
// Why group commit: an fsync'd rename takes milliseconds, and clients run
// concurrently. Every operation applies its change in memory under the lock,
// notes the state version it has seen, and then waits until a snapshot of at
// least that version is on disk; whoever finds no commit running writes the
// newest state for everyone waiting. Reads and rejections wait too: an answer
// based on a change that is not yet durable could be contradicted after a
// crash (a read that saw a value the disk never got).
//
// Why two copies: a disk can damage a file (a bit flipped, a file cut
// short: the disk-corrupt nemesis); the checksum finds it, and the other
// copy, written in full before any answer too, still holds everything
// acknowledged. The store starts from the newest good copy and rewrites
// the other; with neither good it refuses to start. A copy costs a second
// write and fsync per group commit.
const (
	snapshotName = "state.json"
	copyName     = "state.copy.json"
	formatV1     = 1
)

// ErrKilled is returned to operations still in flight when the store was
// killed or closed; the server answers them 5xx (info), as a crash would.
var ErrKilled = errors.New("store stopped")

type holder struct {
	Owner   string `json:"owner"`
	Token   uint64 `json:"token"`
	Expires int64  `json:"expires_unix_ns"`
}

type resource struct {
	HighWater uint64 `json:"high_water"`
	Token     uint64 `json:"token"`
	Value     []byte `json:"value"`
	// Written is when the key's last write was accepted (Unix ns, by the
	// machine's clock, which no clock fault moves), kept only under
	// forget-idle: stored with the mark, as a TTL is, it outlives a
	// restart.
	Written int64 `json:"written_ns,omitempty"`
}

type snapshot struct {
	Format   int                 `json:"format"`
	Version  uint64              `json:"version"`
	Counters map[string]uint64   `json:"counters,omitempty"`
	Locks    map[string]holder   `json:"locks,omitempty"`
	Keys     map[string]resource `json:"keys,omitempty"`
}

// StoreOptions configure OpenStore.
type StoreOptions struct {
	// Clock drives lease expiry (and tokens, under wallclock-tokens); nil is
	// the system clock. A forward step expires leases early on purpose: the
	// resource's check must keep writes safe anyway.
	Clock fencing.Clock
	// Bugs switches on deliberate faults; only the store-layer ones act here.
	Bugs Bugs
	// Upstream, when set, is asked for each new token first (the
	// split-issuers follower asking its leader); when it fails the store
	// issues from its own copy of the counter.
	Upstream func(ctx context.Context, lock string) (uint64, error)
	// Confirm, when set, is told each new token before it is issued (the
	// one-way-failover leader telling its follower), and answers the
	// follower's copy of the counter; a copy at or past the token makes
	// the store take it and try the next. An error refuses the token.
	Confirm func(ctx context.Context, lock string, n uint64) (uint64, error)
}

// ErrNoFailover is an Upstream error that makes the store refuse the token
// rather than issue from its own copy (the one-way-failover follower when
// its leader answers slowly or not at all on an open connection).
var ErrNoFailover = errors.New("memory: the leader did not answer, and it is not unreachable")

// upstreamAnswer is what Upstream said, asked before the store's lock is
// taken (a follower holding its lock while it asks would block the leader's
// Confirm, which needs it).
type upstreamAnswer struct {
	n   uint64
	err error
}

// Store is the reference's durable fencing.Store. It is safe for concurrent
// use; every answer is given only once the state it reflects is on disk.
type Store struct {
	dir  string
	opts StoreOptions

	mu         sync.Mutex
	cond       *sync.Cond
	counters   map[string]uint64
	locks      map[string]holder
	keys       map[string]resource
	version    uint64 // bumped by every change
	durable    uint64 // newest version on disk
	committing bool
	dead       atomic.Bool

	fileMu sync.Mutex // serialises snapshot files and fences them off after kill
	// started is when the store opened (Unix ns): forget-idle-since-start
	// counts idle time from no earlier.
	started int64
}

var (
	_ fencing.Store           = (*Store)(nil)
	_ fencing.UncheckedWriter = (*Store)(nil)
)

// OpenStore opens (creating if needed) the store in dir and restores the
// state persisted there.
func OpenStore(dir string, opts StoreOptions) (*Store, error) {
	if dir == "" {
		return nil, errors.New("memory: a data dir is needed")
	}
	if opts.Clock == nil {
		opts.Clock = fencing.SystemClock
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	s := &Store{dir: dir, opts: opts, counters: map[string]uint64{}, locks: map[string]holder{}, keys: map[string]resource{}, started: time.Now().UnixNano()}
	s.cond = sync.NewCond(&s.mu)
	snap, repair, err := loadSnapshot(dir, s.snapshotFiles())
	switch {
	case errors.Is(err, errCorrupt) && opts.Bugs.Has(TrustTruncatedState):
		// trust-truncated-state: a file it cannot read is taken for a
		// fresh one, and the store starts from nothing.
	case err != nil:
		return nil, err
	default:
		s.setLocked(snap)
	}
	if opts.Bugs.Has(CounterNoFsync) {
		if err := readSide(dir, countersName, &s.counters); err != nil {
			return nil, err
		}
	}
	if opts.Bugs.Has(HighwaterNoFsync) {
		if err := readSide(dir, keysName, &s.keys); err != nil {
			return nil, err
		}
	}
	// A temp file left by a crash mid-commit was never renamed, so it was
	// never acknowledged.
	for _, name := range s.snapshotFiles() {
		for _, tmp := range durable.TempFiles(filepath.Join(dir, name)) {
			os.Remove(tmp)
		}
	}
	if repair {
		// A copy damaged, missing or behind: both made whole again before
		// anything is answered, so the next damage finds a good one.
		err := s.writeSnapshot(s.snapshotLocked())
		if err == nil && opts.Bugs.Has(AckBeforeFsync) {
			err = s.syncSnapshot()
		}
		if err != nil {
			return nil, fmt.Errorf("memory: rewriting the state's copies: %w", err)
		}
	}
	return s, nil
}

// setLocked makes snap the store's state.
func (s *Store) setLocked(snap snapshot) {
	s.counters, s.locks, s.keys = map[string]uint64{}, map[string]holder{}, map[string]resource{}
	for k, v := range snap.Counters {
		s.counters[k] = v
	}
	for k, v := range snap.Locks {
		s.locks[k] = v
	}
	for k, v := range snap.Keys {
		s.keys[k] = v
	}
	s.version, s.durable = snap.Version, snap.Version
}

// Dir is the store's data directory.
func (s *Store) Dir() string { return s.dir }

func (s *Store) now() int64 { return s.opts.Clock.Now().UnixNano() }

// The files of the no-fsync bugs: what they name is written there, in
// place and never fsynced, instead of into the snapshot.
const (
	countersName = "counters.json"
	keysName     = "keys.json"
)

// commit is one group commit's files: the snapshot, and the no-fsync bugs'
// side files (nil when off).
type commit struct {
	snapshot, counters, keys []byte
	version                  uint64
}

// snapshotLocked serialises what is durable; the bug switches leave out
// what they name (and the no-fsync ones write it beside the snapshot).
func (s *Store) snapshotLocked() commit {
	snap := snapshot{Format: formatV1, Version: s.version, Locks: s.locks}
	c := commit{version: s.version}
	switch {
	case s.opts.Bugs.Has(CounterNoFsync):
		c.counters = mustJSON(s.counters)
	case !s.opts.Bugs.Has(CounterInMemory):
		snap.Counters = s.counters
	}
	switch {
	case s.opts.Bugs.Has(HighwaterNoFsync):
		c.keys = mustJSON(s.keys)
	case !s.opts.Bugs.Has(ForgetHighwater):
		snap.Keys = s.keys
	}
	c.snapshot = encodeSnapshot(snap)
	return c
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // maps of strings and numbers always marshal
	}
	return b
}

// readSide reads a no-fsync bug's side file into v. A missing, empty or
// torn file is no state: after a power loss the file's name may be durable
// (the snapshot's folder fsync made it so) while its data never was, or was
// in part.
func readSide(dir, name string, v any) error {
	b, err := os.ReadFile(filepath.Join(dir, name))
	if os.IsNotExist(err) || (err == nil && len(b) == 0) {
		return nil
	}
	if err != nil {
		return err
	}
	// Torn by a power loss (a crash state that kept the new bytes but not
	// the truncation, or part of them): the sloppy store these bugs are
	// starts afresh, as from an empty file (a syntax error sets nothing).
	_ = json.Unmarshal(b, v)
	return nil
}

// settleLocked waits until version need is on disk, committing it itself
// when no one else is. Called with s.mu held; returns with it held.
func (s *Store) settleLocked(need uint64) error {
	for s.durable < need {
		if s.dead.Load() {
			return ErrKilled
		}
		if s.committing {
			s.cond.Wait()
			continue
		}
		s.committing = true
		c := s.snapshotLocked()
		s.mu.Unlock()
		err := s.writeSnapshot(c)
		s.mu.Lock()
		if err == nil && c.version > s.durable {
			s.durable = c.version
		}
		if err == nil && s.opts.Bugs.Has(AckBeforeFsync) {
			// ack-before-fsync: everyone this commit covers answers
			// now; a flusher fsyncs, and the next commit waits for it.
			go s.lateSync()
		} else {
			s.committing = false
		}
		s.cond.Broadcast()
		if err != nil {
			return err
		}
	}
	return nil
}

func (s *Store) writeSnapshot(c commit) error {
	s.fileMu.Lock()
	defer s.fileMu.Unlock()
	if s.dead.Load() {
		return ErrKilled
	}
	// The no-fsync bugs: rewritten in place, never synced. What a kill
	// leaves is what was written; what a power loss leaves is what the
	// disk got, which is nothing.
	for name, b := range map[string][]byte{countersName: c.counters, keysName: c.keys} {
		if b != nil {
			if err := os.WriteFile(filepath.Join(s.dir, name), b, 0o644); err != nil {
				return err
			}
		}
	}
	for _, name := range s.snapshotFiles() {
		if s.opts.Bugs.Has(AckBeforeFsync) {
			// Temp file and rename, no fsync yet: syncSnapshot follows the
			// answers.
			tmp := filepath.Join(s.dir, "."+name+"0")
			if err := os.WriteFile(tmp, c.snapshot, 0o644); err != nil {
				return err
			}
			if err := os.Rename(tmp, filepath.Join(s.dir, name)); err != nil {
				return err
			}
			continue
		}
		// Temp file, fsync, rename, fsync of the folder: acknowledged state
		// survives a crash or a power loss.
		if err := durable.WriteFile(filepath.Join(s.dir, name), c.snapshot, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// beforeLateSync, set by a test, runs before ack-before-fsync's late fsync:
// it holds the window open.
var beforeLateSync atomic.Pointer[func()]

// lateSyncLag is how long after its answers ack-before-fsync's flusher
// takes a commit (a flusher woken by a 2 ms timer): with the fsync's own
// time, the window in which a power loss takes what was acknowledged.
const lateSyncLag = 2 * time.Millisecond

// lateSync is ack-before-fsync's flusher: it fsyncs the commit already
// answered, then lets the next one start. An error (the store killed
// meanwhile) leaves what the disk has.
func (s *Store) lateSync() {
	time.Sleep(lateSyncLag)
	_ = s.syncSnapshot()
	s.mu.Lock()
	s.committing = false
	s.cond.Broadcast()
	s.mu.Unlock()
}

// syncSnapshot is ack-before-fsync's late half: the snapshot and its folder
// fsynced after the answers went out.
func (s *Store) syncSnapshot() error {
	if hook := beforeLateSync.Load(); hook != nil {
		(*hook)()
	}
	// Not under fileMu: a kill does not wait for an fsync under way, as a
	// power cut does not. The fsync writes nothing; whether it reached
	// the disk before the power went is the race a real one runs (on the
	// layer, an fsync after the cut fails).
	var names []string
	for _, name := range s.snapshotFiles() {
		names = append(names, filepath.Join(s.dir, name))
	}
	for _, name := range append(names, s.dir) {
		if s.dead.Load() {
			return ErrKilled
		}
		f, err := os.Open(name)
		if err != nil {
			return err
		}
		err = f.Sync()
		f.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// do runs fn under the lock, then waits until the state fn saw is durable.
// fn reports whether it changed anything.
func (s *Store) do(fn func() (changed bool, err error)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dead.Load() {
		return ErrKilled
	}
	if s.opts.Bugs.Has(IgnoreWriteErrors) {
		return s.doWriteThrough(fn)
	}
	changed, err := fn()
	if changed {
		s.version++
	}
	if serr := s.settleLocked(s.version); serr != nil {
		return serr
	}
	return err
}

// doWriteThrough is ignore-write-errors' store, which keeps no state of its
// own between operations: each reads the snapshot, changes it and writes it
// back (temp file, fsync, rename), one at a time, and a write that fails is
// taken for done. On a full disk the temp file cannot be made, the
// snapshot stays as it was, and the next operation reads it: the counter
// issues its tokens again, the marks and values it acknowledged are gone.
func (s *Store) doWriteThrough(fn func() (bool, error)) error {
	snap, _, err := loadSnapshot(s.dir, s.snapshotFiles())
	if err != nil {
		return err
	}
	s.setLocked(snap)
	changed, err := fn()
	if changed {
		s.version++
		werr := s.writeSnapshot(s.snapshotLocked())
		if errors.Is(werr, ErrKilled) {
			return werr
		}
		// Any other error (ENOSPC, EIO) is answered as success: the bug.
		s.durable = s.version
	}
	return err
}

// upstream asks Upstream, if any, for lock's next token.
func (s *Store) upstream(ctx context.Context, lock string) upstreamAnswer {
	if s.opts.Upstream == nil || s.opts.Bugs.Has(WallclockTokens) {
		return upstreamAnswer{}
	}
	n, err := s.opts.Upstream(ctx, lock)
	return upstreamAnswer{n: n, err: err}
}

// nextTokenLocked issues the next token for lock, given what Upstream said.
func (s *Store) nextTokenLocked(ctx context.Context, lock string, up upstreamAnswer) (uint64, error) {
	if s.opts.Bugs.Has(WallclockTokens) {
		return uint64(s.opts.Clock.Now().UnixMilli()), nil
	}
	if s.opts.Upstream != nil {
		if up.err == nil {
			if up.n > s.counters[lock] {
				s.counters[lock] = up.n
			}
			return up.n, nil
		}
		if errors.Is(up.err, ErrNoFailover) {
			return 0, up.err
		}
	}
	if s.opts.Confirm != nil {
		for range 3 {
			n := s.counters[lock] + 1
			have, err := s.opts.Confirm(ctx, lock, n)
			if err != nil {
				return 0, err
			}
			if have < n {
				s.counters[lock] = n
				return n, nil
			}
			s.counters[lock] = have
		}
		return 0, errors.New("memory: the follower kept issuing past the leader")
	}
	s.counters[lock]++
	return s.counters[lock], nil
}

// NextToken issues a token for lock without taking the lock: the
// split-issuers leader's side of the shared counter.
func (s *Store) NextToken(ctx context.Context, lock string) (token uint64, err error) {
	up := s.upstream(ctx, lock)
	err = s.do(func() (bool, error) {
		token, err = s.nextTokenLocked(ctx, lock, up)
		return err == nil, err
	})
	return token, err
}

// Observe raises lock's counter to n if it is lower, durably, and returns
// what it was: the one-way-failover follower's side of a confirmation.
func (s *Store) Observe(lock string, n uint64) (prior uint64, err error) {
	err = s.do(func() (bool, error) {
		prior = s.counters[lock]
		if n > prior {
			s.counters[lock] = n
			return true, nil
		}
		return false, nil
	})
	return prior, err
}

// Acquire implements fencing.Store: the lock is free, expired, or already
// the owner's (a re-acquire gets a fresh token and lease).
func (s *Store) Acquire(ctx context.Context, lock, owner string, ttl time.Duration) (token uint64, err error) {
	up := s.upstream(ctx, lock)
	err = s.do(func() (bool, error) {
		now := s.now()
		if h, ok := s.locks[lock]; ok && h.Owner != owner && now < h.Expires {
			return false, fencing.ErrHeld
		}
		if token, err = s.nextTokenLocked(ctx, lock, up); err != nil {
			return false, err
		}
		s.locks[lock] = holder{Owner: owner, Token: token, Expires: now + int64(ttl)}
		return true, nil
	})
	return token, err
}

// Renew implements fencing.Store: only the current holder with its token,
// before its lease ran out.
func (s *Store) Renew(ctx context.Context, lock, owner string, token uint64, ttl time.Duration) error {
	return s.do(func() (bool, error) {
		now := s.now()
		h, ok := s.locks[lock]
		if !ok || h.Owner != owner || h.Token != token || now >= h.Expires {
			return false, fencing.ErrLost
		}
		h.Expires = now + int64(ttl)
		s.locks[lock] = h
		return true, nil
	})
}

// Release implements fencing.Store: like Renew, an expired lease is lost.
func (s *Store) Release(ctx context.Context, lock, owner string, token uint64) error {
	return s.do(func() (bool, error) {
		h, ok := s.locks[lock]
		if !ok || h.Owner != owner || h.Token != token || s.now() >= h.Expires {
			return false, fencing.ErrLost
		}
		delete(s.locks, lock)
		return true, nil
	})
}

// ForgetIdleAfter is how long a key must go without an accepted write for
// the forget-idle bug to forget its mark.
const ForgetIdleAfter = 3 * time.Second

// Write implements fencing.Store: strict fencing, token must be newer than
// the key's high-water mark (bugs: accept-equal, no-fencing).
func (s *Store) Write(ctx context.Context, key string, token uint64, value []byte) error {
	return s.do(func() (bool, error) {
		r := s.keys[key]
		forgets := s.opts.Bugs.Has(ForgetIdle) || s.opts.Bugs.Has(ForgetIdleSinceStart)
		if forgets {
			since := r.Written
			if s.opts.Bugs.Has(ForgetIdleSinceStart) {
				since = max(since, s.started)
			}
			if r.Written != 0 && time.Now().UnixNano()-since >= int64(ForgetIdleAfter) {
				r.HighWater = 0 // evicted: the value stays, the mark is gone
			}
		}
		ok := token > r.HighWater ||
			(token == r.HighWater && s.opts.Bugs.Has(AcceptEqual)) ||
			s.opts.Bugs.Has(NoFencing)
		if !ok {
			return false, &fencing.StaleError{HighWater: r.HighWater}
		}
		r.Value = append([]byte{}, value...)
		r.Token = token
		if token > r.HighWater {
			r.HighWater = token
		}
		if forgets {
			r.Written = time.Now().UnixNano()
		}
		s.keys[key] = r
		return true, nil
	})
}

// WriteUnchecked implements fencing.UncheckedWriter (missing-as-zero): the
// value and its token change, the high-water mark does not.
func (s *Store) WriteUnchecked(ctx context.Context, key string, token uint64, value []byte) error {
	return s.do(func() (bool, error) {
		r := s.keys[key]
		r.Value = append([]byte{}, value...)
		r.Token = token
		s.keys[key] = r
		return true, nil
	})
}

// Read implements fencing.Store.
func (s *Store) Read(ctx context.Context, key string) (value []byte, token uint64, err error) {
	err = s.do(func() (bool, error) {
		r, ok := s.keys[key]
		if !ok {
			return false, fencing.ErrNotFound
		}
		value, token = r.Value, r.Token
		return false, nil
	})
	return value, token, err
}

// Close stops the store; operations still waiting for their commit fail
// with ErrKilled. State that only lived in memory (the bug switches') is gone.
func (s *Store) Close() error {
	s.kill()
	return nil
}

// kill fences the store off from its data dir: once it returns, this
// instance never writes there again, so a new instance can open the dir.
func (s *Store) kill() {
	s.dead.Store(true)
	s.fileMu.Lock()
	s.fileMu.Unlock() //nolint:staticcheck // waiting for an in-progress snapshot is the point
	s.mu.Lock()
	s.cond.Broadcast()
	s.mu.Unlock()
}
