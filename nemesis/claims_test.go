package nemesis

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/fencecheck/fencecheck/history"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// oneNode is a single-process target whose node, like a real process,
// cannot be paused while it is killed.
type oneNode struct {
	mu     sync.Mutex
	down   bool
	frozen bool
}

func (o *oneNode) Nodes() []Node { return []Node{{Name: "n1", Role: "reference"}} }
func (o *oneNode) PauseNode(context.Context, string) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.down {
		return errors.New("the program is not running")
	}
	o.frozen = true
	return nil
}
func (o *oneNode) ResumeNode(context.Context, string) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.frozen = false
	return nil
}
func (o *oneNode) KillNode(context.Context, string) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.frozen {
		return errors.New("killing a frozen node hides the pause")
	}
	o.down = true
	return nil
}
func (o *oneNode) StartNode(context.Context, string, bool) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.down = false
	return nil
}

type holders struct {
	paused        []time.Duration
	n             []int
	granted, late time.Duration
}

func (h *holders) PauseHolders(n int, d, _ time.Duration) (<-chan struct{}, func()) {
	h.paused = append(h.paused, d)
	h.n = append(h.n, n)
	done := make(chan struct{})
	close(done)
	return done, func() {}
}
func (h *holders) MaxPaused() int                        { return 3 }
func (h *holders) Lease() (time.Duration, time.Duration) { return h.granted, h.late }

// A holder pause outlasts the lease the system granted (not the one asked
// for) and the lateness of takeovers seen so far, and stalls most locks'
// holders at once.
func TestAHolderPauseIsSizedFromTheGrantedLease(t *testing.T) {
	wl := &holders{granted: 2 * time.Second, late: 400 * time.Millisecond}
	env := &Env{Target: &oneNode{}, Holders: wl, TTL: time.Second}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 20; i++ {
		d, n := holderStall(env, rng)
		assert.GreaterOrEqual(t, d, 2*time.Second+400*time.Millisecond+500*time.Millisecond)
		assert.LessOrEqual(t, d, 2*time.Second+400*time.Millisecond+1500*time.Millisecond)
		assert.Contains(t, []int{2, 3}, n)
	}
	wl.granted = 0 // nothing granted yet: the lease asked for
	d, _ := holderStall(env, rng)
	assert.GreaterOrEqual(t, d, time.Second+400*time.Millisecond+500*time.Millisecond)
}

// A pause that comes while the only node is being restarted waits for it
// instead of failing, so a short run keeps every fault it asked for.
func TestANodeHeldByOneFaultIsNotTakenByAnother(t *testing.T) {
	target := &oneNode{}
	env := &Env{Target: target, TTL: time.Second}
	s := NewScheduler(env, history.NewRecorder(&bytes.Buffer{}), 1, []Nemesis{restart{}, &pause{}})
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))

	restartID := s.attempt(ctx, restart{}, rng)
	require.Positive(t, restartID)
	assert.EqualValues(t, busy, s.attempt(ctx, &pause{}, rng), "the node is down: pause must wait")
	assert.Zero(t, s.Counts["pause"].Failed, "waiting for a node is not a failure")
	assert.Equal(t, 1, s.Counts["pause"].Waited, "but it is counted")
	assert.Equal(t, map[string]int{"pause": 1}, s.Waited())

	s.stop(ctx, restartID)
	pauseID := s.attempt(ctx, &pause{}, rng)
	require.Positive(t, pauseID, "the node is back: pause takes it")
	assert.True(t, target.frozen)
	assert.EqualValues(t, busy, s.attempt(ctx, restart{}, rng), "a frozen node is not killed under the pause")
	s.stop(ctx, pauseID)
	assert.Positive(t, s.attempt(ctx, restart{}, rng))
	assert.Zero(t, s.Counts["restart"].Failed+s.Counts["pause"].Failed)
}

