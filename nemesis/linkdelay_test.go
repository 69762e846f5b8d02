package nemesis

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeDelayer records the delays it is asked for.
type fakeDelayer struct {
	fakeCluster
	dmu    sync.Mutex
	delays []map[string][]string
	means  []time.Duration
	jits   []time.Duration
}

func (c *fakeDelayer) DelayNodes() []string { return c.PartitionNodes() }
func (c *fakeDelayer) SetLinkDelay(_ context.Context, delay map[string][]string, mean, jitter time.Duration) error {
	c.dmu.Lock()
	defer c.dmu.Unlock()
	c.delays = append(c.delays, delay)
	c.means = append(c.means, mean)
	c.jits = append(c.jits, jitter)
	return nil
}

// Every mode is drawn, a delay of 20 to 250 ms with a jitter of at most
// half of it, on the links between the groups, each way; Stop heals.
func TestLinkDelayDrawsEveryModeBetweenTheGroups(t *testing.T) {
	c := &fakeDelayer{fakeCluster: fakeCluster{nodes: []Node{{Name: "n1"}, {Name: "n2"}, {Name: "n3"}}}}
	env := &Env{Target: c}
	n := linkDelay{}
	ok, why := n.Applicable(env)
	require.True(t, ok, why)
	rng := rand.New(rand.NewPCG(3, 4))
	modes := map[string]bool{}
	for range 30 {
		p, err := n.Draw(context.Background(), env, rng)
		require.NoError(t, err)
		require.NoError(t, n.CheckPlan(env, p))
		dp := p.Params.(*linkDelayParams)
		modes[dp.Mode] = true
		assert.GreaterOrEqual(t, dp.DelayMS, int64(20))
		assert.LessOrEqual(t, dp.DelayMS, int64(250))
		assert.LessOrEqual(t, dp.JitterMS, dp.DelayMS/2)
		f, err := n.Start(context.Background(), env, p)
		require.NoError(t, err)
		assert.Equal(t, linksOf(dp.Groups), c.delays[len(c.delays)-1])
		assert.Equal(t, time.Duration(dp.DelayMS)*time.Millisecond, c.means[len(c.means)-1])
		assert.Equal(t, time.Duration(dp.JitterMS)*time.Millisecond, c.jits[len(c.jits)-1])
		require.NoError(t, f.Stop(context.Background()))
		assert.Nil(t, c.delays[len(c.delays)-1])
		assert.Zero(t, c.means[len(c.means)-1])
	}
	assert.Equal(t, map[string]bool{"one": true, "pair": true, "every": true}, modes)
}

// A delay goes through schedule.json as data and replays as the same
// delay; a target that cannot delay refuses it, and so do bad numbers.
func TestLinkDelayReplaysFromTheScheduleFile(t *testing.T) {
	c := &fakeDelayer{fakeCluster: fakeCluster{nodes: []Node{{Name: "n1"}, {Name: "n2"}, {Name: "n3"}}}}
	env := &Env{Target: c}
	s, err := ParseSchedule([]byte(`{"schedule_version": 1, "faults": [
		{"nemesis": "link-delay", "nodes": ["n1", "n2", "n3"], "params": {"mode": "one", "groups": [["n1"], ["n2", "n3"]], "delay_ms": 120, "jitter_ms": 30}, "duration_ns": 5}]}`))
	require.NoError(t, err)
	sel := Select([]string{LinkDelay}, env)
	require.NoError(t, s.CheckTarget(env, sel.Active, sel.NotApplicable))
	_, err = linkDelay{}.Start(context.Background(), env, s.Faults[0].Plan())
	require.NoError(t, err)
	assert.Equal(t, []map[string][]string{{"n1": {"n2", "n3"}, "n2": {"n1"}, "n3": {"n1"}}}, c.delays)
	assert.Equal(t, []time.Duration{120 * time.Millisecond}, c.means)
	assert.Equal(t, []time.Duration{30 * time.Millisecond}, c.jits)

	plain := &Env{Target: &fakeCluster{nodes: c.nodes}}
	assert.Contains(t, Select([]string{LinkDelay}, plain).NotApplicable[LinkDelay], "cannot delay packets")
	for params, want := range map[string]string{
		`{"mode": "pair", "groups": [["n1"], ["n2"]], "delay_ms": 0}`:                   "delay_ms must be",
		`{"mode": "pair", "groups": [["n1"], ["n2"]], "delay_ms": 50, "jitter_ms": 60}`: "jitter_ms in",
		`{"mode": "pair", "groups": [["n1"], ["n9"]], "delay_ms": 50}`:                  "n9, which is not a node",
		`{"mode": "pair", "groups": [["n1"]], "delay_ms": 50}`:                          "at least two groups",
	} {
		s, err := ParseSchedule([]byte(`{"schedule_version": 1, "faults": [{"nemesis": "link-delay", "nodes": ["n1"], "params": ` + params + `, "duration_ns": 5}]}`))
		require.NoError(t, err)
		assert.ErrorContains(t, s.CheckTarget(env, Select([]string{LinkDelay}, env).Active, nil), want, params)
	}
}

