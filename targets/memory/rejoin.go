package memory

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"net/url"
	"strconv"
	"sync/atomic"
)

// The rejoin-empty bug: the same two replicas, where failover is a
// membership change, as an operator replacing a failed machine makes it.
// Each replica leads half the locks (by a hash of the name). While both
// are members, a replica issues a token of its own locks only once the
// other recorded it (so each holds every token issued), and forwards an
// acquire of the other's locks to it, refusing when it cannot reach it: no
// cut, kill or pause makes a replica issue the other's tokens. Removed
// from the pair (RemoveMember: stopped, its data folder emptied), a
// replica leaves the other the only member, which issues every lock's
// tokens from its own copy. A member added back (AddMember) first copies
// the counters of the one that stayed, then serves: nothing issued is
// lost, so the correct pair is valid under member-replace too. A replica
// never reads the other's answer to a confirmation: while it is a member
// the other issues none of its locks, so the other's copy is never ahead.
//
// The flaw: a member is added back on its empty folder as it is, without
// the catch-up, and grants its locks from nothing: 1, 2, 3 again. Only
// member-replace shows it: a restart keeps the folder, and a cut or a
// pause only makes a replica refuse.

// NewMemberPair returns rejoin-empty's two replicas, stopped (Configs as
// for NewSplitIssuers; "leader" and "follower" only name them, each leads
// half the locks). With the rejoin-empty switch in their Bugs a member is
// added back empty; without it the pair is correct.
func NewMemberPair(leader, follower Config) (*IssuerPair, error) {
	return newPair(leader, follower, false, true)
}

// errOwnLock is a member replica's Upstream answer for a lock it leads:
// the store goes on to issue it (Confirm).
var errOwnLock = errors.New("this replica leads the lock")

// Owner is the replica that leads lock under rejoin-empty.
func (s *IssuerPair) Owner(lock string) *Node {
	h := fnv.New32a()
	h.Write([]byte(lock))
	if h.Sum32()%2 == 0 {
		return s.Leader
	}
	return s.Follower
}

// other, outOf and storeOf name a replica's partner, its membership flag
// (set while it is out of the pair) and its current store.
func (s *IssuerPair) other(r *Node) *Node {
	if r == s.Leader {
		return s.Follower
	}
	return s.Leader
}

func (s *IssuerPair) outOf(r *Node) *atomic.Bool {
	if r == s.Leader {
		return &s.leaderOut
	}
	return &s.followerOut
}

func (s *IssuerPair) storeOf(r *Node) *atomic.Pointer[Store] {
	if r == s.Leader {
		return &s.leaderStore
	}
	return &s.followerStore
}

// memberConfirm is replica r's Confirm under rejoin-empty, for the locks
// it leads. It is called under r's store lock, so AddMember, which makes
// the other a member again before it reads r's counters, sees every token
// r issued alone.
func (s *IssuerPair) memberConfirm(r *Node) func(ctx context.Context, lock string, n uint64) (uint64, error) {
	return func(ctx context.Context, lock string, n uint64) (uint64, error) {
		if s.outOf(r).Load() {
			// Started by something else while it is out: a removed member
			// must not issue from its empty folder.
			return 0, fmt.Errorf("%s is not a member of the pair", r.Name())
		}
		if s.outOf(s.other(r)).Load() {
			return 0, nil // the only member: no one to record it
		}
		if _, err := s.ask(ctx, r, confirmPath+url.PathEscape(lock)+"?n="+strconv.FormatUint(n, 10)); err != nil {
			return 0, fmt.Errorf("%s did not record token %d: %w", s.other(r).Name(), n, err)
		}
		return 0, nil
	}
}

// memberFetch is replica r's Upstream under rejoin-empty: for a lock the
// other leads, the other's token, or, while the other is out, the next of
// r's own copy. Every failure refuses (ErrNoFailover): the other, a
// member, may still be issuing.
func (s *IssuerPair) memberFetch(ctx context.Context, r *Node, lock string) (uint64, error) {
	if s.Owner(lock) == r {
		return 0, errOwnLock
	}
	if s.outOf(r).Load() {
		return 0, fmt.Errorf("%w: %s is not a member of the pair", ErrNoFailover, r.Name())
	}
	s.aloneMu.RLock()
	if s.outOf(s.other(r)).Load() {
		// Held until the token is durable: AddMember of the other waits
		// for it before it copies the counters.
		defer s.aloneMu.RUnlock()
		st := s.storeOf(r).Load()
		if st == nil {
			return 0, fmt.Errorf("%w: %s has no store", ErrNoFailover, r.Name())
		}
		n, err := st.issueOwn(lock)
		if err != nil {
			return 0, fmt.Errorf("%w: %v", ErrNoFailover, err)
		}
		s.mu.Lock()
		s.localIssues++
		s.mu.Unlock()
		return n, nil
	}
	s.aloneMu.RUnlock()
	n, err := s.ask(ctx, r, nextTokenPath+url.PathEscape(lock))
	if err != nil {
		return 0, fmt.Errorf("%w: %v", ErrNoFailover, err)
	}
	s.mu.Lock()
	s.peerFetches++
	s.mu.Unlock()
	return n, nil
}

