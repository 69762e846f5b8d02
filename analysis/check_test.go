package analysis

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/checkers/direct"
	"github.com/fencecheck/fencecheck/checkers/historytest"
	"github.com/fencecheck/fencecheck/checkers/porcupine"
	"github.com/fencecheck/fencecheck/history"
)

// fakeFast stands in for the fast checker with fixed answers.
type fakeFast struct{ register, issuer checkers.Verdict }

func (fakeFast) Name() string { return checkers.CheckerFast }
func (f fakeFast) Check(context.Context, *history.Ops, checkers.Semantics) []checkers.Result {
	return []checkers.Result{
		{Checker: checkers.CheckerFast, Model: checkers.ModelRegister, Verdict: f.register, Reason: "fake", Complete: true},
		{Checker: checkers.CheckerFast, Model: checkers.ModelIssuer, Verdict: f.issuer, Reason: "fake", Complete: true},
	}
}

// withFake is the checker set direct + porcupine + a fake fast checker.
func withFake(register, issuer checkers.Verdict, opts Options) Options {
	opts.Checkers = []Checker{direct.New(), porcupine.New(opts.Timeout), fakeFast{register, issuer}}
	return opts
}

func validHistory() *historytest.Builder {
	return historytest.New().Acquire("r1", 0, 5, "1").Write("r1", "1", "a", 10, 20).Read("r1", 30, 40, "a", "1")
}

func run(t *testing.T, b *historytest.Builder, opts Options) *Result {
	t.Helper()
	rep, err := Check(context.Background(), b.Events(), opts)
	require.NoError(t, err)
	return rep
}

func TestVerdictCombination(t *testing.T) {
	t.Run("both agree valid", func(t *testing.T) {
		rep := run(t, validHistory(), withFake(checkers.Valid, checkers.Valid, Options{MinOps: -1}))
		assert.Equal(t, checkers.Valid, rep.Verdict, rep.Reason)
		assert.Equal(t, ExitValid, rep.ExitCode)
		assert.Len(t, rep.Checks, 6) // direct, porcupine, fast × 2 models
	})
	t.Run("complete checkers disagree: unknown, both answers named", func(t *testing.T) {
		rep := run(t, validHistory(), withFake(checkers.Invalid, checkers.Valid, Options{MinOps: -1}))
		assert.Equal(t, checkers.Unknown, rep.Verdict)
		assert.Contains(t, rep.Reason, "porcupine says valid, fast says invalid")
		assert.Equal(t, ExitUnknown, rep.ExitCode)
	})
	t.Run("direct proof of a violation wins", func(t *testing.T) {
		b := historytest.New().Write("r1", "5", "a", 0, 10).Write("r1", "4", "b", 20, 30)
		rep := run(t, b, withFake(checkers.Valid, checkers.Valid, Options{MinOps: -1}))
		assert.Equal(t, checkers.Invalid, rep.Verdict)
		assert.Contains(t, rep.Reason, checkers.KindStaleWriteAccepted)
		assert.Contains(t, rep.Reason, "disagree")
		assert.Equal(t, ExitInvalid, rep.ExitCode)
	})
	t.Run("porcupine times out, fast decides", func(t *testing.T) {
		events := historytest.Simulate(historytest.SimConfig{Ops: 20000, Keys: 1, ClientsPerKey: 30, InfoRate: 0.3, Seed: 3, Acquires: true}).Events()
		rep, err := Check(context.Background(), events, withFake(checkers.Valid, checkers.Valid, Options{Timeout: time.Millisecond}))
		require.NoError(t, err)
		assert.Equal(t, checkers.Unknown, resultOf(rep, checkers.CheckerPorcupine, checkers.ModelRegister).Verdict)
		assert.Equal(t, checkers.Valid, rep.Verdict, rep.Reason)
	})
	t.Run("fast only", func(t *testing.T) {
		opts := Options{MinOps: -1, Checkers: []Checker{direct.New(), fakeFast{checkers.Invalid, checkers.Valid}}}
		rep := run(t, validHistory(), opts)
		assert.Equal(t, checkers.Invalid, rep.Verdict)
		assert.Equal(t, "fenced-register: fast says invalid", rep.Reason)
		assert.Empty(t, rep.Keys, "porcupine did not run")
	})
	t.Run("fast unknown, porcupine valid", func(t *testing.T) {
		rep := run(t, validHistory(), withFake(checkers.Unknown, checkers.Unknown, Options{MinOps: -1}))
		assert.Equal(t, checkers.Valid, rep.Verdict, rep.Reason)
	})
	t.Run("no complete checker of the register: unknown", func(t *testing.T) {
		rep := run(t, validHistory(), Options{MinOps: -1, Checkers: []Checker{direct.New()}})
		assert.Equal(t, checkers.Unknown, rep.Verdict)
		assert.Contains(t, rep.Reason, "fenced-register: no complete checker ran")
	})
}