// fakeDuplicator records the duplications it is asked for.
type fakeDuplicator struct {
	fakeCluster
	dups   []map[string][]string
	shares []int
}

func (c *fakeDuplicator) DupNodes() []string { return c.PartitionNodes() }
func (c *fakeDuplicator) SetLinkDup(_ context.Context, dup map[string][]string, percent int) error {
	c.dups = append(c.dups, dup)
	c.shares = append(c.shares, percent)
	return nil
}

// Duplication draws its modes and a share of 10 to 40 %, replays from the
// schedule file, and is not applicable where the target cannot.
func TestLinkDuplicateDrawsAndReplays(t *testing.T) {
	c := &fakeDuplicator{fakeCluster: fakeCluster{nodes: []Node{{Name: "n1"}, {Name: "n2"}, {Name: "n3"}}}}
	env := &Env{Target: c}
	rng := rand.New(rand.NewPCG(5, 6))
	modes := map[string]bool{}
	for range 30 {
		p, err := linkDup{}.Draw(context.Background(), env, rng)
		require.NoError(t, err)
		require.NoError(t, linkDup{}.CheckPlan(env, p))
		lp := p.Params.(*linkLossParams)
		modes[lp.Mode] = true
		assert.GreaterOrEqual(t, lp.Percent, 10)
		assert.LessOrEqual(t, lp.Percent, 40)
		f, err := linkDup{}.Start(context.Background(), env, p)
		require.NoError(t, err)
		assert.Equal(t, linksOf(lp.Groups), c.dups[len(c.dups)-1])
		require.NoError(t, f.Stop(context.Background()))
		assert.Nil(t, c.dups[len(c.dups)-1])
	}
	assert.Len(t, modes, 3)
	s, err := ParseSchedule([]byte(`{"schedule_version": 1, "faults": [
		{"nemesis": "link-duplicate", "nodes": ["n1", "n2"], "params": {"mode": "pair", "groups": [["n1"], ["n2"]], "percent": 20}, "duration_ns": 5}]}`))
	require.NoError(t, err)
	sel := Select([]string{LinkDuplicate}, env)
	require.NoError(t, s.CheckTarget(env, sel.Active, sel.NotApplicable))
	_, err = sel.Active[0].Start(context.Background(), env, s.Faults[0].Plan())
	require.NoError(t, err)
	assert.Equal(t, 20, c.shares[len(c.shares)-1])
	assert.Equal(t, map[string][]string{"n1": {"n2"}, "n2": {"n1"}}, c.dups[len(c.dups)-1])
	assert.Contains(t, Select([]string{LinkDuplicate}, &Env{Target: &fakeCluster{nodes: c.nodes}}).NotApplicable[LinkDuplicate], "cannot send packets twice")
}
