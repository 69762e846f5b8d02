package nemesis

import (
	"bytes"
	"context"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/history"
)

// The guided schedule's aims at issuer replicas cut apart, both ways and
// one way (guideaim.go's remedies, partition.go's cutFromLeader and
// cutOffFollower).

// A partition aimed at splitting issuer replicas must cut one from
// another; one that only cuts the clients from them, or cuts a node that
// keeps no issuer state from both, does not.
func TestAPartitionSeparatesReplicasOnlyWhenItCutsOneFromAnother(t *testing.T) {
	replicas := map[string]bool{"e1": true, "e2": true}
	plan := func(pp partitionParams) Plan { return Plan{Params: &pp} }
	assert.True(t, separates(plan(partitionParams{Groups: [][]string{{"e1"}, {"e2", "a1"}}}), replicas))
	assert.True(t, separates(plan(partitionParams{Groups: [][]string{{"e2"}, {"e1"}}, OneWay: true}), replicas), "one way is enough")
	assert.True(t, separates(plan(partitionParams{Grudge: map[string][]string{"e1": {"a1", "e2"}}}), replicas))
	assert.False(t, separates(plan(partitionParams{Groups: [][]string{{"a1"}, {"e1", "e2"}}}), replicas), "both replicas on one side")
	assert.False(t, separates(plan(partitionParams{Links: []string{"clients->e1"}}), replicas), "the clients' links")
	assert.False(t, separates(Plan{Nodes: []string{"e1"}}, replicas), "not a partition")

	oneWay := plan(partitionParams{Groups: [][]string{{"e2"}, {"e1", "a1"}}, OneWay: true})
	assert.True(t, separatesOneWay(oneWay, replicas), "e2 cannot reach e1, which reaches it")
	assert.False(t, separatesOneWay(plan(partitionParams{Groups: [][]string{{"e1"}, {"e2"}}}), replicas), "both ways")
	assert.True(t, separatesOneWay(plan(partitionParams{Grudge: map[string][]string{"e1": {"e2"}, "e2": {"e3"}, "e3": {"e1"}}}), replicas), "the ring on three is one way")
	assert.False(t, separatesOneWay(plan(partitionParams{Grudge: map[string][]string{"e1": {"e2"}, "e2": {"e1"}}}), replicas), "a grudge each way")
}

// Aimed at a one-way cut of the issuer replicas where the target names its
// leader, the guide cuts one follower from the leader and nothing else: the
// follower cannot reach the leader, which still reaches it (what a failover
// that trusts a failed connect needs). Where the target names none, the
// partition draws its own one-way cuts, in either direction, as before.
func TestAOneWayAimCutsAFollowerFromTheLeader(t *testing.T) {
	ctx := context.Background()
	c := &fakeGrudger{fakeCluster: fakeCluster{leader: "e2", nodes: []Node{
		{Name: "e1", Role: "etcd"}, {Name: "e2", Role: "etcd"}, {Name: "e3", Role: "etcd"},
		{Name: "a1", Role: "adapter", Stateless: true}}}}
	env := &Env{Target: c}
	s := NewScheduler(env, history.NewRecorder(&bytes.Buffer{}), 1, []Nemesis{&partition{}})
	cov := atTarget(map[string]int{"issuer-replicas-one-way": 0})
	aimed := func(seed uint64) (Plan, *Fault, map[string][]string) {
		t.Helper()
		a := aimedFault(t, env, cov, []Nemesis{&partition{}})
		p, err := s.drawAimed(ctx, a, rand.New(rand.NewPCG(seed, seed)))
		require.NoError(t, err)
		f, err := (&partition{}).Start(ctx, env, p)
		require.NoError(t, err)
		require.NoError(t, f.Stop(ctx))
		return p, f, c.grudges[len(c.grudges)-1]
	}
	followers := map[string]bool{}
	for seed := range uint64(30) {
		p, f, g := aimed(seed)
		assert.True(t, p.TakesOver, "no kill, freeze or power loss reconnects the two while the cut lasts")
		assert.Equal(t, followerOneWay, f.Details["mode"])
		assert.Equal(t, "e2", f.Details["leader"])
		var cut []string
		for a, bs := range g {
			for _, b := range bs {
				cut = append(cut, a+"->"+b)
			}
		}
		require.Len(t, cut, 1, "one link cut, one way: %v", g)
		require.True(t, strings.HasSuffix(cut[0], "->e2"), "a follower cannot reach the leader: %v", cut)
		assert.True(t, reaches(g, "e2", strings.TrimSuffix(cut[0], "->e2")), "the leader still reaches it")
		followers[strings.TrimSuffix(cut[0], "->e2")] = true
	}
	assert.Equal(t, map[string]bool{"e1": true, "e3": true}, followers, "either follower")

	// A leader held by another fault is waited for.
	require.True(t, env.claims.claimAll([]string{"e2"}, 99))
	_, err := s.drawAimed(ctx, aimedFault(t, env, cov, []Nemesis{&partition{}}), rand.New(rand.NewPCG(1, 1)))
	assert.ErrorIs(t, err, ErrBusy)
	env.claims.release(99)

	c.leader = ""
	fromLeader, toLeader := false, false
	for seed := range uint64(60) {
		_, f, g := aimed(seed)
		assert.NotEqual(t, followerOneWay, f.Details["mode"])
		assert.NotContains(t, f.Details, "leader")
		oneWay := false
		for _, a := range []string{"e1", "e2", "e3"} {
			for _, b := range []string{"e1", "e2", "e3"} {
				oneWay = oneWay || !reaches(g, a, b) && reaches(g, b, a)
			}
		}
		assert.True(t, oneWay, "the own draw still cuts replicas one way: %v", g)
		for _, n := range []string{"e1", "e3"} {
			fromLeader = fromLeader || !reaches(g, "e2", n) && reaches(g, n, "e2")
			toLeader = toLeader || !reaches(g, n, "e2") && reaches(g, "e2", n)
		}
	}
	assert.True(t, fromLeader && toLeader, "with no leader named, both directions are drawn")
}

