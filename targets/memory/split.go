package memory

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencecheck/fencecheck/fencing"
	"github.com/fencecheck/fencecheck/history"
)

// The split-issuers bug: a lock service of two replicas that share one
// counter through a leader while they can reach each other, and issue from
// their own copies when they cannot. It is what "we replicated the lock
// service for availability" looks like without consensus: correct until a
// partition, then both sides hand out the same numbers.
//
// Both replicas are full reference nodes with their own data dirs. The
// follower asks the leader for every new token over HTTP (through a URL the
// harness may point at a partition proxy); when that fails it increments its
// own durable copy of the counter, which only ever learned the leader's
// tokens it was given. Resources should be served by the leader only.

// nextTokenPath is the leader's counter endpoint; it is not part of Fencing
// API v1 and exists only on a split-issuers leader.
const nextTokenPath = "/v1/internal/next-token/"

// The one-way-failover bug: the same two replicas, made safe against a cut
// both ways, and not against a cut one way. The leader confirms each token
// with the follower before issuing it (the follower's copy then holds
// every token the leader issued), and issues nothing while it cannot; the
// follower issues from its copy only when it cannot connect to the leader
// (a leader that answers slowly is waited for, never replaced). When the
// leader reconnects after a failed confirmation, or starts, it takes the
// follower's copy if that is ahead. The flaw: connected all along, it
// ignores the follower's copy. So a follower that cannot reach a leader
// that still reaches it issues from its copy, and the leader issues the
// same tokens after it. A cut both ways stops the leader; a restart or a
// pause breaks its connection; only a one-way cut shows it.

// confirmPath is the follower's endpoint where a one-way-failover leader
// confirms a token: ?n=N, answered with the follower's copy before it.
const confirmPath = "/v1/internal/confirm-token/"

// DefaultPeerTimeout bounds the follower's request to the leader: past it,
// the leader counts as unreachable (a black-holed link never answers).
const DefaultPeerTimeout = 250 * time.Millisecond

// IssuerPair is the split-issuers target's pair of replicas.
type IssuerPair struct {
	Leader, Follower *Node

	peerURL atomic.Pointer[string]
	// cut: the follower cannot reach the leader; leaderCut: the leader
	// cannot reach the follower (one-way-failover only: only its leader
	// opens connections to the follower).
	cut       atomic.Bool
	leaderCut atomic.Bool
	timeout   atomic.Int64
	hc        *http.Client
	// failover is the one-way-failover bug; followerURL is where its
	// leader confirms tokens.
	failover    bool
	followerURL atomic.Pointer[string]

	// members is rejoin-empty's protocol (rejoin.go): the replicas'
	// membership, the stores of their current starts, and whether a member
	// added back skips its catch-up (the bug).
	members       bool
	emptyRejoin   bool
	leaderOut     atomic.Bool
	followerOut   atomic.Bool
	aloneMu       sync.RWMutex
	leaderStore   atomic.Pointer[Store]
	followerStore atomic.Pointer[Store]
	incarnations  map[string]int

	mu          sync.Mutex
	peerFetches int // successful follower→leader token fetches, for tests and logs
	localIssues int // tokens the follower issued from its own copy
}

// NewSplitIssuers returns the two replicas, stopped. Each Config is a
// reference node's (its own Dir and Addr; the same SealKey for both); the
// split-issuers switch itself may be in their Bugs or not, other bugs apply
// to both replicas.
func NewSplitIssuers(leader, follower Config) (*IssuerPair, error) {
	return newPair(leader, follower, leader.Bugs.Has(OneWayFailover) || follower.Bugs.Has(OneWayFailover), false)
}

