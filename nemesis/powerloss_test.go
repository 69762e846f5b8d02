package nemesis

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/nemesis/lazyfs"
)

// disks is a target with two nodes of which some are on the layer.
type disks struct {
	onLayer []string
	why     map[string]string
	cut     []string
	started []string
	fail    error
}

func (d *disks) Nodes() []Node {
	return []Node{{Name: "n1", Role: "reference"}, {Name: "n2", Role: "reference"}}
}
func (d *disks) PowerNodes() []string                { return d.onLayer }
func (d *disks) PowerUnreachable() map[string]string { return d.why }
func (d *disks) CutPower(_ context.Context, node string) (lazyfs.Loss, error) {
	if d.fail != nil {
		return lazyfs.Loss{}, d.fail
	}
	d.cut = append(d.cut, node)
	return lazyfs.Loss{Files: 2, Entries: 1}, nil
}
func (d *disks) KillNode(context.Context, string) error {
	return errors.New("power-loss must not use a plain kill")
}
func (d *disks) StartNode(_ context.Context, node string, wipe bool) error {
	if wipe {
		return errors.New("a power loss keeps what survived")
	}
	d.started = append(d.started, node)
	return nil
}

func TestPowerLossActsOnNodesOnTheLayer(t *testing.T) {
	d := &disks{onLayer: []string{"n2"}}
	env := &Env{Target: d}
	ok, why := powerLoss{}.Applicable(env)
	require.True(t, ok, why)
	f, err := drawStart(context.Background(), powerLoss{}, env, rand.New(rand.NewPCG(1, 2)))
	require.NoError(t, err)
	assert.Equal(t, []string{"n2"}, f.Nodes, "only a node on the layer loses power")
	assert.Equal(t, map[string]any{"lost_files": 2, "lost_entries": 1}, f.Details)
	require.NoError(t, f.Stop(context.Background()))
	assert.Equal(t, []string{"n2"}, d.cut)
	assert.Equal(t, []string{"n2"}, d.started)
	assert.Error(t, powerLoss{}.CheckPlan(env, Plan{Nodes: []string{"n1"}}), "n1's data is not on the layer")

	d.fail = errors.New("unmount: busy")
	_, err = drawStart(context.Background(), powerLoss{}, env, rand.New(rand.NewPCG(1, 2)))
	var ae *ApplyError
	require.ErrorAs(t, err, &ae, "a power loss that failed is counted as failed to apply")
	assert.Equal(t, []string{"n2"}, ae.Nodes)
}

// Where no node is on the layer the nemesis is not applicable, and says
// why per node; named explicitly, that makes the run unknown (the gate).
func TestPowerLossNotApplicableSaysWhy(t *testing.T) {
	d := &disks{why: map[string]string{"n1": "no FUSE: open /dev/fuse: no such file or directory", "n2": "the engine is reached at tcp://x:2375"}}
	ok, why := powerLoss{}.Applicable(&Env{Target: d})
	assert.False(t, ok)
	assert.Equal(t, "no node's data is on the lazyfs layer (n1: no FUSE: open /dev/fuse: no such file or directory; n2: the engine is reached at tcp://x:2375)", why)
	ok, why = powerLoss{}.Applicable(&Env{Target: &fakeClocks{}})
	assert.False(t, ok)
	assert.Contains(t, why, "no node's data on a layer that can lose power")
	sel := Select([]string{"power-loss"}, &Env{Target: d})
	assert.Empty(t, sel.Active)
	assert.Contains(t, sel.NotApplicable, "power-loss")
}

// stragglers is a workload that notes the restarts it is told of.
type stragglers struct {
	holders
	after []string
}

func (s *stragglers) AfterRestart(node string) { s.after = append(s.after, node) }

