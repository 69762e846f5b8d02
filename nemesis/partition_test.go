package nemesis

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeCluster can name its nodes and leader and cut between them.
type fakeCluster struct {
	nodes  []Node
	leader string
	mu     sync.Mutex
	cuts   [][][]string
	healed int
}

func (c *fakeCluster) Nodes() []Node { return c.nodes }
func (c *fakeCluster) PartitionNodes() []string {
	var out []string
	for _, n := range c.nodes {
		out = append(out, n.Name)
	}
	return out
}
func (c *fakeCluster) Leader(context.Context) (string, error) {
	return c.leader, nil
}
func (c *fakeCluster) Partition(_ context.Context, groups [][]string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cuts = append(c.cuts, groups)
	return nil
}
func (c *fakeCluster) HealPartition(context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.healed++
	return nil
}

func TestPartitionCutsTheTargetsNodesInEveryMode(t *testing.T) {
	c := &fakeCluster{leader: "n2", nodes: []Node{
		{Name: "n1", Role: "etcd"}, {Name: "n2", Role: "etcd"}, {Name: "n3", Role: "etcd"},
		{Name: "issuer-a", Role: "issuer"}, {Name: "issuer-b", Role: "issuer"},
	}}
	env := &Env{Target: c}
	ok, why := (&partition{}).Applicable(env)
	require.True(t, ok, why)
	rng := rand.New(rand.NewPCG(9, 9))
	modes := map[string]int{}
	for range 60 {
		f, err := drawStart(context.Background(), (&partition{}), env, rng)
		require.NoError(t, err)
		mode := f.Details["mode"].(string)
		modes[mode]++
		groups := f.Details["groups"].([][]string)
		require.Len(t, groups, 2)
		assert.Equal(t, groups, c.cuts[len(c.cuts)-1], "the recorded groups are the cut made")
		switch mode {
		case "one":
			assert.Len(t, groups[0], 1)
			assert.Len(t, groups[1], 4)
		case "leader":
			assert.Equal(t, []string{"n2"}, groups[0])
		case "minority":
			assert.Len(t, groups[0], 2)
			assert.Len(t, groups[1], 3)
		case "bridge":
			bridge := f.Details["bridge"].(string)
			assert.Len(t, groups[0], 2)
			assert.Len(t, groups[1], 2)
			for _, g := range groups {
				assert.NotContains(t, g, bridge, "the bridge is in no group: it reaches both halves")
			}
		case "issuers":
			assert.ElementsMatch(t, []string{"issuer-a", "issuer-b"}, append(append([]string{}, groups[0]...), groups[1]...))
			assert.Len(t, groups[0], 1, "one replica on each side")
		default:
			t.Fatalf("unexpected mode %q", mode)
		}
		healed := c.healed
		require.NoError(t, f.Stop(context.Background()))
		assert.Equal(t, healed+1, c.healed)
	}
	for _, m := range []string{"one", "leader", "minority", "bridge", "issuers"} {
		assert.Positive(t, modes[m], "mode %s used: %v", m, modes)
	}
	assert.Greater(t, modes["issuers"], modes["one"], "splitting issuer replicas is favoured")
	require.NoError(t, (&partition{}).Heal(context.Background(), env))
}

func TestPartitionSingleNodeWithoutLinksIsNotApplicable(t *testing.T) {
	c := &fakeCluster{nodes: []Node{{Name: "reference", Role: "reference"}}}
	ok, why := (&partition{}).Applicable(&Env{Target: c})
	assert.False(t, ok)
	assert.Contains(t, why, "fewer than two")
}

