package memory

import (
	"os"
	"path/filepath"
	"testing"

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
	_, err = s.Add(n.Name(), n.Kill, func() error { _, err := n.Start(""); return err })
	require.NoError(t, err)
	require.NoError(t, c.Health(bg))
}

// Without the bug: one sequence through every replacement. The leader
// removed, the follower issues from its copy; the leader added back copies
// it first. The follower removed, the leader issues alone; the follower
// added back copies that, which the next failover issues after.
func TestMemberPairLosesNothingWhenAMemberIsReplaced(t *testing.T) {
	s, leader, follower := startMembers(t, nil)
	assert.Equal(t, []uint64{1, 2}, []uint64{acquireRelease(t, leader, "a"), acquireRelease(t, follower, "b")})

	_, err := s.Remove(s.Leader.Name(), s.Leader.Kill)
	require.NoError(t, err)
	assert.Equal(t, uint64(3), acquireRelease(t, follower, "b"), "the only member issues from its copy")
	_, err = s.Remove(s.Follower.Name(), s.Follower.Kill)
	assert.ErrorIs(t, err, errMemberOut, "the last member is not removed")
	_, err = s.Add(s.Leader.Name(), s.Leader.Kill, func() error { _, err := s.Leader.Start(""); return err })
	require.NoError(t, err)
	require.NoError(t, leader.Health(bg))
	assert.Equal(t, uint64(4), acquireRelease(t, leader, "a"), "the leader caught up from the follower")

	_, err = s.Remove(s.Follower.Name(), s.Follower.Kill)
	require.NoError(t, err)
	assert.Equal(t, uint64(5), acquireRelease(t, leader, "a"), "the only member issues alone")
	_, err = s.Add(s.Follower.Name(), s.Follower.Kill, func() error { _, err := s.Follower.Start(""); return err })
	require.NoError(t, err)
	require.NoError(t, follower.Health(bg))
	replace(t, s, s.Leader, leader)
	assert.Equal(t, uint64(6), acquireRelease(t, leader, "a"), "the follower's copy held the leader's token 5")
	_, local := s.Counts()
	assert.Equal(t, 1, local)
}

// The bug: a member added back grants from its empty folder. A re-added
// leader issues 1 again; a re-added follower's copy lacks what the leader
// issued alone, and the next failover issues it again.
func TestRejoinEmptyGrantsAgain(t *testing.T) {
	s, leader, follower := startMembers(t, Bugs{RejoinEmpty: true})
	acquireRelease(t, leader, "a")   // 1
	acquireRelease(t, follower, "b") // 2
	replace(t, s, s.Leader, leader)
	assert.Equal(t, uint64(1), acquireRelease(t, leader, "a"), "the re-added leader grants 1 again, below 2")

	s2, leader2, follower2 := startMembers(t, Bugs{RejoinEmpty: true})
	acquireRelease(t, leader2, "a") // 1
	replace(t, s2, s2.Follower, follower2)
	_, err := s2.Remove(s2.Leader.Name(), s2.Leader.Kill)
	require.NoError(t, err)
	assert.Equal(t, uint64(1), acquireRelease(t, follower2, "b"), "the re-added follower's empty copy issues 1 again")
}

// No cut, kill or pause makes a replica of the pair issue what the other
// did: each only refuses.
func TestMemberPairIsSafeUnderCutsRestartsAndPauses(t *testing.T) {
	s, leader, follower := startMembers(t, Bugs{RejoinEmpty: true})
	acquireRelease(t, leader, "a") // 1
	s.Cut(true)
	refused(t, leader)
	refused(t, follower)
	s.CutOneWay(true, false)
	refused(t, follower)
	assert.Equal(t, uint64(2), acquireRelease(t, leader, "a"), "the leader still reaches the follower")
	s.CutOneWay(false, true)
	refused(t, leader)
	refused(t, follower)
	s.Cut(false)

	require.NoError(t, s.Leader.Kill())
	refused(t, follower)
	require.NoError(t, s.Leader.Restart(false))
	require.NoError(t, leader.Health(bg))
	assert.Equal(t, uint64(3), acquireRelease(t, follower, "b"))
	require.NoError(t, s.Follower.Restart(false))
	require.NoError(t, follower.Health(bg))
	assert.Equal(t, uint64(4), acquireRelease(t, leader, "a"))
	s.Leader.Pause()
	refused(t, follower)
	s.Leader.Resume()
	assert.Equal(t, uint64(5), acquireRelease(t, follower, "b"))
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
