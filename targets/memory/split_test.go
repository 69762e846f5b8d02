package memory

import (
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/fencing"
	"github.com/fencecheck/fencecheck/history"
)

func startSplit(t *testing.T) (*IssuerPair, *fencing.Client, *fencing.Client) {
	t.Helper()
	dir := t.TempDir()
	s, err := NewSplitIssuers(Config{Dir: filepath.Join(dir, "a")}, Config{Dir: filepath.Join(dir, "b"), Bugs: Bugs{SplitIssuers: true}})
	require.NoError(t, err)
	lu, fu, err := s.Start()
	require.NoError(t, err)
	t.Cleanup(func() { s.Stop() })
	return s, fencing.NewClient(lu, nil), fencing.NewClient(fu, nil)
}

// acquireRelease takes and gives back lock l on c, returning the token.
func acquireRelease(t *testing.T, c *fencing.Client, owner string) uint64 {
	t.Helper()
	r := c.Acquire(bg, "l", owner, time.Minute)
	require.Equal(t, fencing.Ok, r.Outcome, "%+v", r)
	require.Equal(t, fencing.Ok, c.Release(bg, "l", owner, r.Token).Outcome)
	n, _, err := history.SplitToken(r.Token)
	require.NoError(t, err)
	return n
}

func TestSplitIssuersShareOneCounterWhileConnected(t *testing.T) {
	s, leader, follower := startSplit(t)
	var got []uint64
	for i := 0; i < 3; i++ {
		got = append(got, acquireRelease(t, leader, "a"), acquireRelease(t, follower, "b"))
	}
	assert.Equal(t, []uint64{1, 2, 3, 4, 5, 6}, got, "one shared sequence")
	from, local := s.Counts()
	assert.Equal(t, 3, from)
	assert.Equal(t, 0, local)

	// The follower's copy survives its restart; the leader's counter too.
	require.NoError(t, s.Follower.Restart(false))
	require.NoError(t, follower.Health(bg))
	assert.Equal(t, uint64(7), acquireRelease(t, follower, "b"))
}

func TestSplitIssuersDivergeWhenCut(t *testing.T) {
	s, leader, follower := startSplit(t)
	acquireRelease(t, leader, "a")   // 1
	acquireRelease(t, follower, "b") // 2 from the leader; the follower's copy is 2
	acquireRelease(t, leader, "a")   // 3
	s.Cut(true)
	assert.Equal(t, uint64(3), acquireRelease(t, follower, "b"), "the follower reissues 3 from its own copy")
	assert.Equal(t, uint64(4), acquireRelease(t, leader, "a"))
	s.Cut(false)
	assert.Equal(t, uint64(5), acquireRelease(t, follower, "b"))
}