func TestPartitionBlackholesClientsSoTheyTimeOut(t *testing.T) {
	f := newLinkFixture(t)
	c := &fakeCluster{nodes: []Node{{Name: "n1", Role: "reference"}}}
	env := &Env{Target: c, Links: f.set}
	ok, why := (&partition{}).Applicable(env)
	require.True(t, ok, why)
	fault, err := drawStart(context.Background(), (&partition{}), env, rand.New(rand.NewPCG(1, 1)))
	require.NoError(t, err)
	assert.Equal(t, "clients-from-node", fault.Details["mode"], "one reference node: every link plan is the same cut")
	assert.Equal(t, [][]string{{"clients"}, {"n1"}}, fault.Details["groups"])
	assert.Equal(t, []string{"clients->n1"}, fault.Details["links"])

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	_, err = putToken(ctx, f.url, "k", "1", "cut")
	cancel()
	require.Error(t, err, "a black-holed client times out")
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	// Node-to-node traffic is not a client link and keeps flowing.
	code, err := putToken(context.Background(), f.set.Links()[1].URL, "k", "1", "n2")
	require.NoError(t, err)
	assert.Equal(t, http.StatusNoContent, code)

	require.NoError(t, fault.Stop(context.Background()))
	code, err = putToken(context.Background(), f.url, "k", "2", "healed")
	require.NoError(t, err)
	assert.Equal(t, http.StatusNoContent, code)
	assert.NotContains(t, f.res.arrived(), "cut", "a black-holed write never arrives")

	_, err = drawStart(context.Background(), (&partition{}), env, rand.New(rand.NewPCG(1, 2)))
	require.NoError(t, err)
	require.NoError(t, (&partition{}).Heal(context.Background(), env))
	code, err = putToken(context.Background(), f.url, "k", "3", "after-heal")
	require.NoError(t, err)
	assert.Equal(t, http.StatusNoContent, code)
}

func TestPartitionSplitsClientsFromResourceOrIssuerNodes(t *testing.T) {
	f := newLinkFixture(t)
	_, err := f.set.Link("clients->issuer-a", ClientGroup, "issuer-a", f.set.Links()[0].Target)
	require.NoError(t, err)
	c := &fakeCluster{nodes: []Node{{Name: "n1", Role: "resource"}, {Name: "issuer-a", Role: "issuer"}}}
	env := &Env{Target: c, Links: f.set}
	plans := linkPlans(env)
	got := map[string][]string{}
	for _, p := range plans {
		got[p.mode+":"+p.links[0]] = p.links
	}
	assert.Contains(t, got, "clients-from-node:clients->issuer-a")
	assert.Contains(t, got, "clients-from-node:clients->n1")
	assert.Contains(t, got, "answers-from-node:clients->issuer-a")
	assert.Contains(t, got, "answers-from-node:clients->n1")
	assert.Len(t, plans, 4, "resource and issuer cuts equal the per-node cuts here: deduplicated")
}

func TestPartitionAlternatesNodeCutsAndBlackholesNodeCutsFirst(t *testing.T) {
	f := newLinkFixture(t)
	c := &fakeCluster{nodes: []Node{{Name: "issuer-1", Role: "issuer"}, {Name: "issuer-2", Role: "issuer"}}}
	env := &Env{Target: c, Links: f.set}
	for seed := uint64(1); seed <= 10; seed++ {
		p := &partition{}
		rng := rand.New(rand.NewPCG(seed, 0))
		for i := range 4 {
			fault, err := drawStart(context.Background(), p, env, rng)
			require.NoError(t, err)
			_, blackhole := fault.Details["links"]
			assert.Equal(t, i%2 == 1, blackhole, "seed %d fault %d: %v", seed, i, fault.Details)
			if i == 0 {
				// With two issuer replicas every node cut splits them: the
				// first fault of every run exposes split brain.
				groups := fault.Details["groups"].([][]string)
				assert.ElementsMatch(t, []string{"issuer-1", "issuer-2"}, []string{groups[0][0], groups[1][0]})
			}
			require.NoError(t, fault.Stop(context.Background()))
		}
	}
}

func TestPartitionDoesNotSplitStatelessAdapters(t *testing.T) {
	c := &fakeCluster{nodes: []Node{{Name: "etcd-1", Role: "etcd"}, {Name: "etcd-2", Role: "etcd"}, {Name: "etcd-3", Role: "etcd"},
		{Name: "adapter-1", Role: "adapter"}, {Name: "adapter-2", Role: "adapter"}}}
	for _, p := range nodePlans(context.Background(), &Env{Target: c}, nil) {
		assert.NotEqual(t, "issuers", p.mode)
	}
}

