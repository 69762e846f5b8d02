package nemesis

import (
	"bytes"
	"context"
	"errors"
	"strings"
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
// hold the main phase's end: the nemesis returns then, and the heal lifts
// the cut while the stop goes on, then waits for it. Held, the stop waited
// for a heal that came only after it (ZooKeeper: a member added back under
// 44% loss on every link, 122 s past a 30 s main phase).
func TestAStopInProgressDoesNotHoldTheMainPhasesEnd(t *testing.T) {
	target := &startsOnceUncut{cutOffNode{storeAndAdapter: storeAndAdapter{down: map[string]bool{}}}}
	var buf bytes.Buffer
	s := NewScheduler(&Env{Target: target, TTL: time.Second}, history.NewRecorder(&buf), 1, []Nemesis{restart{}, &partition{}})
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
	assert.True(t, target.down["n2"], "the node is still starting")

	began := time.Now()
	require.NoError(t, s.Heal(bg))
	assert.Less(t, time.Since(began), 2*time.Second, "the cut was lifted first, and the start followed")
	assert.False(t, target.cut, "the cut is lifted")
	assert.False(t, target.down["n2"], "the heal waited for the start")
	assert.Equal(t, 1, strings.Count(buf.String(), `"f":"restart","node":"n2","extra":{"action":"stop"`), buf.String())
}
