package harness_test

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

	"github.com/fencecheck/fencecheck/harness"
	"github.com/fencecheck/fencecheck/history"
	"github.com/fencecheck/fencecheck/models"
	"github.com/fencecheck/fencecheck/targets/memory"
)

// runMemory carries out a short run against the embedded reference and
// checks it, as `fencecheck test` does.
func runMemory(t *testing.T, bugs []string, nemeses string, seed uint64) *harness.Verdict {
	t.Helper()
	target, err := memory.NewTarget(memory.TargetOptions{Bugs: bugs})
	require.NoError(t, err)
	cfg := harness.Config{Target: "memory", Time: 6 * time.Second, Concurrency: 4, Keys: 2, Readers: 1,
		TTL: 500 * time.Millisecond, OpTimeout: 500 * time.Millisecond, Nemesis: nemeses, Seed: seed,
		Store: t.TempDir(), CheckTimeout: 20 * time.Second}
	run, err := harness.Execute(context.Background(), cfg, target)
	require.NoError(t, err)
	v, err := harness.Finish(context.Background(), run, target.Semantics())
	require.NoError(t, err)
	return v
}

func TestReferencePassesWithPauseAndRestart(t *testing.T) {
	v := runMemory(t, nil, "pause,restart", 11)
	assert.Equal(t, models.Valid, v.Verdict, "anomalies: %v; gate: %v", v.Report.Anomalies(), v.GateReasons)
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
		assert.FileExists(t, filepath.Join(v.Run.Dir, f))
	}
	var cfg map[string]any
	b, err := os.ReadFile(filepath.Join(v.Run.Dir, "config.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &cfg))
	assert.EqualValues(t, 11, cfg["seed"])
}

func TestCounterInMemoryIsCaughtAfterRestart(t *testing.T) {
	v := runMemory(t, []string{"counter-in-memory"}, "restart", 12)
	require.Equal(t, models.Invalid, v.Verdict)
	assert.Equal(t, 1, v.ExitCode)
	kinds := map[string]bool{}
	for _, a := range v.Report.Anomalies() {
		kinds[a.Kind] = true
	}
	// The issuer handed out a token it had handed out before: named as such.
	assert.True(t, kinds["duplicate-token"] || kinds["token-regression"], "anomaly kinds: %v", kinds)
	assert.GreaterOrEqual(t, v.Report.FirstInvalidAt, int64(0))
}

func TestUnknownNemesisIsAnError(t *testing.T) {
	target, err := memory.NewTarget(memory.TargetOptions{})
	require.NoError(t, err)
	_, err = harness.Execute(context.Background(), harness.Config{Time: time.Second, Nemesis: "gremlins", Store: t.TempDir()}, target)
	require.ErrorContains(t, err, `unknown nemesis "gremlins"`)
}

// The clock nemesis steps the clients' clock along with the reference's: a
// client then judges its lease by a wrong clock, and the run records what it
// believed. The reference still fences every late write off.
func TestReferencePassesWhenClientsClocksJumpToo(t *testing.T) {
	v := runMemory(t, nil, "clock", clientClockSeed)
	assert.Equal(t, models.Valid, v.Verdict, "anomalies: %v; gate: %v", v.Report.Anomalies(), v.GateReasons)
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
