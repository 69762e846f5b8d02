package analysis

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/checkers/historytest"
	"github.com/fencecheck/fencecheck/history"
)

// liveHistory has a situation of most kinds, writes that ended info, and
// idle periods quiet and touched by faults.
func liveHistory() *historytest.Builder {
	nodes := []history.RunNode{{Name: "db", Role: "redis", Clock: true}, {Name: "adapter-1", Role: "adapter", Stateless: true}}
	b := covRun(nodes, allNem, nil, 40000)
	b.OnProcess(1).Acquire("k", 0, 5, "1").Write("k", "1", "a", 10, 15).WriteStale("k", "1", "b", 20, 25, "1")
	b.OnProcess(2).Acquire("k", 1100, 1105, "2").Write("k", "2", "c", 1110, 1115)
	b.OnProcess(1).WriteStale("k", "1", "d", 1200, 1205, "2")
	b.OnProcess(3).WriteFail("k", "", "e", 1300, 1310, "missing-token").Strip("k", "e", "", "remove", 1305)
	b.Fault("restart", "db", 2000, 3000)
	b.OnProcess(4).WriteInfo("k", "1", "f", 3100, 3105)
	b.OnProcess(5).WriteStale("k", "1", "g", 3200, 3205, "2")
	b.OnProcess(2).Acquire("k", 3300, 3305, "3").Write("k", "3", "h", 3310, 3315)
	b.OnProcess(6).WriteStale("k", "2", "i", 9400, 9405, "3") // idle 6 s, quiet
	b.OnProcess(7).Write("j", "1", "a", 10000, 10005).Write("j", "2", "b", 10010, 10015)
	b.FaultWith("pause", "db", 12000, 13000, map[string]any{"mode": "node"})
	b.OnProcess(8).WriteStale("j", "1", "c", 16100, 16105, "2") // idle 6 s over the pause
	b.OnProcess(9).Acquire("L", 0, 5, "1").Release("L", "1", 10, 15)
	b.OnProcess(9).Acquire("L", 6015, 6020, "2").Release("L", "2", 6030, 6035) // free 6 s over the restart
	b.OnProcess(9).Acquire("L", 20000, 20005, "3")                             // free 14 s, over the pause
	b.OnProcess(10).Acquire("M", 20000, 20005, "1").Release("M", "1", 20010, 20015)
	b.OnProcess(10).Acquire("M", 26100, 26105, "2") // free 6 s, quiet
	b.Run(history.RunEnd, 40100, map[string]any{history.RunExtraComplete: true})
	return b
}

// Fed one event at a time, the counter ends with the very coverage Check
// gives the whole history, and reads the counts so far at any point.
func TestCoverageCounterCountsAsTheHistoryIsWritten(t *testing.T) {
	b := liveHistory()
	opts := Options{Semantics: checkers.Semantics{}, Checker: CheckerFast, MinOps: -1}
	want := covCheck(t, b, opts.Semantics)
	c, err := NewCoverageCounter(opts)
	require.NoError(t, err)
	events := b.Events()
	staleAfterIdle := func() int { return situation(t, c.Coverage(), SitKeyIdle(5*time.Second)).Count }
	ended := false
	for _, e := range events {
		ending := e.IsClient() && e.Key == "k" && e.Value == "i" && e.Type != history.Invoke
		if ending {
			assert.Zero(t, staleAfterIdle(), "not yet: the stale write after the quiet idle time is still in flight")
		}
		require.NoError(t, c.Add(e))
		if ending {
			ended = true
			assert.Equal(t, 1, staleAfterIdle(), "counted as soon as its write completed")
		}
	}
	require.True(t, ended)
	assert.Equal(t, want, c.Coverage())
	for _, id := range []string{SitReplay, SitStripped, SitLateWrite, SitResourceRestart, SitKeyIdle(5 * time.Second), SitLockFree(5 * time.Second)} {
		assert.Positive(t, situation(t, want, id).Count, id)
	}
	assert.Equal(t, 1, situation(t, want, SitKeyIdle(5*time.Second)).During)
}