func TestCheckerSelection(t *testing.T) {
	rep := run(t, validHistory(), Options{Checker: CheckerFast, MinOps: -1})
	assert.Len(t, rep.Checks, 4, "direct and fast")
	assert.Empty(t, rep.Keys, "porcupine did not run")
	assert.Equal(t, CheckerFast, rep.Settings.Checker)
	_, err := Check(context.Background(), validHistory().Events(), Options{Checker: "quick"})
	assert.ErrorContains(t, err, "fast, porcupine or both")
	rep = run(t, validHistory(), Options{MinOps: -1, Checkers: []Checker{direct.New(), porcupine.New(0)}})
	assert.Equal(t, checkers.Valid, rep.Verdict, "direct and porcupine decide both models")
	assert.Len(t, rep.Checks, 4)
	rep = run(t, validHistory(), Options{MinOps: -1})
	assert.Len(t, rep.Checks, 6, "both: direct, porcupine and fast")
	assert.Equal(t, CheckerBoth, rep.Settings.Checker)
	rep = run(t, validHistory(), Options{Checker: " fast ,porcupine", MinOps: -1})
	assert.Len(t, rep.Checks, 6, "a list of the table's names")
	assert.Equal(t, CheckerBoth, rep.Settings.Checker, "spelled the one way: the alias it equals")
}

// --checker takes a comma-separated list of the table's names and aliases,
// and says what it takes when a name has no line.
func TestNormalizeCheckerReadsTheTable(t *testing.T) {
	for spec, want := range map[string]string{
		"": CheckerBoth, "both": CheckerBoth, "fast": CheckerFast, "porcupine,fast": CheckerBoth,
		"fast,fast": CheckerFast, "both,fast": CheckerBoth, "porcupine": CheckerPorcupine,
	} {
		got, err := NormalizeChecker(spec)
		require.NoError(t, err, spec)
		assert.Equal(t, want, got, spec)
	}
	for _, spec := range []string{"direct", "fast,quick", "fast,", "both fast"} {
		_, err := NormalizeChecker(spec)
		assert.ErrorContains(t, err, "must be fast, porcupine or both, or a comma-separated list of them", spec)
	}
	assert.Equal(t, []string{CheckerFast, CheckerPorcupine}, CheckerNames(), "the direct checks always run: not a choice")
}

func TestTooFewOperationsIsUnknown(t *testing.T) {
	rep := run(t, validHistory(), Options{Checker: CheckerPorcupine, MinOps: DefaultMinOps})
	assert.Equal(t, checkers.Unknown, rep.Verdict)
	assert.Contains(t, rep.Reason, "too few operations")
	assert.Equal(t, 3, rep.Counts.Definite)
	assert.Equal(t, DefaultMinOps, rep.Settings.MinOps)

	// issue 12: 0 means no minimum (check's default), with a note.
	rep = run(t, validHistory(), Options{Checker: CheckerPorcupine})
	assert.Equal(t, checkers.Valid, rep.Verdict)
	assert.Equal(t, 0, rep.Settings.MinOps)
	assert.Contains(t, strings.Join(rep.Notes, "\n"), "a small history: only 3 operations ended ok or fail")

	// A violation is a violation, however short the history.
	b := historytest.New().Write("r1", "", "a", 0, 10)
	rep = run(t, b, Options{Checker: CheckerPorcupine})
	assert.Equal(t, checkers.Invalid, rep.Verdict)
}

