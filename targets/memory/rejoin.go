package memory

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"sync/atomic"
)

// The rejoin-empty bug: the same two replicas, where failover is a
// membership change, as an operator replacing a failed machine makes it.
// While both are members the leader issues each token only once the
// follower recorded it (so the follower's copy holds every token issued),
// and the follower forwards every acquire to the leader and refuses when
// it cannot reach it: no cut, kill or pause makes it issue. Removed from
// the pair (RemoveMember: stopped, its data folder emptied), the leader
// leaves the follower the only member, and the follower issues from its
// copy; the follower removed leaves the leader issuing alone. A member
// added back (AddMember) first copies the counters of the one that stayed,
// then serves: nothing issued is lost, so the correct pair is valid under
// member-replace too. The leader never reads the follower's answer to a
// confirmation: while the leader is a member the follower issues nothing
// of its own, so its copy is never ahead.
//
// The flaw: a member is added back on its empty folder as it is, without
// the catch-up. A re-added leader grants 1, 2, 3 again; a re-added
// follower's copy lacks what the leader issued alone, which a later
// removal of the leader issues again. Only member-replace shows it: a
// restart keeps the folder, and a cut or a pause only makes a replica
// refuse.

// NewMemberPair returns rejoin-empty's two replicas, stopped (Configs as
// for NewSplitIssuers). With the rejoin-empty switch in their Bugs a
// member is added back empty; without it the pair is correct.
func NewMemberPair(leader, follower Config) (*IssuerPair, error) {
	return newPair(leader, follower, false, true)
}

// memberConfirm is the leader's Confirm under rejoin-empty. It is called
// under the leader's store lock, so AddMember, which turns the follower
// back into a member before it reads the leader's counters, sees every
// token the leader issued alone.
func (s *IssuerPair) memberConfirm() func(ctx context.Context, lock string, n uint64) (uint64, error) {
	return func(ctx context.Context, lock string, n uint64) (uint64, error) {
		if s.leaderOut.Load() {
			// Started by something else while it is out: a removed member
			// must not issue from its empty folder.
			return 0, errors.New("the leader is not a member of the pair")
		}
		if s.followerOut.Load() {
			return 0, nil // the only member: no one to record it
		}
		if _, err := s.confirmToken(ctx, lock, n); err != nil {
			return 0, fmt.Errorf("the follower did not record token %d: %w", n, err)
		}
		return 0, nil
	}
}

// memberFetch is the follower's Upstream under rejoin-empty: the leader's
// token, or, while the leader is removed, the next of its own copy. Every
// failure refuses (ErrNoFailover): a leader that is a member may still be
// issuing.
func (s *IssuerPair) memberFetch(ctx context.Context, lock string) (uint64, error) {
	if s.followerOut.Load() {
		return 0, fmt.Errorf("%w: the follower is not a member of the pair", ErrNoFailover)
	}
	s.aloneMu.RLock()
	if s.leaderOut.Load() {
		// Held until the token is durable: AddMember of the leader waits
		// for it before it copies the counters.
		defer s.aloneMu.RUnlock()
		st := s.followerStore.Load()
		if st == nil {
			return 0, fmt.Errorf("%w: the follower has no store", ErrNoFailover)
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
	if s.cut.Load() {
		return 0, fmt.Errorf("%w: replicas partitioned", ErrNoFailover)
	}
	n, err := s.askLeader(ctx, lock)
	if err != nil {
		return 0, fmt.Errorf("%w: %v", ErrNoFailover, err)
	}
	s.mu.Lock()
	s.peerFetches++
	s.mu.Unlock()
	return n, nil
}

// Remove takes node (the leader's or the follower's name) out of the pair:
// its replica is stopped by stop, its data folder emptied, and the other
// issues alone. The other already out is refused for now: removing both
// would leave no one holding the counters.
func (s *IssuerPair) Remove(node string, stop func() error) (id string, err error) {
	self, other, out, err := s.sides(node)
	if err != nil {
		return "", err
	}
	if other.Load() {
		return "", errMemberOut
	}
	if node == s.Follower.Name() {
		// The leader stops asking it first: it must not refuse while the
		// follower goes.
		out.Store(true)
	}
	if err := stop(); err != nil {
		return "", err
	}
	if err := wipeDir(self.cfg.Dir); err != nil {
		return "", err
	}
	// The leader is stopped before the follower issues alone, so the two
	// never issue side by side.
	out.Store(true)
	return s.memberID(node, false), nil
}

// errMemberOut: Remove while the other member is out.
var errMemberOut = errors.New("the other member is out of the pair")

// Add makes node a member again, its replica stopped: the counters of the
// one that stayed are copied into its folder (unless the rejoin-empty bug
// skips it), then start starts it. A member that is in is only started.
func (s *IssuerPair) Add(node string, stop, start func() error) (id string, err error) {
	self, _, out, err := s.sides(node)
	if err != nil {
		return "", err
	}
	if !out.Load() {
		return s.memberID(node, false), start()
	}
	// Something else may have started it while it was out: it restarts
	// from the catch-up.
	if err := stop(); err != nil {
		return "", err
	}
	other := s.leaderStore.Load()
	if node == s.Leader.Name() {
		other = s.followerStore.Load()
	}
	if other == nil {
		return "", fmt.Errorf("%s cannot catch up: the other replica never started", node)
	}
	// Member first, then the other's counters: the follower's own issues
	// end with aloneMu, the leader's alone ones under its store lock
	// (memberConfirm), so the copy holds every token either issued.
	s.aloneMu.Lock()
	out.Store(false)
	s.aloneMu.Unlock()
	if !s.emptyRejoin {
		if err := adoptCounters(self.cfg.Dir, other.Counters()); err != nil {
			out.Store(true)
			return "", fmt.Errorf("%s catching up: %w", node, err)
		}
	}
	return s.memberID(node, true), start()
}

// sides names node's replica, the other's membership flag and its own.
func (s *IssuerPair) sides(node string) (self *Node, other, out *atomic.Bool, err error) {
	if !s.members {
		return nil, nil, nil, errors.New("memory: only rejoin-empty's replicas change membership")
	}
	switch node {
	case s.Leader.Name():
		return s.Leader, &s.followerOut, &s.leaderOut, nil
	case s.Follower.Name():
		return s.Follower, &s.leaderOut, &s.followerOut, nil
	}
	return nil, nil, nil, fmt.Errorf("memory has no issuer replica %q", node)
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
