package nemesis

import (
	"bytes"
	"context"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/history"
	"github.com/fencecheck/fencecheck/nemesis/lazyfs"
)

// fsyncingNode is a one-node system on a real lazyfs layer that writes a
// counter to its state file and answers each write either before its fsync
// (answersFirst: etcd v3.5.0-3.5.4 with one member, #14370) or after it
// returns. It stops at the first failed fsync, as such a system dies on a
// lost disk.
type fsyncingNode struct {
	*layered
	rec          *history.Recorder
	answersFirst bool

	mu       sync.Mutex
	answered int // the last value answered to a client
	stopped  chan struct{}
}

func (n *fsyncingNode) ArmPowerCut(_ context.Context, _ string, window time.Duration) error {
	return n.m.ArmCut(window)
}

// CutPower ends the node (it stops at its failed fsync, or here) and then
// drops what its layer had not made durable.
func (n *fsyncingNode) CutPower(context.Context, string) (lazyfs.Loss, error) {
	<-n.stopped
	return n.m.PowerLoss()
}

// start makes the state file durable (its content and its name) and
// serves.
func (n *fsyncingNode) start(t *testing.T, ctx context.Context) {
	state := filepath.Join(n.m.Dir(), "state")
	for _, path := range []string{state, n.m.Dir()} {
		if path == state {
			require.NoError(t, os.WriteFile(state, []byte("0"), 0o644))
		}
		f, err := os.Open(path)
		require.NoError(t, err)
		require.NoError(t, f.Sync())
		require.NoError(t, f.Close())
	}
	go n.serve(ctx, state)
}