// newPair makes the replicas of one of the pair's protocols: failover
// (one-way-failover's) or members (rejoin-empty's, NewMemberPair), or
// neither (split-issuers').
func newPair(leader, follower Config, failover, members bool) (*IssuerPair, error) {
	if leader.Name == "" {
		leader.Name = "issuer-1"
	}
	if follower.Name == "" {
		follower.Name = "issuer-2"
	}
	if leader.Dir == "" || follower.Dir == "" || leader.Dir == follower.Dir {
		return nil, errors.New("memory: split issuers need two distinct data dirs")
	}
	emptyRejoin := leader.Bugs.Has(RejoinEmpty) || follower.Bugs.Has(RejoinEmpty)
	leader.Bugs, follower.Bugs = withoutSplit(leader.Bugs), withoutSplit(follower.Bugs)
	l, err := NewNode(leader)
	if err != nil {
		return nil, err
	}
	f, err := NewNode(follower)
	if err != nil {
		return nil, err
	}
	s := &IssuerPair{Leader: l, Follower: f, hc: fencing.DefaultHTTPClient(), failover: failover,
		members: members, emptyRejoin: emptyRejoin}
	if failover {
		// A connection per request: the follower tells a leader it cannot
		// reach (the dial fails) from one that does not answer, which a
		// kept-alive connection to a killed leader would blur.
		s.hc.Transport.(*http.Transport).DisableKeepAlives = true
	}
	s.timeout.Store(int64(DefaultPeerTimeout))
	l.extra = func(mux *http.ServeMux, st *Store) {
		s.leaderStore.Store(st)
		mountNextToken(mux, st)
	}
	f.upstream = s.fetchToken
	f.extra = func(mux *http.ServeMux, st *Store) { s.followerStore.Store(st) }
	switch {
	case members:
		// Each replica leads half the locks: both ask, and both confirm.
		for _, r := range []*Node{l, f} {
			r.upstream = func(ctx context.Context, lock string) (uint64, error) { return s.memberFetch(ctx, r, lock) }
			r.confirmer = func() func(context.Context, string, uint64) (uint64, error) { return s.memberConfirm(r) }
			r.extra = func(mux *http.ServeMux, st *Store) {
				s.storeOf(r).Store(st)
				mountNextToken(mux, st)
				mountConfirm(mux, st)
			}
		}
	case failover:
		l.confirmer = s.newConfirm
		f.extra = func(mux *http.ServeMux, st *Store) {
			s.followerStore.Store(st)
			mountConfirm(mux, st)
		}
	}
	return s, nil
}

// mountNextToken serves nextTokenPath: st's next token for a lock.
func mountNextToken(mux *http.ServeMux, st *Store) {
	mux.HandleFunc("POST "+nextTokenPath+"{lock}", func(w http.ResponseWriter, r *http.Request) {
		lock := r.PathValue("lock")
		if !fencing.ValidName(lock) {
			http.Error(w, "bad lock name", http.StatusBadRequest)
			return
		}
		n, err := st.NextToken(r.Context(), lock)
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(fencing.LockResponse{Token: history.FormatToken(n)})
	})
}

// mountConfirm serves confirmPath: st records a token the other replica
// is about to issue, and answers its copy from before.
func mountConfirm(mux *http.ServeMux, st *Store) {
	mux.HandleFunc("POST "+confirmPath+"{lock}", func(w http.ResponseWriter, r *http.Request) {
		lock := r.PathValue("lock")
		n, err := strconv.ParseUint(r.URL.Query().Get("n"), 10, 64)
		if !fencing.ValidName(lock) || err != nil {
			http.Error(w, "bad lock name or token", http.StatusBadRequest)
			return
		}
		prior, err := st.Observe(lock, n)
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(fencing.LockResponse{Token: history.FormatToken(prior)})
	})
}

// newConfirm is the leader's Confirm for one start of its store: a start
// counts as a reconnection. After a reconnection the leader takes the
// follower's copy of each lock's counter once, at its first confirmation.
func (s *IssuerPair) newConfirm() func(ctx context.Context, lock string, n uint64) (uint64, error) {
	var mu sync.Mutex
	synced := map[string]bool{} // locks confirmed since the last reconnection
	return func(ctx context.Context, lock string, n uint64) (uint64, error) {
		have, err := s.confirmToken(ctx, lock, n)
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			clear(synced)
			return 0, fmt.Errorf("the follower did not confirm token %d: %w", n, err)
		}
		if !synced[lock] {
			synced[lock] = true
			return have, nil
		}
		// The bug: connected all along, the leader takes it that the
		// follower issued nothing of its own.
		return 0, nil
	}
}

func (s *IssuerPair) confirmToken(ctx context.Context, lock string, n uint64) (uint64, error) {
	return s.ask(ctx, s.Leader, confirmPath+url.PathEscape(lock)+"?n="+strconv.FormatUint(n, 10))
}

// ask sends a token request from replica from to the other one: path on
// the follower's URL from the leader, on the leader's (PeerURL) from the
// follower, each direction cut apart.
func (s *IssuerPair) ask(ctx context.Context, from *Node, path string) (uint64, error) {
	cut, u := s.cut.Load(), s.peerURL.Load()
	if from == s.Leader {
		cut, u = s.leaderCut.Load(), s.followerURL.Load()
	}
	if cut {
		return 0, errors.New("replicas partitioned")
	}
	if u == nil {
		return 0, errors.New("the other replica has not started")
	}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(s.timeout.Load()))
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, *u+path, nil)
	if err != nil {
		return 0, err
	}
	return s.tokenAnswer(req)
}

