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

// fakeClocks is a ClockSkewer that remembers every offset it was given.
type fakeClocks struct {
	nodes []string
	mu    sync.Mutex
	set   map[string][]time.Duration
}

func newFakeClocks(nodes ...string) *fakeClocks {
	return &fakeClocks{nodes: nodes, set: map[string][]time.Duration{}}
}

func (f *fakeClocks) ClockNodes() []string { return f.nodes }

// Nodes makes fakeClocks a target too: a cluster of clocks.
func (f *fakeClocks) Nodes() []Node {
	out := make([]Node, len(f.nodes))
	for i, n := range f.nodes {
		out[i] = Node{Name: n, Role: "reference"}
	}
	return out
}

// noNodes is a target with nothing a fault can act on.
type noNodes struct{}

func (noNodes) Nodes() []Node { return nil }

func (f *fakeClocks) SetClockOffset(_ context.Context, node string, off time.Duration) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.set[node] = append(f.set[node], off)
	return nil
}

func (f *fakeClocks) history(node string) []time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Duration(nil), f.set[node]...)
}

func (f *fakeClocks) current(node string) time.Duration {
	h := f.history(node)
	if len(h) == 0 {
		return 0
	}
	return h[len(h)-1]
}

func TestClockApplicable(t *testing.T) {
	ok, why := clock{}.Applicable(&Env{Target: noNodes{}})
	assert.False(t, ok)
	assert.Contains(t, why, "injectable clock")
	ok, why = clock{}.Applicable(&Env{Target: newFakeClocks()})
	assert.False(t, ok)
	assert.Contains(t, why, "none of the target's nodes")
	ok, _ = clock{}.Applicable(&Env{Target: newFakeClocks("n1")})
	assert.True(t, ok)
	ok, why = clock{}.Applicable(&Env{Target: noNodes{}, ClientClock: newFakeClocks("client")})
	assert.False(t, ok, "the clients' clock alone does not test the target")
	assert.Contains(t, why, "injectable clock")
}

func TestClockStepsAndStrobesThenResets(t *testing.T) {
	target := newFakeClocks("n1", "n2")
	wl := newFakeClocks("client")
	env := &Env{Target: target, ClientClock: wl}
	rng := rand.New(rand.NewPCG(7, 7))
	modes := map[string]int{}
	hit := map[string]bool{}
	together := 0
	for range 15 {
		f, err := drawStart(context.Background(), clock{}, env, rng)
		require.NoError(t, err)
		// A node's clock every time, the clients' with it sometimes.
		require.NotEmpty(t, f.Nodes)
		require.LessOrEqual(t, len(f.Nodes), 2)
		assert.Contains(t, []string{"n1", "n2"}, f.Nodes[0])
		if len(f.Nodes) == 2 {
			assert.Equal(t, "client", f.Nodes[1])
			together++
		}
		clocks := map[string]*fakeClocks{f.Nodes[0]: target}
		if len(f.Nodes) == 2 {
			clocks["client"] = wl
		}
		mode := f.Details["mode"].(string)
		modes[mode]++
		for node, skew := range clocks {
			hit[node] = true
			switch mode {
			case "step":
				off := time.Duration(f.Details["offset_ms"].(int64)) * time.Millisecond
				assert.Equal(t, off, skew.current(node))
				assert.GreaterOrEqual(t, off.Abs(), clockMinOffset)
				assert.LessOrEqual(t, off.Abs(), clockMaxOffset)
			case "strobe":
				offs := f.Details["offsets_ms"].([]int64)
				require.Len(t, offs, 2)
				period := time.Duration(f.Details["period_ms"].(int64)) * time.Millisecond
				assert.GreaterOrEqual(t, period, 50*time.Millisecond)
				assert.LessOrEqual(t, period, 200*time.Millisecond)
				before := len(skew.history(node))
				// Poll rather than sleep a fixed time: on a loaded machine the
				// strobe goroutine may run late, but it must keep flipping.
				require.Eventually(t, func() bool { return len(skew.history(node))-before >= 2 },
					5*time.Second, period/2, "the strobe keeps flipping")
				h := skew.history(node)
				for _, o := range h[before:] {
					assert.Contains(t, []time.Duration{time.Duration(offs[0]) * time.Millisecond, time.Duration(offs[1]) * time.Millisecond}, o)
				}
			default:
				t.Fatalf("unknown mode %q", mode)
			}
		}
		require.NoError(t, f.Stop(context.Background()))
		for node, skew := range clocks {
			assert.Zero(t, skew.current(node), "stop resets the clock")
			n := len(skew.history(node))
			time.Sleep(60 * time.Millisecond)
			assert.Len(t, skew.history(node), n, "nothing changes the clock after stop")
		}
	}
	assert.Positive(t, modes["step"])
	assert.Positive(t, modes["strobe"])
	assert.True(t, hit["client"], "a client's clock is skewed too")
	assert.Less(t, together, 15, "not every time")
	assert.True(t, hit["n1"] || hit["n2"])
}

func TestClockHealResetsEveryClock(t *testing.T) {
	target := newFakeClocks("n1", "n2")
	wl := newFakeClocks("client")
	env := &Env{Target: target, ClientClock: wl}
	require.NoError(t, target.SetClockOffset(context.Background(), "n1", time.Minute))
	require.NoError(t, clock{}.Heal(context.Background(), env))
	for _, n := range []string{"n1", "n2"} {
		assert.Zero(t, target.current(n))
		assert.NotEmpty(t, target.history(n))
	}
	assert.Zero(t, wl.current("client"))
	assert.NotEmpty(t, wl.history("client"))
}

// unreachableClocks is a target none of whose clocks can be moved, and that
// says why.
type unreachableClocks struct{ *fakeClocks }

func (unreachableClocks) ClockUnreachable() map[string]string {
	return map[string]string{"n2": "ptrace is not permitted", "n1": `opted out ("clock": "none")`}
}

func TestClockNotApplicableSaysWhyPerNode(t *testing.T) {
	ok, why := clock{}.Applicable(&Env{Target: unreachableClocks{newFakeClocks()}})
	assert.False(t, ok)
	assert.Equal(t, `none of the target's nodes has a clock that can be skewed (n1: opted out ("clock": "none"); n2: ptrace is not permitted)`, why)
	ok, why = clock{}.Applicable(&Env{Target: newFakeClocks()})
	assert.False(t, ok)
	assert.Equal(t, "none of the target's nodes has a clock that can be skewed", why)
}
