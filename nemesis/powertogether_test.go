package nemesis

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/history"
	"github.com/fencecheck/fencecheck/nemesis/lazyfs"
)

// quorum is three members and an adapter, all on the layer, whose members
// start only once all three are starting (as members that wait for a
// quorum do): started one after another, the first never returns.
type quorum struct {
	mu       sync.Mutex
	cut      []string
	starting int
	all      chan struct{}
	failOn   string
}

func newQuorum() *quorum { return &quorum{all: make(chan struct{})} }

func (q *quorum) Nodes() []Node {
	return []Node{{Name: "m1", Role: "etcd"}, {Name: "m2", Role: "etcd"}, {Name: "m3", Role: "etcd"}, {Name: "a1", Role: "adapter", Stateless: true}}
}
func (q *quorum) PowerNodes() []string { return []string{"m1", "m2", "m3", "a1"} }
func (q *quorum) CutPower(_ context.Context, node string) (lazyfs.Loss, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if node == q.failOn {
		return lazyfs.Loss{}, errors.New("unmount: busy")
	}
	q.cut = append(q.cut, node)
	return lazyfs.Loss{Files: 1, Entries: 1}, nil
}
func (q *quorum) KillNode(context.Context, string) error { return errors.New("no plain kill") }
func (q *quorum) StartNode(ctx context.Context, node string, _ bool) error {
	q.mu.Lock()
	q.starting++
	if q.starting == 3 {
		close(q.all)
	}
	q.mu.Unlock()
	select {
	case <-q.all:
		return nil
	case <-time.After(2 * time.Second):
		return errors.New(node + " found no quorum: the others were not started")
	}
}

// Some power losses take every node that keeps state at once (the adapter,
// which keeps none, is left alone), and they are started again side by
// side; the plan replays, and a crash state for one node is refused.
func TestPowerLossTogetherCutsEveryStatefulNodeAndStartsThemSideBySide(t *testing.T) {
	q := newQuorum()
	env := &Env{Target: q}
	rng := rand.New(rand.NewPCG(1, 2))
	together, single := 0, 0
	for range 200 {
		p, err := powerLoss{}.Draw(context.Background(), env, rng)
		require.NoError(t, err)
		require.NoError(t, powerLoss{}.CheckPlan(env, p))
		if len(p.Nodes) > 1 {
			together++
			assert.Equal(t, []string{"m1", "m2", "m3"}, p.Nodes)
		} else {
			single++
		}
	}
	assert.InDelta(t, 200/togetherOdds, together, 25, "one power loss in %d is of every member", togetherOdds)
	assert.Positive(t, single)

	p := Plan{Nodes: []string{"m1", "m2", "m3"}, TakesOver: true, Outage: true, Params: &lazyfs.CrashState{Mode: lazyfs.LoseAll}}
	f, err := powerLoss{}.Start(context.Background(), env, p)
	require.NoError(t, err)
	assert.Equal(t, []string{"m1", "m2", "m3"}, q.cut)
	assert.Equal(t, map[string]any{history.ExtraMode: PowerTogether, "lost_files": 3, "lost_entries": 3}, f.Details)
	require.NoError(t, f.Stop(context.Background()), "the members are started side by side")

	assert.Error(t, powerLoss{}.CheckPlan(env, Plan{Nodes: []string{"m1", "m2"}, Params: &lazyfs.CrashState{Mode: lazyfs.CrashModes()[1], Seed: 1}}))
	assert.Error(t, powerLoss{}.CheckPlan(env, Plan{Nodes: []string{"m1", "m1"}}))
	assert.Error(t, powerLoss{}.CheckPlan(env, Plan{Nodes: []string{"m1", "x9"}}))
}

// A power loss of all that fails on one node starts again the ones it had
// cut, and is counted as failed to apply on every node it named.
func TestPowerLossTogetherThatFailsStartsWhatItCut(t *testing.T) {
	q := newQuorum()
	q.failOn = "m3"
	q.starting = 1 // m3 was never cut: the two cut must start without it
	env := &Env{Target: q}
	_, err := powerLoss{}.Start(context.Background(), env, Plan{Nodes: []string{"m1", "m2", "m3"}})
	var ae *ApplyError
	require.ErrorAs(t, err, &ae)
	assert.Equal(t, PowerTogether, ae.Mode)
	assert.Equal(t, []string{"m1", "m2"}, q.cut)
	assert.NotContains(t, err.Error(), "found no quorum", "the two cut were started again side by side")
}

// A member held by another fault keeps the writes the others would lose:
// no power loss of all then.
func TestPowerLossTogetherWaitsForEveryMemberToBeFree(t *testing.T) {
	q := newQuorum()
	env := &Env{Target: q}
	env.claims = newClaims()
	require.True(t, env.claims.claimAll([]string{"m2"}, 1))
	assert.Empty(t, togetherNodes(env))
	assert.False(t, slices.Contains(togetherNodes(&Env{Target: q}), "a1"))
}