func TestSplitIssuersBlackholedPeerURL(t *testing.T) {
	// A listener that accepts and never answers: a black-holing proxy.
	hole, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer hole.Close()
	go func() {
		for {
			c, err := hole.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	s, leader, follower := startSplit(t)
	s.SetPeerTimeout(50 * time.Millisecond)
	acquireRelease(t, leader, "a") // 1
	leaderURL := s.PeerURL()
	s.SetPeerURL("http://" + hole.Addr().String())
	start := time.Now()
	assert.Equal(t, uint64(1), acquireRelease(t, follower, "b"), "unreachable leader: the follower issues from its copy (0+1)")
	assert.GreaterOrEqual(t, time.Since(start), 50*time.Millisecond)
	s.SetPeerURL(leaderURL)
	assert.Equal(t, uint64(2), acquireRelease(t, follower, "b"))
}

func TestNewNodeRejectsSplitIssuers(t *testing.T) {
	_, err := NewNode(Config{Dir: t.TempDir(), Bugs: Bugs{SplitIssuers: true}})
	assert.ErrorContains(t, err, "NewSplitIssuers")
}

// One way: only the follower opens connections (to ask the leader), so a
// leader that cannot reach the follower changes nothing, and a follower
// that cannot reach the leader diverges as under a full cut.
func TestSplitIssuersOneWay(t *testing.T) {
	s, leader, follower := startSplit(t)
	tg := &Target{pair: s}
	acquireRelease(t, leader, "a") // 1
	require.NoError(t, tg.Grudge(bg, map[string][]string{"issuer-1": {"issuer-2"}}))
	assert.Equal(t, uint64(2), acquireRelease(t, follower, "b"), "the follower still reaches the leader")
	require.NoError(t, tg.Grudge(bg, map[string][]string{"issuer-2": {"issuer-1"}}))
	assert.Equal(t, uint64(3), acquireRelease(t, follower, "b"), "the follower issues 3 from its own copy")
	assert.Equal(t, uint64(3), acquireRelease(t, leader, "a"), "and so does the leader")
	assert.ErrorContains(t, tg.Grudge(bg, map[string][]string{"issuer-2": {"n9"}}), "no node")
	require.NoError(t, tg.HealPartition(bg))
	assert.Equal(t, uint64(4), acquireRelease(t, follower, "b"))
}

func startFailover(t *testing.T) (*IssuerPair, *fencing.Client, *fencing.Client) {
	t.Helper()
	dir := t.TempDir()
	s, err := NewSplitIssuers(Config{Dir: filepath.Join(dir, "a")}, Config{Dir: filepath.Join(dir, "b"), Bugs: Bugs{OneWayFailover: true}})
	require.NoError(t, err)
	lu, fu, err := s.Start()
	require.NoError(t, err)
	t.Cleanup(func() { s.Stop() })
	return s, fencing.NewClient(lu, nil), fencing.NewClient(fu, nil)
}

// refused: an acquire on c is not granted (a 5xx: the client records info).
func refused(t *testing.T, c *fencing.Client) {
	t.Helper()
	r := c.Acquire(bg, "l", "x", time.Minute)
	assert.NotEqual(t, fencing.Ok, r.Outcome, "%+v", r)
}

// Connected, one sequence; cut both ways, only the follower issues, and
// the leader takes up after the follower's tokens when it reconnects.
func TestOneWayFailoverIsSafeUnderACutBothWays(t *testing.T) {
	s, leader, follower := startFailover(t)
	assert.Equal(t, []uint64{1, 2, 3}, []uint64{acquireRelease(t, leader, "a"), acquireRelease(t, follower, "b"), acquireRelease(t, leader, "a")})
	s.Cut(true)
	refused(t, leader)
	assert.Equal(t, uint64(4), acquireRelease(t, follower, "b"), "the follower issues from its copy, which holds every token the leader issued")
	s.Cut(false)
	assert.Equal(t, uint64(5), acquireRelease(t, leader, "a"), "reconnected, the leader takes the follower's copy")

	// The leader cannot reach the follower: it issues nothing, and the
	// follower, which still reaches it, is refused by it and waits.
	s.CutOneWay(false, true)
	refused(t, leader)
	refused(t, follower)
	s.CutOneWay(false, false)
	assert.Equal(t, uint64(6), acquireRelease(t, follower, "b"))
}

// A restart of the leader or a pause: the follower fails over only on a
// leader it cannot connect to, and the restarted leader takes its copy.
func TestOneWayFailoverIsSafeUnderRestartAndPause(t *testing.T) {
	s, leader, follower := startFailover(t)
	acquireRelease(t, leader, "a") // 1
	require.NoError(t, s.Leader.Kill())
	assert.Equal(t, uint64(2), acquireRelease(t, follower, "b"), "the leader is gone: the follower issues")
	require.NoError(t, s.Leader.Restart(false))
	require.NoError(t, leader.Health(bg))
	assert.Equal(t, uint64(3), acquireRelease(t, leader, "a"), "a start is a reconnection")

	// Another lock: the restarted leader takes the follower's copy of each.
	r := follower.Acquire(bg, "m", "b", time.Minute)
	require.Equal(t, fencing.Ok, r.Outcome)
	require.NoError(t, s.Leader.Kill())
	r2 := follower.Acquire(bg, "m", "b", time.Minute)
	require.Equal(t, fencing.Ok, r2.Outcome, "the leader is gone: the follower issues for m")
	require.NoError(t, s.Leader.Restart(false))
	require.NoError(t, leader.Health(bg))
	acquireRelease(t, leader, "a") // l first: m's copy is taken at m's first confirmation
	r3 := leader.Acquire(bg, "m", "b", time.Minute)
	require.Equal(t, fencing.Ok, r3.Outcome)
	assert.NotEqual(t, r2.Token, r3.Token)

	s.Leader.Pause()
	refused(t, follower)
	s.Leader.Resume()
	assert.Equal(t, uint64(5), acquireRelease(t, follower, "b"))
}

// The bug: the follower cannot reach the leader, which still reaches it.
// The follower fails over and issues the leader's next token; the leader,
// connected all along, issues it again.
func TestOneWayFailoverDuplicatesUnderACutOneWay(t *testing.T) {
	s, leader, follower := startFailover(t)
	acquireRelease(t, leader, "a")   // 1
	acquireRelease(t, follower, "b") // 2
	s.CutOneWay(true, false)
	assert.Equal(t, uint64(3), acquireRelease(t, follower, "b"))
	assert.Equal(t, uint64(3), acquireRelease(t, leader, "a"), "the same token twice")
}

// The pair names its leader (the replica the follower asks for tokens), so
// a one-way cut can be aimed from the follower to it; a single reference
// leads nothing.
func TestTheIssuerPairNamesItsLeader(t *testing.T) {
	for _, bug := range []Bug{SplitIssuers, OneWayFailover} {
		tg, err := NewTarget(TargetOptions{Bugs: []string{string(bug)}})
		require.NoError(t, err)
		leader, err := tg.Leader(bg)
		require.NoError(t, err)
		assert.Equal(t, "issuer-1", leader, bug)
		assert.Equal(t, leader, tg.Nodes()[0].Name, "the first replica, which serves the resource too")
	}
	tg, err := NewTarget(TargetOptions{})
	require.NoError(t, err)
	_, err = tg.Leader(bg)
	assert.Error(t, err)
}