// Remove takes node (a replica's name) out of the pair: it is stopped by
// stop, its data folder emptied, and then the other issues every lock
// alone (never side by side with it). The other already out is refused
// for now: removing both would leave no one holding the counters.
func (s *IssuerPair) Remove(node string, stop func() error) (id string, err error) {
	r, err := s.replica(node)
	if err != nil {
		return "", err
	}
	if s.outOf(s.other(r)).Load() {
		return "", errMemberOut
	}
	if err := stop(); err != nil {
		return "", err
	}
	if err := wipeDir(r.cfg.Dir); err != nil {
		return "", err
	}
	s.outOf(r).Store(true)
	return s.memberID(node, false), nil
}

// errMemberOut: Remove while the other member is out.
var errMemberOut = errors.New("the other member is out of the pair")

// Add makes node a member again, its replica stopped by stop: the counters
// of the one that stayed are copied into its folder (unless the
// rejoin-empty bug skips it), then start starts it. A member that is in is
// only started.
func (s *IssuerPair) Add(node string, stop, start func() error) (id string, err error) {
	r, err := s.replica(node)
	if err != nil {
		return "", err
	}
	out := s.outOf(r)
	if !out.Load() {
		return s.memberID(node, false), start()
	}
	// Something else may have started it while it was out (it issued
	// nothing: memberConfirm): it starts again from the catch-up.
	if err := stop(); err != nil {
		return "", err
	}
	other := s.storeOf(s.other(r)).Load()
	if other == nil {
		return "", fmt.Errorf("%s cannot catch up: the other replica never started", node)
	}
	// Member first, then the other's counters: its issues of r's locks
	// end with aloneMu, those of its own under its store lock
	// (memberConfirm), so the copy holds every token it issued alone.
	s.aloneMu.Lock()
	out.Store(false)
	s.aloneMu.Unlock()
	if !s.emptyRejoin {
		if err := adoptCounters(r.cfg.Dir, other.Counters()); err != nil {
			out.Store(true)
			return "", fmt.Errorf("%s catching up: %w", node, err)
		}
	}
	return s.memberID(node, true), start()
}

// replica is the replica named node, under rejoin-empty.
func (s *IssuerPair) replica(node string) (*Node, error) {
	if !s.members {
		return nil, errors.New("memory: only rejoin-empty's replicas change membership")
	}
	switch node {
	case s.Leader.Name():
		return s.Leader, nil
	case s.Follower.Name():
		return s.Follower, nil
	}
	return nil, fmt.Errorf("memory has no issuer replica %q", node)
}

// memberID names each incarnation of a member, as a cluster's member ids
// do: the one removed, and the new one (next).
func (s *IssuerPair) memberID(node string, next bool) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.incarnations == nil {
		s.incarnations = map[string]int{}
	}
	if next {
		s.incarnations[node]++
	}
	return node + "." + strconv.Itoa(s.incarnations[node]+1)
}

// Counters is a copy of the issuer's counters, as they are in memory: a
// token being made durable is in it (a copy that is ahead is safe).
func (s *Store) Counters() map[string]uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.counters)
}

// issueOwn issues lock's next token from the store's own counter, asking
// no one: the rejoin-empty follower while it is the only member.
func (s *Store) issueOwn(lock string) (n uint64, err error) {
	err = s.do(func() (bool, error) {
		s.counters[lock]++
		n = s.counters[lock]
		return true, nil
	})
	return n, err
}

// adoptCounters raises the counters of the store in dir (not running) to
// counters, durably: a member's catch-up.
func adoptCounters(dir string, counters map[string]uint64) error {
	st, err := OpenStore(dir, StoreOptions{})
	if err != nil {
		return err
	}
	err = st.do(func() (bool, error) {
		for lock, n := range counters {
			st.counters[lock] = max(st.counters[lock], n)
		}
		return true, nil
	})
	return errors.Join(err, st.Close())
}
