package gate_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/analysis"
	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/gate"
	"github.com/fencecheck/fencecheck/history"
)

// runMemory carries out a short run against the embedded reference and
// checks it: what `fencecheck test` does, through the same function.
func runMemory(t *testing.T, bugs []string, nemeses string, seed uint64) *gate.Result {
	t.Helper()
	cfg := gate.Config{Target: "memory", Bugs: bugs, Time: 6 * time.Second, Concurrency: 4, Keys: 2, Readers: 1,
		TTL: 500 * time.Millisecond, OpTimeout: 500 * time.Millisecond, Nemesis: nemeses, Seed: seed,
		Store: t.TempDir(), CheckTimeout: 20 * time.Second}
	res, err := gate.Run(context.Background(), cfg)
	require.NoError(t, err)
	return res
}

func TestReferencePassesWithPauseAndRestart(t *testing.T) {
	v := runMemory(t, nil, "pause,restart", 11)
	assert.Equal(t, checkers.Valid, v.Verdict, "anomalies: %v; gate: %v", v.Checked.Anomalies(), v.Reasons)
	assert.Equal(t, 0, v.ExitCode)
	// Both faults really happened and are in the history.
	assert.Positive(t, v.Run.Nemeses["pause"].Started)
	assert.Positive(t, v.Run.Nemeses["restart"].Started)
	events, err := history.ReadFile(v.Run.HistoryPath)
	require.NoError(t, err)
	seen := map[string]bool{}
	for _, e := range events {
		if e.Process == history.NemesisProcess {
			seen[e.F] = true
		}
	}
	assert.True(t, seen["pause"] && seen["restart"], "nemesis events in the history: %v", seen)
	// The run folder holds everything a user reads.
	for _, f := range []string{"history.jsonl", "config.json", "results.json", "report.html", "junit.xml"} {
		assert.FileExists(t, filepath.Join(v.Dir, f))
	}
	var cfg map[string]any
	b, err := os.ReadFile(filepath.Join(v.Dir, "config.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &cfg))
	assert.EqualValues(t, 11, cfg["seed"])
}

func TestCounterInMemoryIsCaughtAfterRestart(t *testing.T) {
	v := runMemory(t, []string{"counter-in-memory"}, "restart", 12)
	require.Equal(t, checkers.Invalid, v.Verdict)
	assert.Equal(t, 1, v.ExitCode)
	kinds := map[string]bool{}
	for _, a := range v.Checked.Anomalies() {
		kinds[a.Kind] = true
	}
	// The issuer handed out a token it had handed out before: named as such.
	assert.True(t, kinds["duplicate-token"] || kinds["token-regression"], "anomaly kinds: %v", kinds)
	require.NotNil(t, v.Checked.FirstViolation)
}

func TestUnknownNemesisIsAnError(t *testing.T) {
	res, err := gate.Run(context.Background(), gate.Config{Time: time.Second, Nemesis: "gremlins", Store: t.TempDir()})
	require.ErrorContains(t, err, `unknown nemesis "gremlins"`)
	assert.True(t, gate.IsUsage(err))
	assert.Equal(t, analysis.ExitUsage, res.ExitCode)
}

// The clock nemesis steps the clients' clock along with the reference's: a
// client then judges its lease by a wrong clock, and the run records what it
// believed. The reference still fences every late write off.
func TestReferencePassesWhenClientsClocksJumpToo(t *testing.T) {
	v := runMemory(t, nil, "clock", clientClockSeed)
	assert.Equal(t, checkers.Valid, v.Verdict, "anomalies: %v; gate: %v", v.Checked.Anomalies(), v.Reasons)
	events, err := history.ReadFile(v.Run.HistoryPath)
	require.NoError(t, err)
	clientSteps, beliefs := 0, 0
	for _, e := range events {
		if e.Process == history.NemesisProcess && e.F == "clock" && strings.Contains(e.Node, "client") {
			clientSteps++
		}
		if e.F == history.Write && e.Type == history.Invoke && e.Extra[history.ExtraLeaseLeft] != nil {
			beliefs++
		}
	}
	assert.Positive(t, clientSteps, "seed %d steps the clients' clock", clientClockSeed)
	assert.Positive(t, beliefs, "writes made while the clients' clock was off record the lease the client believed in")
}

// clientClockSeed is a seed whose clock schedule steps the clients' clock
// within runMemory's 6 s (the schedule depends on the seed only).
const clientClockSeed = 1

// runEvents returns a history's run events, in order, with their extra
// fields decoded.
func runEvents(t *testing.T, path string) ([]history.Event, []map[string]any) {
	t.Helper()
	events, err := history.ReadFile(path)
	require.NoError(t, err)
	var runs []history.Event
	var extras []map[string]any
	for _, e := range events {
		if !e.IsRun() {
			continue
		}
		x := map[string]any{}
		for k, v := range e.Extra {
			var val any
			require.NoError(t, json.Unmarshal(v, &val))
			x[k] = val
		}
		runs = append(runs, e)
		extras = append(extras, x)
	}
	return runs, extras
}

// The history says what the run set out to do and how far it got: start at
// time 0 with the requested, active and inapplicable nemeses, the main and
// final phases, and an end that says the run completed.
func TestHistoryRecordsTheRun(t *testing.T) {
	res, err := gate.Run(context.Background(), gate.Config{Target: "memory", Time: 2 * time.Second,
		Nemesis: "pause,strip", Seed: 5, Store: t.TempDir()})
	require.NoError(t, err)
	runs, x := runEvents(t, res.Run.HistoryPath)
	require.Len(t, runs, 4, "start, main, final, end: %v", x)
	assert.EqualValues(t, 0, runs[0].Index, "the start event is the history's first")
	assert.EqualValues(t, 0, runs[0].Time, "at time 0")
	assert.Equal(t, history.RunStart, x[0][history.RunExtraAction])
	assert.Equal(t, "pause,strip", x[0][history.RunExtraRequested])
	assert.ElementsMatch(t, []any{"pause", "strip"}, x[0][history.RunExtraNemeses])
	assert.Empty(t, x[0][history.RunExtraNotApplicable])
	assert.Equal(t, map[string]any{history.RunExtraAction: history.RunPhase, history.RunExtraPhase: history.PhaseMain}, x[1])
	assert.Equal(t, map[string]any{history.RunExtraAction: history.RunPhase, history.RunExtraPhase: history.PhaseFinal}, x[2])
	assert.Equal(t, map[string]any{history.RunExtraAction: history.RunEnd, history.RunExtraComplete: true, history.RunExtraCutShort: false}, x[3])
	assert.Less(t, runs[1].Time, runs[2].Time)
	assert.True(t, res.Run.Complete)
	assert.False(t, res.Run.CutShort)
	events, err := history.ReadFile(res.Run.HistoryPath)
	require.NoError(t, err)
	assert.Equal(t, runs[3], events[len(events)-1], "the end event is the history's last")
}

// A recovery that times out and final reads that get no answer are problem
// events of the final phase, and the end says the run is not complete.
func TestHistoryRecordsProblemsAndAnIncompleteEnd(t *testing.T) {
	res, err := gate.Run(context.Background(), gate.Config{Target: "memory", Time: time.Second,
		Nemesis: "none", Seed: 5, Store: t.TempDir(), Recovery: time.Nanosecond})
	require.NoError(t, err)
	_, x := runEvents(t, res.Run.HistoryPath)
	var problems []string
	for _, e := range x {
		if e[history.RunExtraAction] == history.RunProblem {
			assert.Equal(t, history.PhaseFinal, e[history.RunExtraPhase])
			problems = append(problems, e[history.RunExtraError].(string))
		}
	}
	require.Len(t, problems, 2, "%v", x)
	assert.Contains(t, problems[0], "recovery: node reference did not answer GET /v1/health with 200 within 1ns")
	ns := res.Run.Namespace
	assert.Contains(t, problems[1], "final reads: no definite answer for key(s) "+ns+".k0, "+ns+".k1, "+ns+".k2")
	assert.Equal(t, false, x[len(x)-1][history.RunExtraComplete])
	assert.Equal(t, problems, res.Run.RunErrors)
	// A system that did not come back does not pass: unknown, with why.
	assert.Equal(t, analysis.ExitUnknown, res.ExitCode, res.Summary())
	assert.Equal(t, checkers.Unknown, res.Verdict)
	assert.Contains(t, res.Summary(), "the run's final phase did not complete (heal, recovery or final reads failed): final: recovery: node reference did not answer")
}

// A run whose caller gives up (a signal) still heals and reads, and its end
// says it was cut short.
func TestHistoryRecordsARunCutShort(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	start := time.Now()
	res, err := gate.Run(ctx, gate.Config{Target: "memory", Time: time.Minute, Nemesis: "none", Seed: 5, Store: t.TempDir()})
	require.NoError(t, err)
	assert.Less(t, time.Since(start), 30*time.Second, "the main phase ended with the context")
	_, x := runEvents(t, res.Run.HistoryPath)
	require.NotEmpty(t, x)
	assert.Equal(t, map[string]any{history.RunExtraAction: history.RunEnd, history.RunExtraComplete: true, history.RunExtraCutShort: true}, x[len(x)-1])
	assert.True(t, res.Run.CutShort)
}

// The seeds' scenario on purpose: under pause, holders stall past the lease
// granted while a second client takes their lock and writes; each woken
// holder's late write is counted from the history and, on the reference,
// rejected as stale. The run records each writer's profile.
func TestPauseMakesLateWritesThatTheReferenceRejects(t *testing.T) {
	cfg := gate.Config{Target: "memory", Time: 5 * time.Second, Concurrency: 4, Keys: 2, Readers: 1,
		TTL: 300 * time.Millisecond, OpTimeout: 500 * time.Millisecond, Nemesis: "pause", Seed: 3,
		Store: t.TempDir(), CheckTimeout: 20 * time.Second}
	res, err := gate.Run(context.Background(), cfg)
	require.NoError(t, err)
	assert.Equal(t, checkers.Valid, res.Verdict, "gate: %v", res.Reasons)
	lw := res.Checked.LateWrites
	assert.GreaterOrEqual(t, lw.Total, 3, "late writes: %+v", lw)
	assert.Zero(t, lw.Accepted, "the reference rejects every late write after a newer one")
	assert.Positive(t, lw.RejectedStale)
	events, err := history.ReadFile(res.Run.HistoryPath)
	require.NoError(t, err)
	assert.JSONEq(t, `["steady","many-locks","skewed","long-holders"]`, string(events[0].Extra[history.RunExtraProfiles]))
	// The target's nodes, which coverage reads to tell what cannot occur:
	// the reference is one node whose clock moves (no issuer replicas).
	assert.JSONEq(t, `[{"name":"reference","role":"reference","clock":true}]`, string(events[0].Extra[history.RunExtraNodes]))
	require.NotNil(t, res.Checked.Coverage)
	for _, cl := range res.Checked.Coverage.Classes {
		if cl.Class == "split-brain" {
			assert.Equal(t, analysis.CoverageNotApplicable, cl.Status)
		}
	}
}