// brokenCutter is a cluster whose node cuts fail half way (the in-container
// rules could not be set), as behind an engine this machine cannot enter.
type brokenCutter struct{ fakeCluster }

func (c *brokenCutter) Partition(ctx context.Context, groups [][]string) error {
	c.fakeCluster.Partition(ctx, groups)
	return errors.New("nsenter: cannot open /proc/4242/ns/net")
}

// A fault that fails to apply is counted by mode, and its error event says
// which mode and nodes: node cuts that always fail stand out even though
// the client black-holes of the same nemesis applied. A half-made cut is
// taken back.
func TestPartitionFailuresAreCountedByMode(t *testing.T) {
	f := newLinkFixture(t)
	c := &brokenCutter{fakeCluster{nodes: []Node{{Name: "n1", Role: "etcd"}, {Name: "n2", Role: "etcd"}, {Name: "n3", Role: "etcd"}}}}
	p := &partition{}
	env := &Env{Target: c, Links: f.set}
	s := NewScheduler(env, f.rec, 3, []Nemesis{p})
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(3, 3))
	for range 6 {
		if id := s.attempt(ctx, p, rng); id > 0 {
			s.stop(ctx, id)
		}
	}
	cnt := s.Counts["partition"]
	assert.Equal(t, 3, cnt.Started, "the black-holes applied")
	assert.Equal(t, 3, cnt.Failed, "the node cuts did not")
	assert.Contains(t, cnt.Error, "cannot open")
	failedModes, startedModes := 0, 0
	for mode, mc := range cnt.Modes {
		switch mode {
		case "one", "leader", "minority", "bridge":
			assert.Zero(t, mc.Started, mode)
			assert.Contains(t, mc.Error, "cannot open", mode)
			failedModes += mc.Failed
		default:
			assert.True(t, strings.HasPrefix(mode, "clients-from-") || mode == "answers-from-node", mode)
			assert.Zero(t, mc.Failed, mode)
			startedModes += mc.Started
		}
	}
	assert.Equal(t, 3, failedModes)
	assert.Equal(t, 3, startedModes)
	assert.Equal(t, 3, c.healed, "each half-made cut is taken back")

	errorsSeen := 0
	for _, e := range f.hist.events(t) {
		if e.F == "partition" && string(e.Extra["action"]) == `"error"` {
			errorsSeen++
			assert.NotEmpty(t, e.Node, "the error names the nodes")
			assert.Regexp(t, `^"(one|leader|minority|bridge)"$`, string(e.Extra["mode"]), "the error names the mode")
		}
	}
	assert.Equal(t, 3, errorsSeen)
}

// fakeGrudger can also cut one way: it records each grudge.
type fakeGrudger struct {
	fakeCluster
	grudges []map[string][]string
}

func (c *fakeGrudger) Grudge(_ context.Context, g map[string][]string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.grudges = append(c.grudges, g)
	return nil
}

// reaches says whether a can reach b under grudge g.
func reaches(g map[string][]string, a, b string) bool {
	for _, n := range g[a] {
		if n == b {
			return false
		}
	}
	return true
}