// Aimed at issuer replicas cut apart, where the target names its leader
// among three or more, the guide cuts one follower off from the other
// replicas, both ways, and takes them all over: the majority with its
// leader goes on granting during the cut, which the situation needs.
// Where the target names none, the partition draws its own cuts.
func TestASeparatedAimCutsAFollowerOff(t *testing.T) {
	ctx := context.Background()
	c := &fakeCluster{leader: "e2", nodes: []Node{
		{Name: "e1", Role: "etcd"}, {Name: "e2", Role: "etcd"}, {Name: "e3", Role: "etcd"},
		{Name: "a1", Role: "adapter", Stateless: true}}}
	env := &Env{Target: c}
	s := NewScheduler(env, history.NewRecorder(&bytes.Buffer{}), 1, []Nemesis{&partition{}})
	cov := atTarget(map[string]int{"issuer-replicas-separated": 0})
	off := map[string]bool{}
	for seed := range uint64(30) {
		a := aimedFault(t, env, cov, []Nemesis{&partition{}})
		p, err := s.drawAimed(ctx, a, rand.New(rand.NewPCG(seed, seed)))
		require.NoError(t, err)
		pp := p.Params.(*partitionParams)
		require.Equal(t, followerOff, pp.Mode)
		require.Len(t, pp.Groups, 2)
		require.Len(t, pp.Groups[0], 1)
		assert.NotEqual(t, "e2", pp.Groups[0][0], "the leader stays with the majority")
		assert.Contains(t, pp.Groups[1], "e2")
		assert.False(t, pp.OneWay)
		assert.True(t, p.TakesOver)
		assert.Equal(t, []string{"e1", "e2", "e3"}, p.Nodes, "the replicas, not the adapter")
		assert.True(t, separates(p, a.nodes))
		off[pp.Groups[0][0]] = true
	}
	assert.Equal(t, map[string]bool{"e1": true, "e3": true}, off, "either follower")

	require.True(t, env.claims.claimAll([]string{"e3"}, 99))
	_, err := s.drawAimed(ctx, aimedFault(t, env, cov, []Nemesis{&partition{}}), rand.New(rand.NewPCG(1, 1)))
	assert.ErrorIs(t, err, ErrBusy, "a replica held by another fault: the majority may not be whole")
	env.claims.release(99)

	c.leader = ""
	for seed := range uint64(10) {
		p, err := s.drawAimed(ctx, aimedFault(t, env, cov, []Nemesis{&partition{}}), rand.New(rand.NewPCG(seed, 2)))
		require.NoError(t, err)
		assert.NotEqual(t, followerOff, p.Params.(*partitionParams).Mode, "no leader named: the partition's own draw")
	}
}

// With three or more replicas the one-way cut from the leader takes them
// all over (the leader no longer hears the follower: a crash of the third
// leaves it no majority); with two, the two it cuts.
func TestAOneWayAimTakesEveryReplicaOfThree(t *testing.T) {
	ctx := context.Background()
	cov := atTarget(map[string]int{"issuer-replicas-one-way": 0})
	draw := func(nodes []Node) (Plan, error) {
		env := &Env{Target: &fakeGrudger{fakeCluster: fakeCluster{leader: "e2", nodes: nodes}}}
		s := NewScheduler(env, history.NewRecorder(&bytes.Buffer{}), 1, []Nemesis{&partition{}})
		if len(nodes) > 2 {
			require.True(t, env.claims.claimAll([]string{"e3"}, 99))
			_, err := s.drawAimed(ctx, aimedFault(t, env, cov, []Nemesis{&partition{}}), rand.New(rand.NewPCG(1, 1)))
			assert.ErrorIs(t, err, ErrBusy, "the third replica held by another fault")
			env.claims.release(99)
		}
		return s.drawAimed(ctx, aimedFault(t, env, cov, []Nemesis{&partition{}}), rand.New(rand.NewPCG(1, 1)))
	}
	p, err := draw([]Node{{Name: "e1", Role: "etcd"}, {Name: "e2", Role: "etcd"}, {Name: "e3", Role: "etcd"}, {Name: "a1", Role: "adapter", Stateless: true}})
	require.NoError(t, err)
	assert.Equal(t, followerOneWay, p.Params.(*partitionParams).Mode)
	assert.Equal(t, []string{"e1", "e2", "e3"}, p.Nodes)
	assert.True(t, p.TakesOver)
	p, err = draw([]Node{{Name: "e1", Role: "etcd"}, {Name: "e2", Role: "etcd"}})
	require.NoError(t, err)
	assert.Equal(t, []string{"e1", "e2"}, p.Nodes, "a pair: the two it cuts")
}
