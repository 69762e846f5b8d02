package analysis

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/checkers/historytest"
	"github.com/fencecheck/fencecheck/history"
)

// The streaming pass over a file and the in-memory one reach the same
// result, fact for fact.
func TestCheckFileMatchesCheck(t *testing.T) {
	h := historytest.Simulate(historytest.SimConfig{Seed: 5, Ops: 3000, Keys: 3, ClientsPerKey: 4, InfoRate: 0.05,
		Acquires: true, ForgetHighWater: true, FaultEvery: 800})
	path := filepath.Join(t.TempDir(), "history.jsonl")
	require.NoError(t, h.WriteFile(path))
	streamed, err := CheckFile(context.Background(), path, Options{})
	require.NoError(t, err)
	inMemory, err := Check(context.Background(), h.Events(), Options{})
	require.NoError(t, err)

	assert.Equal(t, checkers.Invalid, streamed.Verdict, "the resource forgot its high-water marks at a restart")
	assert.Equal(t, inMemory.Verdict, streamed.Verdict)
	assert.Equal(t, inMemory.Reason, streamed.Reason)
	assert.Equal(t, inMemory.Anomalies(), streamed.Anomalies())
	assert.Equal(t, inMemory.Faults, streamed.Faults)
	assert.Equal(t, inMemory.Counts, streamed.Counts)
	assert.Equal(t, inMemory.Latency, streamed.Latency)
	assert.Equal(t, inMemory.FirstViolation, streamed.FirstViolation)
	assert.Equal(t, inMemory.Ops.All(), streamed.Ops.All())
	require.NotNil(t, streamed.FirstViolation.Cause)
	assert.Equal(t, "restart", streamed.FirstViolation.Cause.Nemesis, streamed.FirstViolation.Text)
	assert.True(t, streamed.FirstViolation.Cause.Explains, streamed.FirstViolation.Text)
}

func TestCountsAndLatency(t *testing.T) {
	b := historytest.New().
		Acquire("l1", 0, 10, "1").AcquireFail("l1", 5, 8).AcquireInfo("l1", 20, 30).
		Write("r1", "1", "a", 40, 60).WriteInfo("r1", "1", "b", 70, historytest.Open).
		Read("r1", 80, 84, "a", "1")
	rep, err := Check(context.Background(), b.Events(), Options{MinOps: -1})
	require.NoError(t, err)
	c := rep.Counts
	assert.Equal(t, 6, c.Ops)
	assert.Equal(t, 4, c.Definite)
	assert.Equal(t, 2, c.Keys, "l1 and r1")
	assert.Equal(t, 6, c.Processes)
	assert.Equal(t, 11, c.Events)
	assert.Equal(t, map[string]map[string]int{
		"acquire": {"ok": 1, "fail": 1, "info": 1},
		"write":   {"ok": 1, "info": 1},
		"read":    {"ok": 1},
	}, c.ByOp)
	var got []string
	for _, l := range rep.Latency {
		got = append(got, l.F+"/"+l.Outcome)
		assert.NotEqual(t, "info", l.Outcome, "info operations have no latency")
	}
	assert.Equal(t, []string{"acquire/fail", "acquire/ok", "write/ok", "read/ok"}, got, "the lock's life, then the resource")
	assert.Equal(t, int64(20e6), rep.Latency[2].P50)
	for i := 1; i < rep.Ops.Len(); i++ {
		assert.Less(t, rep.Ops.At(i-1).ID, rep.Ops.At(i).ID, "ops by invoke index")
	}
	assert.Equal(t, "b", rep.Op(rep.Ops.At(4).ID).Value)
	assert.Nil(t, rep.Op(1000))
}

func TestDamagedHistory(t *testing.T) {
	dir := t.TempDir()
	valid := historytest.New().Write("r1", "1", "a", 0, 10).Write("r1", "2", "b", 20, 30).Read("r1", 40, 50, "b", "2")
	var lines []string
	for _, e := range valid.Events() {
		b, err := json.Marshal(e)
		require.NoError(t, err)
		lines = append(lines, string(b)+"\n")
	}
	damaged := strings.Join(lines[:2], "") + "not json at all\n" + strings.Join(lines[2:], "") + `{"index":25,"time":72`
	path := filepath.Join(dir, "history.jsonl")
	require.NoError(t, os.WriteFile(path, []byte(damaged), 0o644))

	_, err := CheckFile(context.Background(), path, Options{})
	var pe *history.ParseError
	require.True(t, errors.As(err, &pe), "%v", err)
	assert.Equal(t, 3, pe.Line)

	rep, err := CheckFile(context.Background(), path, Options{Lenient: true, MinOps: 1})
	require.NoError(t, err)
	assert.Equal(t, checkers.Unknown, rep.Verdict, "a damaged history is never valid")
	assert.Contains(t, rep.Reason, "the history is damaged: 1 lines or events were skipped")
	assert.Contains(t, rep.Reason, "the checkers said valid")
	assert.Equal(t, 3, rep.Counts.Ops)
	require.Len(t, rep.Notes, 2)
	assert.Contains(t, rep.Notes[0], "line 3")
	assert.Contains(t, rep.Notes[1], "cut short")
}
