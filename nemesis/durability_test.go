package nemesis

import (
	"bytes"
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/history"
	"github.com/fencecheck/fencecheck/nemesis/lazyfs"
)

// storeBehind is a front node (n1, answering clients, its layer clean)
// with a store behind it (store, never answering clients itself) whose
// layer holds unsynced writes: etcd behind an adapter.
type storeBehind struct {
	*answering
	unsynced map[string]lazyfs.Loss
	powered  []string
}

func (s *storeBehind) Nodes() []Node {
	return []Node{{Name: "n1", Role: "adapter", Stateless: true}, {Name: "store", Role: "etcd"}}
}
func (s *storeBehind) PowerNodes() []string { return []string{"n1", "store"} }
func (s *storeBehind) CutPower(_ context.Context, node string) (lazyfs.Loss, error) {
	s.powered = append(s.powered, node)
	s.rec.Record(history.Event{Process: history.NemesisProcess, Type: history.Info, F: "died", Node: node, Value: "power"})
	return s.unsynced[node], nil
}
func (s *storeBehind) UnsyncedWrites(_ context.Context, node string) (lazyfs.Loss, error) {
	return s.unsynced[node], nil
}

// Power losses go where durability is at stake: to the node whose layer
// holds unsynced writes, and crash-on-ack's right after the next
// acknowledgement of any node (the store never answers a client itself),
// saying what the layer held; with no such node, the draw is as before.
func TestCrashesAimAtUnsyncedWrites(t *testing.T) {
	var buf bytes.Buffer
	rec, acks := ackedRecorder(&buf)
	s := &storeBehind{answering: &answering{rec: rec}, unsynced: map[string]lazyfs.Loss{"store": {Files: 2}}}
	env := &Env{Target: s, Acks: acks}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.serve(ctx)
	rng := rand.New(rand.NewPCG(3, 3))
	for range 10 {
		p, err := powerLoss{}.Draw(ctx, env, rng)
		require.NoError(t, err)
		assert.Equal(t, []string{"store"}, p.Nodes, "the power goes where unsynced writes are")
	}
	aimed := 0
	for range 30 {
		p, err := crashOnAck{}.Draw(ctx, env, rng)
		require.NoError(t, err)
		params := p.Params.(*ackCrash)
		if !params.AnyNode {
			continue // the draw as before, one time in three
		}
		if aimed++; aimed > 3 {
			continue
		}
		assert.Equal(t, []string{"store"}, p.Nodes)
		assert.Equal(t, CrashPower, params.Crash)
		f, err := crashOnAck{}.Start(ctx, env, p)
		require.NoError(t, err)
		assert.Equal(t, true, f.Details["timed"], "an acknowledgement of n1 timed the crash of store")
		assert.Equal(t, 2, f.Details["unsynced_files"], "what the layer held is recorded")
	}
	assert.Equal(t, []string{"store", "store", "store"}, s.powered)
	assert.Greater(t, aimed, 10, "about two draws in three are aimed")
	assert.Less(t, aimed, 30, "the kill mode keeps a share")

	// Nothing unsynced anywhere: the draws are today's (any node), a
	// crash of the front node timed by its own acknowledgements, one of
	// the store behind it by the front's (it answers no client itself:
	// waiting for its own left every such crash untimed).
	s.unsynced = map[string]lazyfs.Loss{}
	seen, crashed := map[string]bool{}, map[string]bool{}
	for range 20 {
		p, err := powerLoss{}.Draw(ctx, env, rng)
		require.NoError(t, err)
		seen[p.Nodes[0]] = true
		c, err := crashOnAck{}.Draw(ctx, env, rng)
		require.NoError(t, err)
		crashed[c.Nodes[0]] = true
		assert.Equal(t, c.Nodes[0] == "store", c.Params.(*ackCrash).AnyNode, "%s", c.Nodes[0])
	}
	assert.True(t, seen["n1"] && seen["store"], "both nodes drawn: %v", seen)
	assert.True(t, crashed["store"], "the store crashed: %v", crashed)
	p := Plan{Nodes: []string{"store"}, Params: &ackCrash{Crash: CrashKill, After: history.Write, AnyNode: true}}
	f, err := crashOnAck{}.Start(ctx, env, p)
	require.NoError(t, err)
	assert.Equal(t, true, f.Details["timed"], "the store's kill timed by n1's acknowledgement")
}

// armingStore is storeBehind whose layer can take the power at the next
// fsync; its log says in what order the cut was armed and sent.
type armingStore struct {
	*storeBehind
	log []string
}

func (s *armingStore) ArmPowerCut(_ context.Context, node string, window time.Duration) error {
	s.log = append(s.log, "arm "+node+" "+window.String())
	return nil
}
func (s *armingStore) CutPower(ctx context.Context, node string) (lazyfs.Loss, error) {
	s.log = append(s.log, "cut "+node)
	loss, err := s.storeBehind.CutPower(ctx, node)
	loss.AtFsync = true
	return loss, err
}

// A power cut on an acknowledgement is armed on the node's layer first, so
// it lands on the node's next fsync; the fault says it was armed and that
// the cut met an fsync. A kill is not armed.
func TestCrashOnAckArmsThePowerCutOnTheLayer(t *testing.T) {
	var buf bytes.Buffer
	rec, acks := ackedRecorder(&buf)
	s := &armingStore{storeBehind: &storeBehind{answering: &answering{rec: rec}, unsynced: map[string]lazyfs.Loss{"store": {Files: 1}}}}
	env := &Env{Target: s, Acks: acks}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.serve(ctx)
	p := Plan{Nodes: []string{"store"}, TakesOver: true, Outage: true, Params: &ackCrash{Crash: CrashPower, After: history.Write, AnyNode: true}}
	f, err := crashOnAck{}.Start(ctx, env, p)
	require.NoError(t, err)
	assert.Equal(t, []string{"arm store " + armWindow.String(), "cut store"}, s.log)
	assert.Equal(t, true, f.Details["armed"])
	assert.Equal(t, true, f.Details["at_fsync"])

	s.log = nil
	p.Params = &ackCrash{Crash: CrashKill, After: history.Write, AnyNode: true}
	f, err = crashOnAck{}.Start(ctx, env, p)
	require.NoError(t, err)
	assert.Empty(t, s.log, "a kill arms nothing and cuts no power")
	assert.Nil(t, f.Details["armed"])
}
