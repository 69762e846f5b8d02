package models

import (
	"context"
	"testing"
	"time"

	"github.com/fencecheck/fencecheck/history"
	"github.com/fencecheck/fencecheck/models/historytest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// withFast plugs a fake fast checker in for one test.
func withFast(t *testing.T, fc FastCheckFunc) {
	saved := fastChecker
	fastChecker = fc
	t.Cleanup(func() { fastChecker = saved })
}

func fakeFast(register, issuer Verdict) FastCheckFunc {
	return func(ctx context.Context, ops []*history.Op, sem Semantics) []Result {
		return []Result{
			{Checker: CheckerFast, Model: ModelRegister, Verdict: register, Reason: "fake"},
			{Checker: CheckerFast, Model: ModelIssuer, Verdict: issuer, Reason: "fake"},
		}
	}
}

func validHistory() *historytest.Builder {
	return historytest.New().Acquire("r1", 0, 5, "1").Write("r1", "1", "a", 10, 20).Read("r1", 30, 40, "a", "1")
}

func run(t *testing.T, b *historytest.Builder, opts Options) *Report {
	t.Helper()
	rep, err := Check(context.Background(), b.Events(), opts)
	require.NoError(t, err)
	return rep
}

func TestVerdictCombination(t *testing.T) {
	t.Run("both agree valid", func(t *testing.T) {
		withFast(t, fakeFast(Valid, Valid))
		rep := run(t, validHistory(), Options{MinOps: -1})
		assert.Equal(t, Valid, rep.Verdict, rep.Reason)
		assert.Equal(t, 0, rep.ExitCode())
		assert.Equal(t, CheckerBoth, rep.Checker)
		assert.Len(t, rep.Results, 6) // direct, porcupine, fast × 2 models
	})
	t.Run("complete checkers disagree: unknown, both answers named", func(t *testing.T) {
		withFast(t, fakeFast(Invalid, Valid))
		rep := run(t, validHistory(), Options{MinOps: -1})
		assert.Equal(t, Unknown, rep.Verdict)
		assert.Contains(t, rep.Reason, "porcupine says valid, fast says invalid")
		assert.Equal(t, 2, rep.ExitCode())
	})
	t.Run("direct proof of a violation wins", func(t *testing.T) {
		withFast(t, fakeFast(Valid, Valid))
		b := historytest.New().Write("r1", "5", "a", 0, 10).Write("r1", "4", "b", 20, 30)
		rep := run(t, b, Options{MinOps: -1})
		assert.Equal(t, Invalid, rep.Verdict)
		assert.Contains(t, rep.Reason, KindStaleWriteAccepted)
		assert.Contains(t, rep.Reason, "disagree")
		assert.Equal(t, 1, rep.ExitCode())
	})
	t.Run("porcupine times out, fast decides", func(t *testing.T) {
		withFast(t, fakeFast(Valid, Valid))
		events := historytest.Generate(historytest.GenConfig{Ops: 20000, Keys: 1, ClientsPerKey: 30, InfoRate: 0.3, Seed: 3})
		rep, err := Check(context.Background(), events, Options{Timeout: time.Millisecond})
		require.NoError(t, err)
		assert.Equal(t, Unknown, resultOf(rep, CheckerPorcupine, ModelRegister).Verdict)
		assert.Equal(t, Valid, rep.Verdict, rep.Reason)
	})
	t.Run("fast only", func(t *testing.T) {
		withFast(t, fakeFast(Invalid, Valid))
		rep := run(t, validHistory(), Options{Checker: CheckerFast, MinOps: -1})
		assert.Equal(t, Invalid, rep.Verdict)
		assert.Equal(t, "fenced-register: fast says invalid", rep.Reason)
		assert.Empty(t, rep.Keys, "porcupine did not run")
	})
	t.Run("fast unknown, porcupine valid", func(t *testing.T) {
		withFast(t, fakeFast(Unknown, Unknown))
		rep := run(t, validHistory(), Options{MinOps: -1})
		assert.Equal(t, Valid, rep.Verdict, rep.Reason)
	})
}

func TestCheckerSelection(t *testing.T) {
	withFast(t, nil)
	_, err := Check(context.Background(), validHistory().Events(), Options{Checker: CheckerFast})
	assert.ErrorContains(t, err, "not built")
	_, err = Check(context.Background(), validHistory().Events(), Options{Checker: "quick"})
	assert.ErrorContains(t, err, "fast, porcupine or both")
	rep := run(t, validHistory(), Options{MinOps: -1})
	assert.Equal(t, Valid, rep.Verdict, "both without a fast checker runs porcupine")
	assert.Len(t, rep.Results, 4)
}

func TestTooFewOperationsIsUnknown(t *testing.T) {
	rep := run(t, validHistory(), Options{Checker: CheckerPorcupine})
	assert.Equal(t, Unknown, rep.Verdict)
	assert.Contains(t, rep.Reason, "too few operations")
	assert.Equal(t, 3, rep.Definite)

	// A violation is a violation, however short the history.
	b := historytest.New().Write("r1", "", "a", 0, 10)
	rep = run(t, b, Options{Checker: CheckerPorcupine})
	assert.Equal(t, Invalid, rep.Verdict)
}

func TestSemanticsAreValidated(t *testing.T) {
	_, err := Check(context.Background(), validHistory().Events(), Options{Semantics: Semantics{Equal: "sometimes"}})
	assert.ErrorContains(t, err, "equal must be")
	_, err = Check(context.Background(), validHistory().Events(), Options{Semantics: Semantics{Scope: "galaxy"}})
	assert.ErrorContains(t, err, "scope must be")
	rep := run(t, validHistory(), Options{MinOps: -1, Checker: CheckerPorcupine})
	assert.Equal(t, DefaultSemantics(), rep.Semantics, "empty semantics mean the default")
}

func TestPairingErrorsAreReturned(t *testing.T) {
	events := validHistory().Events()
	events = append(events, events[0]) // process 0 invokes again after completing... then completes nothing
	events = append(events, events[0])
	_, err := Check(context.Background(), events, Options{})
	assert.ErrorContains(t, err, "still open")
}

// The histories in testdata are small stories of the failure modes, read
// through the history reader as `fencecheck check` reads them.
func TestTestdataHistories(t *testing.T) {
	cases := []struct {
		file    string
		verdict Verdict
		kinds   []string
	}{
		{"valid-paused-holder-fenced.jsonl", Valid, []string{}},
		{"invalid-counter-reset.jsonl", Invalid, []string{KindTokenRegression}},
		{"invalid-missing-token-accepted.jsonl", Invalid, []string{KindMissingTokenAccepted}},
		{"invalid-resource-forgets.jsonl", Invalid, []string{KindStaleWriteAccepted}},
	}
	for _, tc := range cases {
		t.Run(tc.file, func(t *testing.T) {
			events, err := history.ReadFile("testdata/" + tc.file)
			require.NoError(t, err)
			rep, err := Check(context.Background(), events, Options{Checker: CheckerPorcupine})
			require.NoError(t, err)
			assert.Equal(t, tc.verdict, rep.Verdict, rep.Reason)
			assert.Equal(t, tc.verdict, porcupineVerdict(rep))
			assert.Equal(t, tc.kinds, directKinds(rep), "%+v", rep.Anomalies())
		})
	}
}