// When every node is held and the workload can freeze a client, pause
// freezes a lock holder instead of waiting.
func TestPauseFallsBackToAHolderWhenEveryNodeIsHeld(t *testing.T) {
	wl := &holders{}
	env := &Env{Target: &oneNode{}, Holders: wl, TTL: time.Second}
	s := NewScheduler(env, history.NewRecorder(&bytes.Buffer{}), 1, []Nemesis{restart{}, &pause{}})
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	require.Positive(t, s.attempt(ctx, restart{}, rng))
	for i := 0; i < 10; i++ { // either mode may be drawn; none may fail
		id := s.attempt(ctx, &pause{}, rng)
		require.Positive(t, id)
		s.stop(ctx, id)
	}
	assert.Len(t, wl.paused, 10)
}

// store is a data node behind two stateless adapters.
type storeAndAdapters struct{ killed map[string]int }

func (s *storeAndAdapters) Nodes() []Node {
	return []Node{{Name: "adapter-1", Role: "adapter", Stateless: true}, {Name: "store", Role: "redis"},
		{Name: "adapter-2", Role: "adapter", Stateless: true}}
}
func (s *storeAndAdapters) KillNode(_ context.Context, n string) error { s.killed[n]++; return nil }
func (s *storeAndAdapters) StartNode(context.Context, string, bool) error {
	return nil
}

// Restart mostly hits the node that holds state: killing a stateless adapter
// loses nothing a durability bug could lose.
func TestRestartPrefersNodesThatHoldState(t *testing.T) {
	target := &storeAndAdapters{killed: map[string]int{}}
	s := NewScheduler(&Env{Target: target}, history.NewRecorder(&bytes.Buffer{}), 1, []Nemesis{restart{}})
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(3, 4))
	for range 200 {
		id := s.attempt(ctx, restart{}, rng)
		require.Positive(t, id)
		s.stop(ctx, id)
	}
	// Expected share: 3/4 + 1/4 * 1/3 = 5/6 of 200.
	assert.Greater(t, target.killed["store"], 140, "%v", target.killed)
	assert.Positive(t, target.killed["adapter-1"]+target.killed["adapter-2"], "adapters are restarted sometimes too")
}

// startFails is a node whose start fails its first `fails` times.
type startFails struct {
	oneNode
	fails int
}

func (s *startFails) StartNode(ctx context.Context, n string, wipe bool) error {
	if s.fails > 0 {
		s.fails--
		return errors.New("the node did not answer")
	}
	return s.oneNode.StartNode(ctx, n, wipe)
}

// A restart whose node does not start when due stays live, its node held
// (no pause takes a dead node), and the final heal starts it; one that
// never starts is the heal's error.
func TestAFaultThatCannotBeUndoneIsRetriedAtHealThenReported(t *testing.T) {
	for _, tc := range []struct {
		fails   int
		healErr string
	}{{1, ""}, {5, "restart of n1 could not be undone: the node did not answer"}} {
		target := &startFails{fails: tc.fails}
		var buf bytes.Buffer
		env := &Env{Target: target, TTL: time.Second}
		s := NewScheduler(env, history.NewRecorder(&buf), 1, []Nemesis{restart{}, &pause{}})
		ctx := context.Background()
		rng := rand.New(rand.NewPCG(1, 2))
		id := s.attempt(ctx, restart{}, rng)
		require.Positive(t, id)
		s.endOrKeep(ctx, id)
		assert.True(t, target.down)
		assert.EqualValues(t, busy, s.attempt(ctx, &pause{}, rng), "the node is still held by the restart")
		err := s.Heal(ctx)
		if tc.healErr == "" {
			require.NoError(t, err)
			assert.False(t, target.down, "the heal started it")
		} else {
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.healErr)
		}
		assert.Contains(t, buf.String(), `"action":"stop-failed"`)
	}
}

// slowPause is a node whose pause is still being applied when the main
// phase ends.
type slowPause struct{ oneNode }

func (s *slowPause) PauseNode(ctx context.Context, node string) error {
	select {
	case <-time.After(100 * time.Millisecond):
	case <-ctx.Done():
		return ctx.Err()
	}
	return s.oneNode.PauseNode(ctx, node)
}

