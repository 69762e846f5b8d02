package nemesis

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/history"
)

// stuckBehindACut is a node whose start waits while a partition cuts it
// off (its health check cannot be answered), as a real node's does.
type stuckBehindACut struct{ cutOffNode }

func (c *stuckBehindACut) StartNode(ctx context.Context, n string, _ bool) error {
	for {
		c.mu.Lock()
		cut := c.cut
		if !cut {
			c.down[n] = false
		}
		c.mu.Unlock()
		if !cut {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// endingBehindACut starts a restart of n2, then a partition that cuts it
// off, both for longer than any test.
func endingBehindACut(t *testing.T) (*Scheduler, *stuckBehindACut, *bytes.Buffer, int64) {
	target := &stuckBehindACut{cutOffNode{storeAndAdapter: storeAndAdapter{down: map[string]bool{}}}}
	var buf bytes.Buffer
	s := NewScheduler(&Env{Target: target, TTL: time.Second}, history.NewRecorder(&buf), 1, []Nemesis{restart{}, &partition{}})
	restarted, cut := restartThenCut(t, s)
	require.Greater(t, cut, restarted, "the cut came after the restart")
	return s, target, &buf, restarted
}

// restartThenCut starts, through s, a restart of n2 and then a partition
// of n1 from n2, both for an hour; it returns their ids.
func restartThenCut(t *testing.T, s *Scheduler) (restarted, cut int64) {
	ctx := context.Background()
	forever := func() time.Duration { return time.Hour }
	restarted, _ = s.start(ctx, restart{}, Plan{Nodes: []string{"n2"}, TakesOver: true, Outage: true}, forever, time.Time{})
	cut, _ = s.start(ctx, &partition{}, Plan{Nodes: []string{"n1", "n2"}, Outage: true,
		Params: &partitionParams{Mode: "one", Groups: [][]string{{"n1"}, {"n2"}}}}, forever, time.Time{})
	require.Positive(t, restarted)
	return restarted, cut
}

func withUndoGrace(t *testing.T, d time.Duration) {
	old := undoGrace
	undoGrace = d
	t.Cleanup(func() { undoGrace = old })
}

// An undoing in progress at the main phase's end that waits on another
// fault (a node's start behind a cut that only the heal lifts) is given up
// undoGrace after that end and left live; the heal lifts the cut first and
// then starts the node. Without the bound, the run waited for the undoing
// and the undoing for the heal (122 s past a 30 s main phase).
func TestAnUndoingThatWaitsOnTheHealIsLeftToIt(t *testing.T) {
	withUndoGrace(t, 100*time.Millisecond)
	s, target, buf, restarted := endingBehindACut(t)
	main, cancel := context.WithCancel(context.Background())
	time.AfterFunc(20*time.Millisecond, cancel)
	began := time.Now()
	s.endOrKeep(main, restarted)
	took := time.Since(began)
	assert.GreaterOrEqual(t, took, 120*time.Millisecond, "not cut short at the main phase's end itself")
	assert.Less(t, took, 2*time.Second, "given up once the grace passed")
	assert.Contains(t, s.Active(), restart{}.Name(), "left live for the heal")
	assert.Contains(t, buf.String(), `"action":"stop-failed"`)
	assert.Contains(t, buf.String(), "left to the final heal")
	require.NoError(t, s.Heal(context.Background()))
	assert.False(t, target.cut, "the cut is lifted")
	assert.False(t, target.down["n2"], "and the node started")
	assert.Empty(t, s.Active())
}

// An undoing that ends within the grace is not given up: the main phase's
// end alone cuts no start short (a node killed and never started again
// would be left to a heal that may not come).
func TestAnUndoingThatEndsWithinTheGraceIsNotGivenUp(t *testing.T) {
	withUndoGrace(t, 5*time.Second)
	s, target, buf, restarted := endingBehindACut(t)
	main, cancel := context.WithCancel(context.Background())
	cancel()
	time.AfterFunc(100*time.Millisecond, func() { require.NoError(t, target.HealPartition(context.Background())) })
	s.endOrKeep(main, restarted)
	assert.False(t, target.down["n2"], "started once the cut was lifted")
	assert.NotContains(t, buf.String(), `"action":"stop-failed"`)
	assert.NotContains(t, s.Active(), restart{}.Name())
}