func TestSemanticsAreValidated(t *testing.T) {
	_, err := Check(context.Background(), validHistory().Events(), Options{Semantics: checkers.Semantics{Equal: "sometimes"}})
	assert.ErrorContains(t, err, "equal must be")
	_, err = Check(context.Background(), validHistory().Events(), Options{Semantics: checkers.Semantics{Scope: "galaxy"}})
	assert.ErrorContains(t, err, "scope must be")
	rep := run(t, validHistory(), Options{MinOps: -1, Checker: CheckerPorcupine})
	assert.Equal(t, checkers.DefaultSemantics(), rep.Semantics, "empty semantics mean the default")
}

func TestPairingErrorsAreReturned(t *testing.T) {
	events := validHistory().Events()
	again := events[0]
	again.Index = 1 << 40 // process 0 invokes again after completing... then completes nothing
	events = append(events, again)
	again.Index++
	events = append(events, again)
	_, err := Check(context.Background(), events, Options{})
	assert.ErrorContains(t, err, "still open")
	_, err = Check(context.Background(), append(events[:len(events)-1:len(events)-1], events[0]), Options{})
	assert.ErrorContains(t, err, "duplicate index")
}

// The histories in testdata are small stories of the failure modes, read
// through the history reader as `fencecheck check` reads them.
func TestTestdataHistories(t *testing.T) {
	cases := []struct {
		file    string
		verdict checkers.Verdict
		kinds   []string
	}{
		{"valid-paused-holder-fenced.jsonl", checkers.Valid, []string{}},
		{"invalid-counter-reset.jsonl", checkers.Invalid, []string{checkers.KindTokenRegression}},
		{"invalid-missing-token-accepted.jsonl", checkers.Invalid, []string{checkers.KindMissingTokenAccepted, checkers.KindReadWithoutToken}},
		{"invalid-resource-forgets.jsonl", checkers.Invalid, []string{checkers.KindStaleWriteAccepted}},
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
			// The file, streamed, gives the same answer.
			streamed, err := CheckFile(context.Background(), "testdata/"+tc.file, Options{Checker: CheckerPorcupine})
			require.NoError(t, err)
			assert.Equal(t, rep.Verdict, streamed.Verdict)
			assert.Equal(t, rep.Anomalies(), streamed.Anomalies())
		})
	}
}

// Through the analysis, the fast checker decides a history Porcupine cannot
// (checkers/fast's TestFastFindsPlantedStaleReadPorcupineCannot shows both
// halves alone).
func TestFastDecidesWherePorcupineCannot(t *testing.T) {
	h := historytest.Simulate(historytest.SimConfig{Seed: 7, Ops: 3000, Keys: 1, ClientsPerKey: 50, InfoRate: 0.1, Tick: 1_000_000, MaxDur: 40})
	require.True(t, h.PlantStaleRead())
	rep, err := Check(context.Background(), h.Events(), Options{Checker: CheckerBoth, Timeout: time.Second})
	require.NoError(t, err)
	assert.Equal(t, checkers.Invalid, rep.Verdict, rep.Reason)
}

// The fast checker alone, through the analysis: its verdict decides, and
// time to detection comes from its anomalies.
func TestFastThroughTheAnalysis(t *testing.T) {
	b := historytest.New().Write("k", "2", "a", 0, 10).Write("k", "1", "b", 20, 30)
	for i := 0; i < 10; i++ {
		b.Read("k", int64(40+10*i), int64(45+10*i), "b", "1")
	}
	rep, err := Check(context.Background(), b.Events(), Options{Checker: CheckerFast})
	require.NoError(t, err)
	assert.Equal(t, checkers.Invalid, rep.Verdict)
	var fast []checkers.Result
	for _, r := range rep.Checks {
		if r.Checker == checkers.CheckerFast {
			fast = append(fast, r)
		}
	}
	require.Len(t, fast, 2)
	assert.Equal(t, checkers.Invalid, fast[0].Verdict)
	require.NotNil(t, rep.FirstViolation)
	assert.Equal(t, int64(30e6), rep.FirstViolation.At)
}
