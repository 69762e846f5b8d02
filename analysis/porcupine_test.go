package analysis

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/checkers/historytest"
	"github.com/fencecheck/fencecheck/history"
)

// The Porcupine path through the analysis (checkers/porcupine's own test is
// the property test of its reductions).

func checkEvents(t *testing.T, events []history.Event, sem checkers.Semantics) *Result {
	t.Helper()
	rep, err := Check(context.Background(), events, Options{Semantics: sem, Checker: CheckerPorcupine, Timeout: testBudget, MinOps: -1})
	require.NoError(t, err)
	return rep
}

func TestGeneratedHistoriesAreValid(t *testing.T) {
	for seed := uint64(1); seed <= 12; seed++ {
		cfg := historytest.SimConfig{Ops: 600, Keys: 2, ClientsPerKey: 5, InfoRate: 0.1, Seed: seed, Acquires: true}
		sem := strict
		if seed%2 == 0 {
			cfg.Semantics, sem = reentrant, reentrant
		}
		rep := checkEvents(t, historytest.Simulate(cfg).Events(), sem)
		require.Equal(t, checkers.Valid, rep.Verdict, "seed %d: %s %+v", seed, rep.Reason, checkerAnomalies(rep))
		require.Empty(t, checkerAnomalies(rep))
	}
}

func TestPlantedStaleReadIsFound(t *testing.T) {
	for seed := uint64(1); seed <= 5; seed++ {
		h := historytest.Simulate(historytest.SimConfig{Ops: 600, Keys: 2, ClientsPerKey: 5, InfoRate: 0.05, Seed: seed, Acquires: true})
		require.True(t, h.PlantStaleRead())
		rep := checkEvents(t, h.Events(), strict)
		assert.Equal(t, checkers.Invalid, rep.Verdict, "seed %d", seed)
		assert.Equal(t, checkers.Invalid, porcupineVerdict(rep), "seed %d", seed)
		assert.Contains(t, directKinds(rep), checkers.KindStaleRead, "seed %d", seed)
	}
}

// A Porcupine timeout is Unknown, never valid, and makes the run unknown.
func TestPorcupineTimeoutIsUnknown(t *testing.T) {
	events := historytest.Simulate(historytest.SimConfig{Ops: 20000, Keys: 1, ClientsPerKey: 30, InfoRate: 0.3, Seed: 3, Acquires: true}).Events()
	rep, err := Check(context.Background(), events, Options{Checker: CheckerPorcupine, Timeout: time.Millisecond})
	require.NoError(t, err)
	assert.Equal(t, checkers.Unknown, resultOf(rep, checkers.CheckerPorcupine, checkers.ModelRegister).Verdict)
	assert.Contains(t, resultOf(rep, checkers.CheckerPorcupine, checkers.ModelRegister).Reason, "no answer within 1ms")
	assert.Equal(t, checkers.Unknown, rep.Verdict, rep.Reason)
	assert.Equal(t, ExitUnknown, rep.ExitCode)
	// The issuer is decided by its (complete) direct check even when
	// Porcupine runs out of time on it.
	assert.Equal(t, checkers.Unknown, resultOf(rep, checkers.CheckerPorcupine, checkers.ModelIssuer).Verdict)
	assert.NotContains(t, rep.Reason, checkers.ModelIssuer)
	assert.Nil(t, rep.FirstViolation)
}

// Cancelling the caller's context stops a running search promptly, with
// Unknown (the aborted search must not be read as Illegal).
func TestCancelledSearchIsUnknown(t *testing.T) {
	events := historytest.Simulate(historytest.SimConfig{Ops: 40000, Keys: 1, ClientsPerKey: 40, InfoRate: 0.3, Seed: 4}).Events()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	rep, err := Check(ctx, events, Options{Checker: CheckerPorcupine, Timeout: time.Hour})
	require.NoError(t, err)
	assert.Less(t, time.Since(start), 10*time.Second)
	assert.Equal(t, checkers.Unknown, resultOf(rep, checkers.CheckerPorcupine, checkers.ModelRegister).Verdict)
	assert.Equal(t, checkers.Unknown, rep.Verdict)

	ctx, cancel = context.WithCancel(context.Background())
	cancel()
	rep, err = Check(ctx, events, Options{Checker: CheckerPorcupine})
	require.NoError(t, err)
	assert.Equal(t, checkers.Unknown, rep.Verdict)
}

func TestVisualize(t *testing.T) {
	b := historytest.New().
		Nemesis("restart", "start", 5).Nemesis("restart", "stop", 15).
		Write("r1", "34", "c2-9", 0, 10).Write("r1", "33", "c3-17", 20, 30).Read("r1", 40, 50, "c3-17", "33").
		Acquire("l1", 0, 10, "1")
	rep := checkHistory(t, b, strict)
	require.Equal(t, checkers.Invalid, rep.Verdict)
	require.True(t, rep.CanVisualize())
	var buf bytes.Buffer
	require.NoError(t, rep.Visualize(checkers.ModelRegister, "r1", &buf))
	html := buf.String()
	assert.Contains(t, html, "<html")
	assert.Contains(t, html, "write c3-17, token 33")
	assert.Contains(t, html, checkers.KindStaleWriteAccepted)
	assert.Contains(t, html, "restart")
	buf.Reset()
	require.NoError(t, rep.Visualize(checkers.ModelIssuer, "l1", &buf))
	assert.Contains(t, buf.String(), "acquire l1")
	assert.Error(t, rep.Visualize(checkers.ModelRegister, "nope", &buf))

	// Without Porcupine nothing draws keys.
	rep, err := Check(context.Background(), b.Events(), Options{Checker: CheckerFast, MinOps: -1})
	require.NoError(t, err)
	assert.False(t, rep.CanVisualize())
	assert.Error(t, rep.Visualize(checkers.ModelRegister, "r1", &buf))
}

// checkerAnomalies are the models' anomalies, without the lease findings
// (the simulated clients never release: their leases overlap all the time).
func checkerAnomalies(rep *Result) []checkers.Anomaly {
	var out []checkers.Anomaly
	for _, a := range rep.Anomalies() {
		if a.Model != checkers.ModelLease {
			out = append(out, a)
		}
	}
	return out
}