// Where the target cuts one way, the one-way shapes are drawn too: one
// node or the leader losing one direction, issuer replicas cut one way, and
// the majorities ring; each is the grudge handed to the target, and the
// recorded groups say which side cannot reach.
func TestPartitionOneWayShapesAndTheMajoritiesRing(t *testing.T) {
	c := &fakeGrudger{fakeCluster: fakeCluster{leader: "n2", nodes: []Node{
		{Name: "n1", Role: "etcd"}, {Name: "n2", Role: "etcd"}, {Name: "n3", Role: "etcd"},
		{Name: "issuer-a", Role: "issuer"}, {Name: "issuer-b", Role: "issuer"},
	}}}
	env := &Env{Target: c}
	rng := rand.New(rand.NewPCG(4, 4))
	modes := map[string]int{}
	directions := map[string]bool{}
	for range 200 {
		f, err := drawStart(context.Background(), &partition{}, env, rng)
		require.NoError(t, err)
		mode := f.Details["mode"].(string)
		modes[mode]++
		switch mode {
		case "one-way", "leader-one-way", "issuers-one-way":
			g := c.grudges[len(c.grudges)-1]
			groups := f.Details["groups"].([][]string)
			assert.Equal(t, true, f.Details["one_way"])
			for _, a := range groups[0] {
				for _, b := range groups[1] {
					assert.False(t, reaches(g, a, b), "%s: %s cannot reach %s", mode, a, b)
					assert.True(t, reaches(g, b, a), "%s: %s still reaches %s", mode, b, a)
				}
			}
			if mode == "leader-one-way" {
				directions[fmt.Sprint(groups[0][0] == "n2")] = true
			}
		case "ring":
			g := f.Details["grudge"].(map[string][]string)
			assert.Equal(t, g, c.grudges[len(c.grudges)-1])
			seen := map[string]bool{}
			for _, n := range c.PartitionNodes() {
				var sees []string
				for _, o := range c.PartitionNodes() {
					if reaches(g, n, o) {
						sees = append(sees, o)
					}
				}
				assert.Len(t, sees, 3, "%s sees a majority of five: %v", n, sees)
				assert.Contains(t, sees, n)
				assert.False(t, seen[strings.Join(sees, ",")], "no two nodes see the same majority: %v", g)
				seen[strings.Join(sees, ",")] = true
			}
		}
		require.NoError(t, f.Stop(context.Background()))
	}
	for _, m := range []string{"one", "one-way", "leader", "leader-one-way", "minority", "bridge", "ring", "issuers", "issuers-one-way"} {
		assert.Positive(t, modes[m], "mode %s used: %v", m, modes)
	}
	assert.Len(t, directions, 2, "the leader both cannot reach and cannot be reached")
}

// Where the target names its leader among the issuer replicas, the
// replicas' one-way cut keeps the side without it from reaching the side
// with it; the leader still loses either direction in leader-one-way.
func TestIssuersOneWayCutsTheFollowersFromTheLeader(t *testing.T) {
	c := &fakeGrudger{fakeCluster: fakeCluster{leader: "issuer-b", nodes: []Node{
		{Name: "issuer-a", Role: "issuer"}, {Name: "issuer-b", Role: "issuer"}, {Name: "issuer-c", Role: "issuer"}}}}
	env := &Env{Target: c}
	rng := rand.New(rand.NewPCG(5, 5))
	seen, leaderWays := 0, map[bool]bool{}
	for range 200 {
		p, err := (&partition{}).Draw(context.Background(), env, rng)
		require.NoError(t, err)
		pp := p.Params.(*partitionParams)
		assert.Equal(t, "issuer-b", pp.Leader, "every node cut records the leader")
		switch pp.Mode {
		case "issuers-one-way":
			seen++
			assert.Contains(t, pp.Groups[1], "issuer-b", "the side that cannot reach is the leader's followers: %v", pp.Groups)
		case "leader-one-way":
			leaderWays[pp.Groups[0][0] == "issuer-b"] = true
		}
	}
	assert.Positive(t, seen)
	assert.Len(t, leaderWays, 2, "the leader still loses either direction")
}

// Jepsen's ring on three nodes: each reaches the one before it, not the one
// after, a one-way cycle; on five, every cut is both ways.
func TestMajoritiesRing(t *testing.T) {
	assert.Equal(t, map[string][]string{"a": {"b"}, "b": {"c"}, "c": {"a"}},
		majoritiesRing([]string{"a", "b", "c"}, []int{0, 1, 2}))
	g := majoritiesRing([]string{"a", "b", "c", "d", "e"}, []int{0, 1, 2, 3, 4})
	assert.Equal(t, []string{"c", "d"}, g["a"])
	for a, bs := range g {
		for _, b := range bs {
			assert.False(t, reaches(g, b, a), "%s and %s are cut both ways", a, b)
		}
	}
}

