package nemesis

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencecheck/fencecheck/history"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// startsOnceUncut is a node whose start waits until no cut is left (a
// member added back retries until the others list it), up to 5 s.
type startsOnceUncut struct{ cutOffNode }

func (c *startsOnceUncut) StartNode(ctx context.Context, n string, wipe bool) error {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if err := c.cutOffNode.StartNode(ctx, n, wipe); err == nil {
			return nil
		}
	}
	return errors.New("never answered: still cut off")
}

// A stop the main phase began that waits for another fault's end does not
// hold the main phase's end: the nemesis returns then, and the heal, once
// its grace is over, lifts the cut while the stop goes on, then waits for
// it. Held, the stop waited for a heal that came only after it (ZooKeeper:
// a member added back under 44% loss on every link, 122 s past a 30 s main
// phase).
func TestAStopInProgressDoesNotHoldTheMainPhasesEnd(t *testing.T) {
	target := &startsOnceUncut{cutOffNode{storeAndAdapter: storeAndAdapter{down: map[string]bool{}}}}
	var buf bytes.Buffer
	s := NewScheduler(&Env{Target: target, TTL: time.Second}, history.NewRecorder(&buf), 1, []Nemesis{restart{}, &partition{}})
	s.stopGrace = 200 * time.Millisecond
	forever := func() time.Duration { return time.Hour }
	bg := context.Background()
	cut, _ := s.start(bg, &partition{}, Plan{Nodes: []string{"n1", "n2"}, Outage: true,
		Params: &partitionParams{Mode: "one", Groups: [][]string{{"n1"}, {"n2"}}}}, forever, time.Time{})
	restarted, _ := s.start(bg, restart{}, Plan{Nodes: []string{"n2"}, TakesOver: true, Outage: true}, forever, time.Time{})
	require.Positive(t, cut)
	require.Positive(t, restarted)

	main, end := context.WithCancel(bg)
	returned := make(chan struct{})
	go func() { defer close(returned); s.endInTime(main, restarted) }()
	time.Sleep(50 * time.Millisecond)
	end()
	select {
	case <-returned:
	case <-time.After(time.Second):
		t.Fatal("the stop held the main phase's end")
	}
	target.mu.Lock()
	starting := target.down["n2"]
	target.mu.Unlock()
	assert.True(t, starting, "the node is still starting")

	began := time.Now()
	require.NoError(t, s.Heal(bg))
	assert.Less(t, time.Since(began), 2*time.Second, "the cut was lifted after the grace, and the start followed")
	assert.False(t, target.cut, "the cut is lifted")
	assert.False(t, target.down["n2"], "the heal waited for the start")
	assert.Equal(t, 1, strings.Count(buf.String(), `"f":"restart","node":"n2","extra":{"action":"stop"`), buf.String())
}

// startsOneAtATime counts the node starts under way at once: two members
// joining a cluster together can break it (etcd).
type startsOneAtATime struct {
	storeAndAdapter
	now, most atomic.Int32
}

func (c *startsOneAtATime) StartNode(ctx context.Context, n string, wipe bool) error {
	if k := c.now.Add(1); k > c.most.Load() {
		c.most.Store(k)
	}
	defer c.now.Add(-1)
	time.Sleep(300 * time.Millisecond)
	return c.storeAndAdapter.StartNode(ctx, n, wipe)
}

// The heal starts no node beside a start the main phase began: it waits
// for that one first, both when it ends within the grace and when it does
// not (the node's start then outlasts the grace).
func TestTheHealStartsNoNodeBesideAStopInProgress(t *testing.T) {
	for _, grace := range []time.Duration{time.Second, 50 * time.Millisecond} {
		target := &startsOneAtATime{storeAndAdapter: storeAndAdapter{down: map[string]bool{}}}
		s := NewScheduler(&Env{Target: target, TTL: time.Second}, history.NewRecorder(&bytes.Buffer{}), 1, []Nemesis{restart{}, powerLossLike{}})
		s.stopGrace = grace
		forever := func() time.Duration { return time.Hour }
		bg := context.Background()
		first, _ := s.start(bg, restart{}, Plan{Nodes: []string{"n2"}, TakesOver: true, Outage: true}, forever, time.Time{})
		second, _ := s.start(bg, powerLossLike{}, Plan{Nodes: []string{"n1"}, TakesOver: true, Outage: true}, forever, time.Time{})
		require.Positive(t, first)
		require.Positive(t, second)

		main, end := context.WithCancel(bg)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); s.endInTime(main, first) }()
		time.Sleep(20 * time.Millisecond)
		end()
		wg.Wait()
		require.NoError(t, s.Heal(bg))
		assert.EqualValues(t, 1, target.most.Load(), "grace %v: one node started at a time", grace)
		assert.False(t, target.down["n1"], "grace %v", grace)
		assert.False(t, target.down["n2"], "grace %v", grace)
	}
}