// tokenAnswer sends req and reads the token its answer names.
func (s *IssuerPair) tokenAnswer(req *http.Request) (uint64, error) {
	resp, err := s.hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil {
		return 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("%s answered %s: %s", req.URL.Host, resp.Status, b)
	}
	var lr fencing.LockResponse
	if err := json.Unmarshal(b, &lr); err != nil {
		return 0, err
	}
	n, _, err := history.SplitToken(lr.Token)
	return n, err
}

func withoutSplit(b Bugs) Bugs {
	out := Bugs{}
	for k, v := range b {
		if k != SplitIssuers && k != OneWayFailover && k != RejoinEmpty {
			out[k] = v
		}
	}
	return out
}

// Start starts the leader, then the follower, on their Config addresses;
// unless SetPeerURL was called, the follower reaches the leader directly.
func (s *IssuerPair) Start() (leaderURL, followerURL string, err error) {
	if leaderURL, err = s.Leader.Start(""); err != nil {
		return "", "", err
	}
	if s.peerURL.Load() == nil {
		s.SetPeerURL(leaderURL)
	}
	if followerURL, err = s.Follower.Start(""); err != nil {
		s.Leader.Stop()
		return "", "", err
	}
	s.followerURL.Store(&followerURL)
	return leaderURL, followerURL, nil
}

// Stop stops both replicas.
func (s *IssuerPair) Stop() error {
	return errors.Join(s.Follower.Stop(), s.Leader.Stop())
}

// SetPeerURL is where the follower reaches the leader: the leader's URL, or
// a proxy in front of it that a partition nemesis can black-hole.
func (s *IssuerPair) SetPeerURL(u string) { s.peerURL.Store(&u) }

// SetFollowerURL is where a one-way-failover leader reaches the follower
// (Start sets it to the follower's URL).
func (s *IssuerPair) SetFollowerURL(u string) { s.followerURL.Store(&u) }

// PeerURL is where the follower reaches the leader.
func (s *IssuerPair) PeerURL() string {
	if p := s.peerURL.Load(); p != nil {
		return *p
	}
	return ""
}

// SetPeerTimeout changes how long the follower waits for the leader.
func (s *IssuerPair) SetPeerTimeout(d time.Duration) { s.timeout.Store(int64(d)) }

// Cut partitions the replicas in process (true) or heals them (false),
// without a proxy: the follower's requests to the leader fail at once, as
// on a refused connection (and, under one-way-failover, the leader's to
// the follower).
func (s *IssuerPair) Cut(on bool) { s.CutOneWay(on, on) }

// CutOneWay cuts each direction apart: the connections the follower opens
// to the leader, and those the leader opens to the follower.
func (s *IssuerPair) CutOneWay(followerToLeader, leaderToFollower bool) {
	s.cut.Store(followerToLeader)
	s.leaderCut.Store(leaderToFollower)
}

// Counts reports how many tokens the follower got from the leader and how
// many it issued from its own copy.
func (s *IssuerPair) Counts() (fromLeader, local int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peerFetches, s.localIssues
}

func (s *IssuerPair) fetchToken(ctx context.Context, lock string) (n uint64, err error) {
	defer func() {
		s.mu.Lock()
		if err == nil {
			s.peerFetches++
		} else {
			s.localIssues++
		}
		s.mu.Unlock()
	}()
	if s.cut.Load() {
		return 0, errors.New("replicas partitioned")
	}
	n, err = s.askLeader(ctx, lock)
	if err != nil && s.failover && !dialFailed(err) {
		// Connected, and no answer in time or a refusal: the leader is
		// alive and may still issue, so the follower must not.
		return 0, fmt.Errorf("%w: %v", ErrNoFailover, err)
	}
	return n, err
}

// askLeader asks the leader for lock's next token.
func (s *IssuerPair) askLeader(ctx context.Context, lock string) (uint64, error) {
	return s.ask(ctx, s.Follower, nextTokenPath+url.PathEscape(lock))
}

// dialFailed says whether err is a failure to connect (refused, or no
// route): the one-way-failover follower's sign that the leader is gone.
func dialFailed(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}
