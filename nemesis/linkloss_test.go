package nemesis

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeLosser records the losses it is asked for.
type fakeLosser struct {
	fakeCluster
	lmu    sync.Mutex
	losses []map[string][]string
	shares []int
}

func (c *fakeLosser) LossNodes() []string { return c.PartitionNodes() }
func (c *fakeLosser) SetLinkLoss(_ context.Context, loss map[string][]string, percent int) error {
	c.lmu.Lock()
	defer c.lmu.Unlock()
	c.losses = append(c.losses, loss)
	c.shares = append(c.shares, percent)
	return nil
}

// Every mode is drawn, with a share of 10 to 50 %, losing packets between
// the groups only, each way; Stop heals (an empty loss).
func TestLinkLossDrawsEveryModeBetweenTheGroups(t *testing.T) {
	c := &fakeLosser{fakeCluster: fakeCluster{nodes: []Node{{Name: "n1"}, {Name: "n2"}, {Name: "n3"}}}}
	env := &Env{Target: c}
	n := linkLoss{}
	ok, why := n.Applicable(env)
	require.True(t, ok, why)
	rng := rand.New(rand.NewPCG(1, 2))
	modes := map[string]bool{}
	for range 30 {
		p, err := n.Draw(context.Background(), env, rng)
		require.NoError(t, err)
		require.NoError(t, n.CheckPlan(env, p))
		lp := p.Params.(*linkLossParams)
		modes[lp.Mode] = true
		assert.GreaterOrEqual(t, lp.Percent, 10)
		assert.LessOrEqual(t, lp.Percent, 50)
		f, err := n.Start(context.Background(), env, p)
		require.NoError(t, err)
		loss := c.losses[len(c.losses)-1]
		assert.Equal(t, lp.Percent, c.shares[len(c.shares)-1])
		switch lp.Mode {
		case "pair":
			a, b := lp.Groups[0][0], lp.Groups[1][0]
			assert.Equal(t, map[string][]string{a: {b}, b: {a}}, loss)
		case "one":
			one := lp.Groups[0][0]
			assert.Len(t, loss[one], 2)
			for _, o := range lp.Groups[1] {
				assert.Equal(t, []string{one}, loss[o], "the others lose only to %s", one)
			}
		case "every":
			for _, nd := range c.nodes {
				assert.Len(t, loss[nd.Name], 2)
			}
		}
		require.NoError(t, f.Stop(context.Background()))
		assert.Nil(t, c.losses[len(c.losses)-1])
		assert.Equal(t, 0, c.shares[len(c.shares)-1])
	}
	assert.Equal(t, map[string]bool{"one": true, "pair": true, "every": true}, modes)
}

// A loss goes through schedule.json as data and replays as the same loss;
// a target that cannot lose packets refuses it, and so does a bad share.
func TestLinkLossReplaysFromTheScheduleFile(t *testing.T) {
	c := &fakeLosser{fakeCluster: fakeCluster{nodes: []Node{{Name: "n1"}, {Name: "n2"}, {Name: "n3"}}}}
	env := &Env{Target: c}
	s, err := ParseSchedule([]byte(`{"schedule_version": 1, "faults": [
		{"nemesis": "link-loss", "nodes": ["n1", "n2"], "params": {"mode": "pair", "groups": [["n1"], ["n2"]], "percent": 30}, "duration_ns": 5}]}`))
	require.NoError(t, err)
	sel := Select([]string{LinkLoss}, env)
	require.NoError(t, s.CheckTarget(env, sel.Active, sel.NotApplicable))
	_, err = linkLoss{}.Start(context.Background(), env, s.Faults[0].Plan())
	require.NoError(t, err)
	assert.Equal(t, []map[string][]string{{"n1": {"n2"}, "n2": {"n1"}}}, c.losses)
	assert.Equal(t, []int{30}, c.shares)
	assert.Equal(t, "link-loss (pair) of n1, n2 at 0.00 s for 0.00 s", s.Faults[0].Describe())

	plain := &Env{Target: &fakeCluster{nodes: c.nodes}}
	sel = Select([]string{LinkLoss}, plain)
	assert.Contains(t, sel.NotApplicable[LinkLoss], "cannot lose packets")
	for params, want := range map[string]string{
		`{"mode": "pair", "groups": [["n1"], ["n2"]], "percent": 0}`:   "percent must be",
		`{"mode": "pair", "groups": [["n1"], ["n9"]], "percent": 20}`:  "n9, which is not a node",
		`{"mode": "pair", "groups": [["n1"]], "percent": 20}`:          "at least two groups",
		`{"mode": "pair", "groups": [["n1"], ["n1"]], "percent": 20}`:  "in two groups",
		`{"mode": "pair", "groups": [["n1"], ["n2"]], "percent": 101}`: "percent must be",
	} {
		s, err := ParseSchedule([]byte(`{"schedule_version": 1, "faults": [{"nemesis": "link-loss", "nodes": ["n1"], "params": ` + params + `, "duration_ns": 5}]}`))
		require.NoError(t, err)
		assert.ErrorContains(t, s.CheckTarget(env, Select([]string{LinkLoss}, env).Active, nil), want, params)
	}
}

// One node whose links can lose packets is not enough.
func TestLinkLossNeedsTwoNodes(t *testing.T) {
	ok, why := linkLoss{}.Applicable(&Env{Target: &fakeLosser{fakeCluster: fakeCluster{nodes: []Node{{Name: "n1"}}}}})
	assert.False(t, ok)
	assert.Contains(t, why, "fewer than two")
}

// The one node and the pair are members (nodes that keep state) where
// there are two or more: two stateless adapters do not talk to each other.
func TestLinkFaultsAimAtMembers(t *testing.T) {
	c := &fakeLosser{fakeCluster: fakeCluster{nodes: []Node{{Name: "e1", Role: "etcd"}, {Name: "e2", Role: "etcd"}, {Name: "e3", Role: "etcd"},
		{Name: "a1", Role: "adapter", Stateless: true}, {Name: "a2", Role: "adapter", Stateless: true}}}}
	env := &Env{Target: c}
	rng := rand.New(rand.NewPCG(7, 8))
	for range 40 {
		p, err := linkLoss{}.Draw(context.Background(), env, rng)
		require.NoError(t, err)
		lp := p.Params.(*linkLossParams)
		switch lp.Mode {
		case "pair":
			assert.NotContains(t, []string{"a1", "a2"}, lp.Groups[0][0])
			assert.NotContains(t, []string{"a1", "a2"}, lp.Groups[1][0])
		case "one":
			assert.NotContains(t, []string{"a1", "a2"}, lp.Groups[0][0])
			assert.Len(t, lp.Groups[1], 4, "its links to every other node, adapters included")
		case "every":
			assert.Len(t, lp.Groups, 5)
		}
	}
}