// A fault still being applied when the main phase ends is not cut short:
// it is applied, recorded and counted as started (the history and the count
// are read side by side), and the heal undoes it. Cut short, a kill already
// sent left its node down with nothing to start it again.
func TestAFaultStartedAtTheEndOfTheMainPhaseIsHealed(t *testing.T) {
	var buf bytes.Buffer
	target := &slowPause{}
	s := NewScheduler(&Env{Target: target, TTL: time.Second}, history.NewRecorder(&buf), 1, []Nemesis{&pause{}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	require.Positive(t, s.attempt(ctx, &pause{}, rand.New(rand.NewPCG(1, 2))))
	assert.Zero(t, s.Counts["pause"].Failed)
	assert.Equal(t, 1, s.Counts["pause"].Started)
	assert.NotContains(t, buf.String(), `"action":"error"`)
	assert.True(t, target.frozen)
	require.NoError(t, s.Heal(context.Background()))
	assert.False(t, target.frozen, "the heal undid it")
}

// A quiet holder pause waits for the outage that is live (a restart) to end,
// and holds new outages back while its takers need the lock service; the
// other nemeses wait (counted), they do not fail.
func TestAQuietHolderPauseHoldsOutagesBack(t *testing.T) {
	wl := &holders{}
	env := &Env{Target: &oneNode{}, Holders: wl, TTL: 200 * time.Millisecond}
	s := NewScheduler(env, history.NewRecorder(&bytes.Buffer{}), 1, []Nemesis{restart{}, &pause{}})
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	restartID := s.attempt(ctx, restart{}, rng)
	require.Positive(t, restartID)

	quiet := Plan{Nodes: []string{holderNode}, Params: &pauseParams{Mode: "holder", StallMS: 300, Quiet: true}}
	started := make(chan int64)
	go func() {
		id, _ := s.start(ctx, &pause{}, quiet, func() time.Duration { return time.Second }, time.Time{})
		started <- id
	}()
	select {
	case <-started:
		t.Fatal("the quiet pause started while the restart was live")
	case <-time.After(150 * time.Millisecond):
	}
	assert.Empty(t, wl.paused, "no holder stalls before the system is whole")
	s.stop(ctx, restartID)
	pauseID := <-started
	require.Positive(t, pauseID)
	assert.Len(t, wl.paused, 1)
	s.mu.Lock()
	f := s.active[pauseID].fault
	s.mu.Unlock()
	assert.Equal(t, true, f.Details["quiet"])
	assert.GreaterOrEqual(t, f.Details["quiet_wait_ms"], int64(100))
	assert.NotContains(t, f.Details, "outages_live", "the restart had ended")
	assert.EqualValues(t, 200, f.Details["settle_ms"], "it waited for an outage: one lease more before the stall")

	assert.EqualValues(t, busy, s.attempt(ctx, restart{}, rng), "no outage while the takers need the lock service")
	assert.Equal(t, 1, s.Counts["restart"].Waited)
	assert.Zero(t, s.Counts["restart"].Failed)
	// The hush ends by itself after the stall and half a lease, before the
	// pause's own end.
	time.Sleep(300*time.Millisecond + 100*time.Millisecond + 50*time.Millisecond)
	id := s.attempt(ctx, restart{}, rng)
	require.Positive(t, id, "the takers had their time: outages go on")
	s.stop(ctx, id)
	s.stop(ctx, pauseID)
}

// A quiet pause waits a bounded time for live outages, then goes on and
// says how many were still live.
func TestAHushWaitsBoundedForLiveOutages(t *testing.T) {
	c := newClaims()
	require.True(t, c.startOutage(1, time.Time{}))
	live, yielded, unhush := c.hush(context.Background(), 50*time.Millisecond)
	assert.Equal(t, 1, live)
	assert.False(t, yielded)
	assert.False(t, c.startOutage(2, time.Time{}), "hushed: no new outage")
	unhush()
	unhush() // once or more
	assert.True(t, c.startOutage(2, time.Time{}))
	c.release(1)
	c.release(2)
	live, _, unhush = c.hush(context.Background(), time.Hour)
	assert.Zero(t, live, "no outage live: no wait")
	unhush()
}

// Quiet pauses back to back do not starve an outage: once one has been held
// back longer than the patience, the next hush yields (holds nothing back)
// until an outage started.
func TestAnOutageHeldBackTooLongGetsTheNextTurn(t *testing.T) {
	c := newClaims()
	c.patience = 40 * time.Millisecond
	_, _, unhush := c.hush(context.Background(), time.Second)
	first := time.Now()
	assert.False(t, c.startOutage(1, time.Time{}), "hushed")
	assert.False(t, c.startOutage(2, first), "hushed, not yet past the patience")
	time.Sleep(50 * time.Millisecond)
	assert.False(t, c.startOutage(3, first), "the live hush still holds it back")
	unhush()

	_, yielded, unhush2 := c.hush(context.Background(), time.Second)
	assert.True(t, yielded, "the next quiet pause yields to the starved outage")
	assert.True(t, c.startOutage(4, first), "and the outage starts")
	unhush2()
	c.release(4)

	_, yielded, unhush3 := c.hush(context.Background(), time.Second)
	assert.False(t, yielded, "once an outage started, pauses are quiet again")
	assert.False(t, c.startOutage(5, time.Time{}))
	unhush3()
}

// A node freed goes to the nemesis that waited longest for it, not to
// whichever retry tick comes first; a waiter that stopped trying, or waits
// for another node, holds no one back.
func TestAFreedNodeGoesToTheLongestWaiter(t *testing.T) {
	c := newClaims()
	t0 := time.Now()
	require.True(t, c.claimAll([]string{"n1"}, 1))
	c.wait("power-loss", t0, []string{"n1"})
	c.release(1)
	later := t0.Add(time.Millisecond)
	assert.True(t, c.yields("restart", later, []string{"n1"}), "power-loss waited longer for n1")
	assert.False(t, c.yields("restart", later, []string{"n2"}), "nobody waits for n2")
	assert.False(t, c.yields("power-loss", t0, []string{"n1"}), "a nemesis never yields to itself")
	c.served("power-loss")
	assert.False(t, c.yields("restart", later, []string{"n1"}), "served: it waits no more")

	c.wait("power-loss", t0, []string{"n1"})
	c.waiters["power-loss"].last = time.Now().Add(-2 * waiterFresh)
	assert.False(t, c.yields("restart", later, []string{"n1"}), "a waiter that stopped trying is not waited for")
	c.wait("pause", t0, nil)
	assert.NotContains(t, c.waiters, "pause", "waiting for no node queues nothing")
}

// Through the scheduler: with the one node held, a nemesis that started
// waiting earlier gets it when it is freed, though the newer one tries first.
func TestTheSchedulerHandsAFreedNodeToTheLongestWaiter(t *testing.T) {
	env := &Env{Target: &oneNode{}}
	s := NewScheduler(env, history.NewRecorder(&bytes.Buffer{}), 1, []Nemesis{restart{}, &pause{}})
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	holder := s.attempt(ctx, restart{}, rng)
	require.Positive(t, holder)
	first := time.Now()
	id, _ := s.drawAndStart(ctx, &pause{}, rng, DefaultTiming, first)
	require.EqualValues(t, busy, id, "the node is held")
	s.stop(ctx, holder)
	id, _ = s.drawAndStart(ctx, restart{}, rng, DefaultTiming, time.Time{})
	assert.EqualValues(t, busy, id, "restart tried first, but the node pause waited longer")
	id, _ = s.drawAndStart(ctx, &pause{}, rng, DefaultTiming, first)
	require.Positive(t, id, "the node pause gets the node")
	s.stop(ctx, id)
}

// storeAndAdapter is an adapter (n1) that starts only once the store it
// needs (n2) runs, as a Redis adapter answers its health check only with its
// Redis up.
type storeAndAdapter struct {
	mu   sync.Mutex
	down map[string]bool
}

func (s *storeAndAdapter) Nodes() []Node {
	return []Node{{Name: "n1", Role: "adapter", Stateless: true}, {Name: "n2", Role: "store"}}
}
func (s *storeAndAdapter) KillNode(_ context.Context, n string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down[n] = true
	return nil
}
func (s *storeAndAdapter) StartNode(_ context.Context, n string, _ bool) error {
	for deadline := time.Now().Add(time.Second); n == "n1"; time.Sleep(10 * time.Millisecond) {
		s.mu.Lock()
		storeUp := !s.down["n2"]
		s.mu.Unlock()
		if storeUp {
			break
		}
		if time.Now().After(deadline) {
			return errors.New("the adapter's store does not answer")
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down[n] = false
	return nil
}

// The heal undoes the faults that took nodes over together: the adapter
// restarted first waits for its store, which the next fault stopped.
func TestHealStartsNodesThatNeedEachOtherTogether(t *testing.T) {
	target := &storeAndAdapter{down: map[string]bool{}}
	s := NewScheduler(&Env{Target: target, TTL: time.Second}, history.NewRecorder(&bytes.Buffer{}), 1, []Nemesis{restart{}, powerLossLike{}})
	ctx := context.Background()
	forever := func() time.Duration { return time.Hour }
	adapter, _ := s.start(ctx, restart{}, Plan{Nodes: []string{"n1"}, TakesOver: true, Outage: true}, forever, time.Time{})
	store, _ := s.start(ctx, powerLossLike{}, Plan{Nodes: []string{"n2"}, TakesOver: true, Outage: true}, forever, time.Time{})
	require.Positive(t, adapter)
	require.Greater(t, store, adapter, "the adapter's fault comes first in order")
	require.NoError(t, s.Heal(ctx))
	assert.False(t, target.down["n1"], "the adapter runs")
	assert.False(t, target.down["n2"], "its store runs")
}

// powerLossLike stops a node as a second nemesis would (restart's fault
// under another name).
type powerLossLike struct{ restart }

func (powerLossLike) Name() string { return "power-loss-like" }

// cutOffNode is a node that a partition can cut from the others: started
// again while cut off, it never answers.
type cutOffNode struct {
	storeAndAdapter
	cut bool
}

func (c *cutOffNode) PartitionNodes() []string { return []string{"n1", "n2"} }
func (c *cutOffNode) Partition(context.Context, [][]string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cut = true
	return nil
}
func (c *cutOffNode) HealPartition(context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cut = false
	return nil
}
func (c *cutOffNode) StartNode(_ context.Context, n string, _ bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cut {
		return errors.New("restarted behind a cut, the node does not answer its health check")
	}
	c.down[n] = false
	return nil
}

// The final heal lifts the partitions before it starts the nodes a fault
// stopped: a restarted node behind a cut never answers (a spec's node
// waited 60 s for a cut healed after it, and a valid run ended unknown).
func TestHealLiftsPartitionsBeforeItStartsNodes(t *testing.T) {
	target := &cutOffNode{storeAndAdapter: storeAndAdapter{down: map[string]bool{}}}
	s := NewScheduler(&Env{Target: target, TTL: time.Second}, history.NewRecorder(&bytes.Buffer{}), 1, []Nemesis{restart{}, &partition{}})
	restarted, cut := restartThenCut(t, s)
	require.Greater(t, cut, restarted, "the cut came after the restart")
	require.NoError(t, s.Heal(context.Background()))
	assert.False(t, target.cut, "the cut is lifted")
	assert.False(t, target.down["n2"], "the node runs again")
}

// A node freeze outlasts the lease the system granted and the lateness of
// takeovers (a write held in it is then overtaken by the next holder's);
// before any grant, the lease asked for.
func TestAFreezeOutlastsTheGrantedLease(t *testing.T) {
	wl := &holders{granted: 2 * time.Second, late: 400 * time.Millisecond}
	env := &Env{Target: &oneNode{}, Holders: wl, TTL: time.Second}
	tm := (&pause{}).Timing(env)
	assert.Equal(t, 2*time.Second+400*time.Millisecond+500*time.Millisecond, tm.FaultMin)
	assert.Equal(t, 2*time.Second+400*time.Millisecond+1500*time.Millisecond, tm.FaultMax)
	wl.granted, wl.late = 0, 0
	tm = (&pause{}).Timing(env)
	assert.Equal(t, 1500*time.Millisecond, tm.FaultMin)
	assert.Equal(t, 2500*time.Millisecond, tm.FaultMax)
	tm = (&pause{}).Timing(&Env{Target: &oneNode{}, TTL: time.Second})
	assert.Equal(t, 1500*time.Millisecond, tm.FaultMin, "no workload: the lease asked for")
}
