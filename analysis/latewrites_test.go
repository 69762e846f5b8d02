package analysis

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/checkers/historytest"
	"github.com/fencecheck/fencecheck/history"
)

// The seeds' scenario: process 1 holds token 1, stalls; process 2 gets
// token 2 and writes; process 1 wakes and writes with token 1.
func scenario(b *historytest.Builder, late func(b *historytest.Builder)) *historytest.Builder {
	b.OnProcess(1).Acquire("k", 0, 5, "1")
	b.OnProcess(2).Acquire("k", 1100, 1105, "2")
	b.OnProcess(2).Write("k", "2", "v2", 1110, 1115)
	late(b.OnProcess(1))
	return b
}

// Late writes are counted from the history, once, with how each ended: a
// rejected one is fencing at work, an accepted one a violation; writes with
// the newest token, and writes with tokens no acquire of the writer
// returned (a forger's), are not late writes.
func TestLateWritesByExpiredHoldersAreCountedFromTheHistory(t *testing.T) {
	check := func(b *historytest.Builder) *Result {
		res, err := Check(context.Background(), b.Events(), Options{Checker: CheckerPorcupine, MinOps: -1})
		require.NoError(t, err)
		return res
	}
	res := check(scenario(historytest.New(), func(b *historytest.Builder) {
		b.WriteStale("k", "1", "v1", 1200, 1205, "2")
	}))
	assert.Equal(t, LateWrites{Total: 1, RejectedStale: 1, AfterNewerWrite: 1, Examples: res.LateWrites.Examples}, res.LateWrites)
	assert.Len(t, res.LateWrites.Examples, 1)
	assert.Equal(t, checkers.Valid, res.Verdict, res.Reason)

	res = check(scenario(historytest.New(), func(b *historytest.Builder) {
		b.Write("k", "1", "v1", 1200, 1205)
	}))
	assert.Equal(t, 1, res.LateWrites.Accepted)
	assert.Equal(t, checkers.Invalid, res.Verdict, "an accepted late write is a violation")

	// The newer holder's write had not reached the resource: accepting the
	// old token was all the resource could do.
	b := historytest.New()
	b.OnProcess(1).Acquire("k", 0, 5, "1")
	b.OnProcess(2).Acquire("k", 1100, 1105, "2")
	b.OnProcess(1).Write("k", "1", "v1", 1200, 1205)
	res = check(b)
	assert.Equal(t, 1, res.LateWrites.AcceptedUnfenced)
	assert.Zero(t, res.LateWrites.Accepted)
	assert.Zero(t, res.LateWrites.AfterNewerWrite, "no newer write had been accepted")
	assert.Equal(t, checkers.Valid, res.Verdict, res.Reason)

	res = check(scenario(historytest.New(), func(b *historytest.Builder) {
		b.WriteInfo("k", "1", "v1", 1200, 1205)
	}))
	assert.Equal(t, 1, res.LateWrites.Indeterminate)

	// The holder wrote before the newer token was granted: not late. A
	// forged token sent by a process that never acquired it: not a holder.
	b = historytest.New()
	b.OnProcess(1).Acquire("k", 0, 5, "1")
	b.OnProcess(1).Write("k", "1", "v1", 10, 15)
	b.OnProcess(2).Acquire("k", 1100, 1105, "2")
	b.OnProcess(3).WriteStale("k", "1", "f1", 1200, 1205, "2")
	res = check(b)
	assert.Zero(t, res.LateWrites.Total)
}

// A run that asked for pause, whose holder pauses never produced a late
// write, is unknown; one that did is valid.
func TestAPauseThatNeverProducedTheScenarioLeavesTheRunUnknown(t *testing.T) {
	run := func(late bool) *Result {
		b := historytest.New().Run(history.RunStart, 0, map[string]any{"requested": "pause", "nemeses": []string{"pause"}})
		b.Fault("pause", "client", 50, 1500)
		scenario(b, func(b *historytest.Builder) {
			if late {
				b.WriteStale("k", "1", "v1", 1200, 1205, "2")
			} else {
				b.Release("k", "1", 1200, 1205)
			}
		})
		b.Run(history.RunEnd, 2000, map[string]any{"complete": true})
		events := b.Events()
		for i := range events { // the fault is a holder pause
			if events[i].F == "pause" {
				events[i].Extra["mode"] = json.RawMessage(`"holder"`)
			}
		}
		res, err := Check(context.Background(), events, Options{Checker: CheckerPorcupine, MinOps: -1})
		require.NoError(t, err)
		return res
	}
	res := run(false)
	assert.Equal(t, checkers.Unknown, res.Verdict)
	assert.Contains(t, res.Reason, "nemesis pause was requested but never produced the scenario")
	res = run(true)
	assert.Equal(t, checkers.Valid, res.Verdict, res.Reason)
}