// A node back from a power loss or a restart is the moment for the
// workload's stragglers (writes with tokens older than the marks the
// resource had accepted): they are told once the node is up, not before,
// and not at all when it did not come back.
func TestTheWorkloadIsToldOfANodeBackFromARestart(t *testing.T) {
	d := &disks{onLayer: []string{"n2"}}
	wl := &stragglers{}
	env := &Env{Target: d, Holders: wl}
	f, err := drawStart(context.Background(), powerLoss{}, env, rand.New(rand.NewPCG(1, 2)))
	require.NoError(t, err)
	assert.Empty(t, wl.after, "not while the node is down")
	require.NoError(t, f.Stop(context.Background()))
	assert.Equal(t, []string{"n2"}, wl.after)

	o := &oneNode{}
	env = &Env{Target: o, Holders: wl}
	f, err = drawStart(context.Background(), restart{}, env, rand.New(rand.NewPCG(1, 2)))
	require.NoError(t, err)
	require.NoError(t, f.Stop(context.Background()))
	assert.Len(t, wl.after, 2, "a restart tells it too")

	d.fail = nil
	f, err = drawStart(context.Background(), powerLoss{}, &Env{Target: &noStart{d}, Holders: wl}, rand.New(rand.NewPCG(1, 2)))
	require.NoError(t, err)
	assert.Error(t, f.Stop(context.Background()))
	assert.Len(t, wl.after, 2, "a node that did not come back has no stragglers")
}

// noStart is disks whose nodes do not start again.
type noStart struct{ *disks }

func (noStart) StartNode(context.Context, string, bool) error { return errors.New("did not start") }

// partialDisks is disks whose layer can leave part of the unsynced writes.
type partialDisks struct {
	*disks
	states []lazyfs.CrashState
}

func (p *partialDisks) CrashStateNodes() []string { return p.onLayer }
func (p *partialDisks) CutPowerAs(ctx context.Context, node string, cs lazyfs.CrashState) (lazyfs.Loss, error) {
	p.states = append(p.states, cs)
	loss, err := p.CutPower(ctx, node)
	loss.Kept = 3
	return loss, err
}

// The crash state is drawn into the plan, given to the layer as drawn, and
// recorded with the fault; a replay of the plan gives the same state.
func TestPowerLossCrashStatesAreDrawnAndRecorded(t *testing.T) {
	d := &partialDisks{disks: &disks{onLayer: []string{"n2"}}}
	env := &Env{Target: d}
	rng := rand.New(rand.NewPCG(3, 4))
	modes := map[string]int{}
	for range 40 {
		p, err := powerLoss{}.Draw(context.Background(), env, rng)
		require.NoError(t, err)
		require.NoError(t, powerLoss{}.CheckPlan(env, p))
		cs := p.Params.(*lazyfs.CrashState)
		modes[cs.Mode]++
		f, err := powerLoss{}.Start(context.Background(), env, p)
		require.NoError(t, err)
		if cs.Mode == lazyfs.LoseAll {
			assert.NotContains(t, f.Details, "mode")
			continue
		}
		assert.Equal(t, *cs, d.states[len(d.states)-1], "the layer got the plan's state")
		assert.Equal(t, cs.Mode, f.Details["mode"])
		assert.Equal(t, cs.Seed, f.Details["crash_seed"])
		assert.Equal(t, 3, f.Details["kept_pages"])
	}
	t.Logf("%v", modes)
	assert.Len(t, modes, len(lazyfs.CrashModes()), "every mode is drawn")
	assert.Greater(t, modes[lazyfs.LoseAll], 10, "lose-all half the time")

	plain := &Env{Target: &disks{onLayer: []string{"n2"}}}
	torn := Plan{Nodes: []string{"n2"}, Params: &lazyfs.CrashState{Mode: lazyfs.TornOp, Seed: 1}}
	assert.ErrorContains(t, powerLoss{}.CheckPlan(plain, torn), "cannot leave part", "a layer without crash states refuses the replay")
	assert.Error(t, powerLoss{}.CheckPlan(env, Plan{Nodes: []string{"n2"}, Params: &lazyfs.CrashState{Mode: "melt"}}))
	p, err := powerLoss{}.Draw(context.Background(), plain, rng)
	require.NoError(t, err)
	assert.Equal(t, lazyfs.LoseAll, p.Params.(*lazyfs.CrashState).Mode, "only lose-all where the layer has no other")
}
