package memory

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/fencing"
)

func startMembers(t *testing.T, bugs Bugs) (*IssuerPair, *fencing.Client, *fencing.Client) {
	t.Helper()
	dir := t.TempDir()
	s, err := NewMemberPair(Config{Dir: filepath.Join(dir, "a"), Bugs: bugs}, Config{Dir: filepath.Join(dir, "b"), Bugs: bugs})
	require.NoError(t, err)
	lu, fu, err := s.Start()
	require.NoError(t, err)
	t.Cleanup(func() { s.Stop() })
	return s, fencing.NewClient(lu, nil), fencing.NewClient(fu, nil)
}

// replace removes n from the pair and adds it back, as member-replace does.
func replace(t *testing.T, s *IssuerPair, n *Node, c *fencing.Client) {
	t.Helper()
	_, err := s.Remove(n.Name(), n.Kill)
	require.NoError(t, err)
	assert.Empty(t, readDir(t, n.cfg.Dir), "the folder is emptied")
	add(t, s, n, c)
}

// add adds n back to the pair and waits for it to serve.
func add(t *testing.T, s *IssuerPair, n *Node, c *fencing.Client) {
	t.Helper()
	_, err := s.Add(n.Name(), n.Kill, func() error { _, err := n.Start(""); return err })
	require.NoError(t, err)
	require.NoError(t, c.Health(bg))
}

// ledBy names a lock each replica leads.
func ledBy(s *IssuerPair) (leaders, followers string) {
	for i := 0; leaders == "" || followers == ""; i++ {
		l := "l" + strconv.Itoa(i)
		switch {
		case s.Owner(l) == s.Leader && leaders == "":
			leaders = l
		case s.Owner(l) == s.Follower && followers == "":
			followers = l
		}
	}
	return leaders, followers
}

// refusedOn: an acquire of lock on c is not granted.
func refusedOn(t *testing.T, c *fencing.Client, lock string) {
	t.Helper()
	r := c.Acquire(bg, lock, "x", time.Minute)
	assert.NotEqual(t, fencing.Ok, r.Outcome, "%s: %+v", lock, r)
}

// Without the bug: one sequence per lock through every replacement. A
// replica removed, the other issues every lock from its copy; added back,
// it copies the other's counters first.
func TestMemberPairLosesNothingWhenAMemberIsReplaced(t *testing.T) {
	s, leader, follower := startMembers(t, nil)
	a, b := ledBy(s)
	assert.Equal(t, []uint64{1, 2, 1, 2}, []uint64{acquire(t, follower, a, "f"), acquire(t, leader, a, "l"), acquire(t, leader, b, "l"), acquire(t, follower, b, "f")},
		"each lock one sequence, asked of either replica")

	_, err := s.Remove(s.Leader.Name(), s.Leader.Kill)
	require.NoError(t, err)
	assert.Equal(t, []uint64{3, 3}, []uint64{acquire(t, follower, a, "f"), acquire(t, follower, b, "f")}, "the only member issues every lock")
	_, err = s.Remove(s.Follower.Name(), s.Follower.Kill)
	assert.ErrorIs(t, err, errMemberOut, "the last member is not removed")
	add(t, s, s.Leader, leader)
	assert.Equal(t, []uint64{4, 4}, []uint64{acquire(t, leader, a, "l"), acquire(t, leader, b, "l")}, "the leader caught up from the follower")

	_, err = s.Remove(s.Follower.Name(), s.Follower.Kill)
	require.NoError(t, err)
	assert.Equal(t, []uint64{5, 5}, []uint64{acquire(t, leader, a, "l"), acquire(t, leader, b, "l")})
	add(t, s, s.Follower, follower)
	assert.Equal(t, []uint64{6, 6}, []uint64{acquire(t, follower, a, "f"), acquire(t, follower, b, "f")}, "the follower caught up from the leader")
	_, local := s.Counts()
	assert.Equal(t, 2, local, "the other's locks issued alone: a by the follower, b by the leader")
}

// The bug: a member added back grants the locks it leads from its empty
// folder: 1 again.
func TestRejoinEmptyGrantsAgain(t *testing.T) {
	s, leader, follower := startMembers(t, Bugs{RejoinEmpty: true})
	a, b := ledBy(s)
	acquire(t, leader, a, "l")
	acquire(t, follower, a, "f") // 2
	acquire(t, follower, b, "f")
	acquire(t, leader, b, "l") // 2
	replace(t, s, s.Leader, leader)
	assert.Equal(t, uint64(1), acquire(t, follower, a, "f"), "the re-added leader grants 1 again, below 2")
	assert.Equal(t, uint64(3), acquire(t, leader, b, "l"), "the follower's locks are whole")
	replace(t, s, s.Follower, follower)
	assert.Equal(t, uint64(1), acquire(t, leader, b, "l"), "the re-added follower grants 1 again, below 3")
}

// No cut, kill or pause makes a replica issue a lock the other leads:
// each only refuses.
func TestMemberPairIsSafeUnderCutsRestartsAndPauses(t *testing.T) {
	s, leader, follower := startMembers(t, Bugs{RejoinEmpty: true})
	a, b := ledBy(s)
	acquire(t, leader, a, "l") // 1
	s.Cut(true)
	for _, c := range []*fencing.Client{leader, follower} {
		refusedOn(t, c, a)
		refusedOn(t, c, b)
	}
	s.CutOneWay(true, false)
	refusedOn(t, follower, a)
	refusedOn(t, follower, b)
	assert.Equal(t, uint64(2), acquire(t, leader, a, "l"), "the leader still reaches the follower to record its token")
	s.Cut(false)

	require.NoError(t, s.Leader.Kill())
	refusedOn(t, follower, a)
	refusedOn(t, follower, b)
	require.NoError(t, s.Leader.Restart(false))
	require.NoError(t, leader.Health(bg))
	assert.Equal(t, uint64(3), acquire(t, follower, a, "f"))
	require.NoError(t, s.Follower.Restart(false))
	require.NoError(t, follower.Health(bg))
	assert.Equal(t, uint64(4), acquire(t, leader, a, "l"))
	s.Leader.Pause()
	refusedOn(t, follower, a)
	s.Leader.Resume()
	assert.Equal(t, uint64(5), acquire(t, follower, a, "f"))
	_, local := s.Counts()
	assert.Zero(t, local)
}

// The target offers its replicas to member-replace only under rejoin-empty,
// with the resource on a node of its own.
func TestOnlyRejoinEmptyReplacesMembers(t *testing.T) {
	tg, err := NewTarget(TargetOptions{Bugs: []string{string(RejoinEmpty)}})
	require.NoError(t, err)
	assert.Equal(t, []string{"issuer-1", "issuer-2"}, tg.ReplaceableMembers())
	var res []string
	for _, n := range tg.Table() {
		if n.Resource {
			res = append(res, n.Name)
		}
	}
	assert.Equal(t, []string{"resource"}, res)
	for _, bugs := range [][]string{nil, {string(SplitIssuers)}, {string(OneWayFailover)}} {
		tg, err := NewTarget(TargetOptions{Bugs: bugs})
		require.NoError(t, err)
		assert.Empty(t, tg.ReplaceableMembers(), bugs)
	}
}

func readDir(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	require.NoError(t, err)
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}