func (n *fsyncingNode) serve(ctx context.Context, state string) {
	defer close(n.stopped)
	for i := 1; ctx.Err() == nil; i++ {
		f, err := os.OpenFile(state, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			return
		}
		_, err = f.WriteString(strconv.Itoa(i))
		answer := func() {
			n.mu.Lock()
			n.answered = i
			n.mu.Unlock()
			n.rec.Record(history.Event{Process: 0, Type: history.Invoke, F: history.Write, Key: "k", Node: "n1"})
			n.rec.Record(history.Event{Process: 0, Type: history.Ok, F: history.Write, Key: "k", Node: "n1"})
		}
		if err == nil && n.answersFirst {
			answer()
		}
		if err == nil {
			err = f.Sync()
		}
		f.Close()
		if err != nil {
			return
		}
		if !n.answersFirst {
			answer()
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// A power cut on an acknowledgement with slowed fsyncs loses what a system
// that answers before its fsync answered, every time: the slowed fsync is
// still under way when the cut armed after the acknowledgement reaches the
// layer. A system that answers after its fsync returns loses nothing it
// answered. The disk is well again after the cut.
func TestCrashOnAckSlowsTheFsyncItCuts(t *testing.T) {
	for _, answersFirst := range []bool{true, false} {
		for trial := range 3 {
			var buf bytes.Buffer
			rec, acks := ackedRecorder(&buf)
			n := &fsyncingNode{layered: newLayered(t), rec: rec, answersFirst: answersFirst, stopped: make(chan struct{})}
			env := &Env{Target: n, Acks: acks}
			ctx, cancel := context.WithCancel(context.Background())
			n.start(t, ctx)
			p := Plan{Nodes: []string{"n1"}, TakesOver: true, Outage: true,
				Params: &ackCrash{Crash: CrashPower, After: history.Write, SlowFsyncMS: 40}}
			require.NoError(t, crashOnAck{}.CheckPlan(env, p))
			f, err := crashOnAck{}.Start(ctx, env, p)
			cancel()
			require.NoError(t, err)
			assert.Equal(t, int64(40), f.Details["slow_fsync_ms"])
			assert.Equal(t, true, f.Details["at_fsync"], "the cut met an fsync")

			n.mu.Lock()
			answered := n.answered
			n.mu.Unlock()
			got, err := os.ReadFile(filepath.Join(n.m.Backing(), "state"))
			require.NoError(t, err)
			durable, _ := strconv.Atoi(string(got))
			t.Logf("answers first %v, trial %d: answered %d, durable %d", answersFirst, trial, answered, durable)
			if answersFirst {
				assert.Less(t, durable, answered, "what was answered before its fsync is lost")
			} else {
				assert.GreaterOrEqual(t, durable, answered, "nothing answered is lost")
			}
			probe := filepath.Join(n.m.Dir(), "probe")
			require.NoError(t, os.WriteFile(probe, []byte("after"), 0o644))
			took, err := timedSync(t, probe)
			require.NoError(t, err)
			assert.Less(t, took, 20*time.Millisecond, "the disk is fast again after the cut")
		}
	}
}

type issuerAndResource struct{ *answering }

func (*issuerAndResource) Nodes() []Node {
	return []Node{{Name: "iss", Role: "issuer"}, {Name: "res", Role: "resource"}, {Name: "both", Role: "reference"}}
}

// A power cut is timed by an acknowledgement whose loss shows: a grant on
// a node that only issues, a write on one that only keeps the resource, a
// write or a grant elsewhere (a write two times in three), never a
// release.
func TestPowerCutsAreTimedByWhatShowsTheirLoss(t *testing.T) {
	env := &Env{Target: &issuerAndResource{}}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20 {
		assert.Equal(t, history.Acquire, powerTrigger(env, "iss", rng))
		assert.Equal(t, history.Write, powerTrigger(env, "res", rng))
	}
	kinds := map[string]int{}
	for range 300 {
		kinds[powerTrigger(env, "both", rng)]++
	}
	assert.Zero(t, kinds[history.Release])
	assert.InDelta(t, 200, kinds[history.Write], 40, "%v", kinds)
	assert.InDelta(t, 100, kinds[history.Acquire], 40, "%v", kinds)
}

// A kill is timed by what its node answers: no write on a node that only
// issues, nothing but a write on one that only keeps the resource (each
// other trigger waited out the 2 s, untimed).
func TestKillsAreTimedByWhatTheirNodeAnswers(t *testing.T) {
	env := &Env{Target: &issuerAndResource{}}
	rng := rand.New(rand.NewPCG(3, 4))
	kinds := map[string]map[string]int{}
	for range 300 {
		p, err := crashOnAck{}.Draw(context.Background(), env, rng)
		require.NoError(t, err)
		c := p.Params.(*ackCrash)
		require.Equal(t, CrashKill, c.Crash)
		if kinds[p.Nodes[0]] == nil {
			kinds[p.Nodes[0]] = map[string]int{}
		}
		kinds[p.Nodes[0]][c.After]++
	}
	assert.Zero(t, kinds["iss"][history.Write], "%v", kinds)
	assert.Equal(t, []string{history.Write}, slices.Collect(maps.Keys(kinds["res"])), "%v", kinds)
	assert.Len(t, kinds["both"], 3, "%v", kinds)
}

// A node that keeps only the resource is not crashed on a write while every
// node keeping the issuer's state is held: no grant, no write, and the
// crash went untimed after 2 s. The draw waits instead.
func TestNoCrashOnAWriteWhileTheIssuerIsDown(t *testing.T) {
	env := &Env{Target: &issuerAndResource{}, claims: newClaims()}
	rng := rand.New(rand.NewPCG(5, 6))
	require.True(t, env.claims.claimAll([]string{"iss"}, 1))
	drawn := map[string]int{}
	for range 100 {
		p, err := crashOnAck{}.Draw(context.Background(), env, rng)
		require.NoError(t, err, "a node keeping issuer state is free")
		drawn[p.Nodes[0]]++
	}
	assert.Positive(t, drawn["res"], "%v", drawn)
	require.True(t, env.claims.claimAll([]string{"both"}, 2))
	for range 50 {
		_, err := crashOnAck{}.Draw(context.Background(), env, rng)
		assert.ErrorIs(t, err, ErrBusy)
	}
}