// A one-way cut and a ring go through schedule.json as data, and replay
// as the same grudge; a target that cannot cut one way refuses them.
func TestPartitionOneWayReplaysFromTheScheduleFile(t *testing.T) {
	c := &fakeGrudger{fakeCluster: fakeCluster{nodes: []Node{{Name: "n1"}, {Name: "n2"}, {Name: "n3"}}}}
	env := &Env{Target: c}
	s, err := ParseSchedule([]byte(`{"schedule_version": 1, "faults": [
		{"nemesis": "partition", "nodes": ["n1", "n2", "n3"], "params": {"mode": "one-way", "groups": [["n1"], ["n2", "n3"]], "one_way": true}, "duration_ns": 5},
		{"nemesis": "partition", "nodes": ["n1", "n2", "n3"], "params": {"mode": "ring", "grudge": {"n1": ["n2"], "n2": ["n3"], "n3": ["n1"]}}, "start_ns": 10, "duration_ns": 5}]}`))
	require.NoError(t, err)
	sel := Select([]string{"partition"}, env)
	require.NoError(t, s.CheckTarget(env, sel.Active, sel.NotApplicable))
	for _, f := range s.Faults {
		_, err := (&partition{}).Start(context.Background(), env, f.Plan())
		require.NoError(t, err)
	}
	assert.Equal(t, []map[string][]string{{"n1": {"n2", "n3"}}, {"n1": {"n2"}, "n2": {"n3"}, "n3": {"n1"}}}, c.grudges)
	b, err := s.Marshal()
	require.NoError(t, err)
	assert.Contains(t, string(b), `"one_way": true`)

	plain := &Env{Target: &fakeCluster{nodes: c.nodes}}
	sel = Select([]string{"partition"}, plain)
	assert.ErrorContains(t, s.CheckTarget(plain, sel.Active, sel.NotApplicable), "cannot cut links between its nodes one way")
	s, err = ParseSchedule([]byte(`{"schedule_version": 1, "faults": [
		{"nemesis": "partition", "nodes": ["n1"], "params": {"mode": "one-way", "groups": [["n1"], ["n2"], ["n3"]], "one_way": true}, "duration_ns": 5}]}`))
	require.NoError(t, err)
	assert.ErrorContains(t, s.CheckTarget(env, Select([]string{"partition"}, env).Active, nil), "needs two groups")

	// A grudge names only nodes the target can cut.
	s, err = ParseSchedule([]byte(`{"schedule_version": 1, "faults": [
		{"nemesis": "partition", "nodes": ["n1"], "params": {"mode": "ring", "grudge": {"n1": ["n9"]}}, "duration_ns": 5}]}`))
	require.NoError(t, err)
	assert.ErrorContains(t, s.CheckTarget(env, Select([]string{"partition"}, env).Active, nil), "n9, which is not a node")
}

// One way on a proxied link, seen from both sides: the node's answers are
// lost, so the client times out, while its write reached the node.
func TestPartitionAnswersFromNodeLetRequestsAct(t *testing.T) {
	f := newLinkFixture(t)
	env := &Env{Target: &fakeCluster{nodes: []Node{{Name: "n1", Role: "reference"}}}, Links: f.set}
	var plan Plan
	for _, p := range linkPlans(env) {
		if p.mode == "answers-from-node" && p.links[0] == "clients->n1" {
			plan = Plan{Nodes: []string{"n1"}, Outage: true, Params: &partitionParams{Mode: p.mode, Links: p.links, OneWay: true}}
		}
	}
	require.NotNil(t, plan.Params)
	require.NoError(t, (&partition{}).CheckPlan(env, plan))
	fault, err := (&partition{}).Start(context.Background(), env, plan)
	require.NoError(t, err)
	assert.Equal(t, [][]string{{"n1"}, {"clients"}}, fault.Details["groups"], "the node cannot reach the clients")
	assert.Equal(t, true, fault.Details["one_way"])

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	_, err = putToken(ctx, f.url, "k", "1", "lands")
	cancel()
	assert.ErrorIs(t, err, context.DeadlineExceeded, "the client hears nothing")
	assert.Contains(t, f.res.arrived(), "lands", "but its write reached the node")

	require.NoError(t, (&partition{}).Heal(context.Background(), env))
	code, err := putToken(context.Background(), f.url, "k", "2", "healed")
	require.NoError(t, err)
	assert.Equal(t, http.StatusNoContent, code)
}
