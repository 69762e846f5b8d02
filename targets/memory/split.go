package memory

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
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

// DefaultPeerTimeout bounds the follower's request to the leader: past it,
// the leader counts as unreachable (a black-holed link never answers).
const DefaultPeerTimeout = 250 * time.Millisecond

// IssuerPair is the split-issuers target's pair of replicas.
type IssuerPair struct {
	Leader, Follower *Node

	peerURL atomic.Pointer[string]
	cut     atomic.Bool
	timeout atomic.Int64
	hc      *http.Client

	mu          sync.Mutex
	peerFetches int // successful follower→leader token fetches, for tests and logs
	localIssues int // tokens the follower issued from its own copy
}

// NewSplitIssuers returns the two replicas, stopped. Each Config is a
// reference node's (its own Dir and Addr; the same SealKey for both); the
// split-issuers switch itself may be in their Bugs or not, other bugs apply
// to both replicas.
func NewSplitIssuers(leader, follower Config) (*IssuerPair, error) {
	if leader.Name == "" {
		leader.Name = "issuer-1"
	}
	if follower.Name == "" {
		follower.Name = "issuer-2"
	}
	if leader.Dir == "" || follower.Dir == "" || leader.Dir == follower.Dir {
		return nil, errors.New("memory: split issuers need two distinct data dirs")
	}
	leader.Bugs, follower.Bugs = withoutSplit(leader.Bugs), withoutSplit(follower.Bugs)
	l, err := NewNode(leader)
	if err != nil {
		return nil, err
	}
	f, err := NewNode(follower)
	if err != nil {
		return nil, err
	}
	s := &IssuerPair{Leader: l, Follower: f, hc: fencing.DefaultHTTPClient()}
	s.timeout.Store(int64(DefaultPeerTimeout))
	l.extra = func(mux *http.ServeMux, st *Store) {
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
	f.upstream = s.fetchToken
	return s, nil
}

func withoutSplit(b Bugs) Bugs {
	out := Bugs{}
	for k, v := range b {
		if k != SplitIssuers {
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
	return leaderURL, followerURL, nil
}

// Stop stops both replicas.
func (s *IssuerPair) Stop() error {
	return errors.Join(s.Follower.Stop(), s.Leader.Stop())
}

// SetPeerURL is where the follower reaches the leader: the leader's URL, or
// a proxy in front of it that a partition nemesis can black-hole.
func (s *IssuerPair) SetPeerURL(u string) { s.peerURL.Store(&u) }

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
// on a refused connection.
func (s *IssuerPair) Cut(on bool) { s.cut.Store(on) }

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
	ctx, cancel := context.WithTimeout(ctx, time.Duration(s.timeout.Load()))
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.PeerURL()+nextTokenPath+url.PathEscape(lock), nil)
	if err != nil {
		return 0, err
	}
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
		return 0, fmt.Errorf("leader answered %s: %s", resp.Status, b)
	}
	var lr fencing.LockResponse
	if err := json.Unmarshal(b, &lr); err != nil {
		return 0, err
	}
	n, _, err = history.SplitToken(lr.Token)
	return n, err
}
