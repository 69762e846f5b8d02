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
	rec := history.NewRecorder(&buf)
	acks := history.NewAcks()
	rec.Listen(acks.Observe)
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

	// Nothing unsynced anywhere: the draws are today's (any node, timed by
	// the crashed node's own acknowledgements).
	s.unsynced = map[string]lazyfs.Loss{}
	seen := map[string]bool{}
	for range 20 {
		p, err := powerLoss{}.Draw(ctx, env, rng)
		require.NoError(t, err)
		seen[p.Nodes[0]] = true
		c, err := crashOnAck{}.Draw(ctx, env, rng)
		require.NoError(t, err)
		assert.False(t, c.Params.(*ackCrash).AnyNode)
	}
	assert.True(t, seen["n1"] && seen["store"], "both nodes drawn: %v", seen)
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
	rec := history.NewRecorder(&buf)
	acks := history.NewAcks()
	rec.Listen(acks.Observe)
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

// heldServer answers each request only once the power cut is armed on its
// layer (answers: as a system that answers beside its fsync does) or never
// once it is (as one that answers after its fsync, which the armed cut
// holds).
type heldServer struct {
	*answering
	answers bool
	armed   chan struct{}
	log     []string
}

func (h *heldServer) PowerNodes() []string { return []string{"n1"} }
func (h *heldServer) ArmPowerCut(context.Context, string, time.Duration) error {
	h.log = append(h.log, "arm")
	close(h.armed)
	return nil
}
func (h *heldServer) CutPower(context.Context, string) (lazyfs.Loss, error) {
	h.log = append(h.log, "cut")
	h.die("power")
	return lazyfs.Loss{Files: 1, AtFsync: true}, nil
}

func (h *heldServer) serve(ctx context.Context) {
	for i := 0; ctx.Err() == nil; i++ {
		h.rec.Record(history.Event{Process: i, Type: history.Invoke, F: history.Write, Key: "k", Node: "n1"})
		select {
		case <-h.armed:
			if h.answers {
				h.rec.Record(history.Event{Process: i, Type: history.Ok, F: history.Write, Key: "k", Node: "n1"})
			}
			<-ctx.Done()
			return
		case <-time.After(20 * time.Millisecond):
			h.rec.Record(history.Event{Process: i, Type: history.Ok, F: history.Write, Key: "k", Node: "n1"})
		}
	}
}

// The cut is armed as the request of the awaited acknowledgement is sent,
// not after its answer: a system that answers while its fsync is held
// answers after the arming (the crash is timed by that answer), and one
// that answers only after its fsync is cut armedAckWait after the arming.
func TestCrashOnAckArmsAtTheRequest(t *testing.T) {
	for _, answers := range []bool{true, false} {
		var buf bytes.Buffer
		rec := history.NewRecorder(&buf)
		acks := history.NewAcks()
		rec.Listen(acks.Observe)
		h := &heldServer{answering: &answering{rec: rec}, answers: answers, armed: make(chan struct{})}
		env := &Env{Target: h, Acks: acks}
		ctx, cancel := context.WithCancel(context.Background())
		begun := make(chan struct{})
		go func() {
			close(begun)
			h.serve(ctx)
		}()
		<-begun
		t0 := time.Now()
		f, err := crashOnAck{}.Start(ctx, env, Plan{Nodes: []string{"n1"}, TakesOver: true, Outage: true,
			Params: &ackCrash{Crash: CrashPower, After: history.Write}})
		took := time.Since(t0)
		cancel()
		require.NoError(t, err)
		assert.Equal(t, []string{"arm", "cut"}, h.log)
		assert.Equal(t, true, f.Details["armed"])
		assert.Equal(t, answers, f.Details["timed"], "answers=%v", answers)
		if !answers {
			assert.GreaterOrEqual(t, took, armedAckWait, "no answer while the fsync is held: cut after the wait")
			assert.Less(t, took, ackWait, "not the whole wait for an acknowledgement")
		}
	}
}
