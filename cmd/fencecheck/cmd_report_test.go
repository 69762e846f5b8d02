package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/analysis"
	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/checkers/historytest"
	"github.com/fencecheck/fencecheck/harness"
	"github.com/fencecheck/fencecheck/history"
)

// storedRun writes b's history into a fresh run folder and finishes it as
// `fencecheck test` does (harness.Finish) with cfg's check settings.
func storedRun(t *testing.T, b *historytest.Builder, cfg harness.Config) (*harness.Run, *harness.Verdict) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "memory", "20261130T060000.000Z")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	path := filepath.Join(dir, "history.jsonl")
	var buf bytes.Buffer
	for _, e := range b.Events() {
		line, err := json.Marshal(e)
		require.NoError(t, err)
		buf.Write(append(line, '\n'))
	}
	require.NoError(t, os.WriteFile(path, buf.Bytes(), 0o644))
	cfg.Target = "memory"
	run := &harness.Run{Config: cfg, Dir: dir, HistoryPath: path, Start: time.Now(), End: time.Now()}
	v, err := harness.Finish(context.Background(), run, checkers.DefaultSemantics())
	require.NoError(t, err)
	return run, v
}

func reportFlagsOf(t *testing.T, args ...string) *reportFlags {
	f := &reportFlags{}
	fl := pflag.NewFlagSet("report", pflag.ContinueOnError)
	fl.BoolVar(&f.stored, "stored", false, "")
	f.checkerFlags.register(fl)
	require.NoError(t, fl.Parse(args))
	return f
}

// `fencecheck report RUN` gives the run's own verdict: the gate reads the
// run from its history, and the check settings come from results.json.
func TestReportGivesTheRunsVerdict(t *testing.T) {
	busy := func() *historytest.Builder {
		b := historytest.New()
		for i := int64(0); i < 8; i++ {
			tok := history.FormatToken(uint64(i + 1))
			b.Acquire("l1", 100*i, 100*i+5, tok).Write("r1", tok, "v"+tok, 100*i+10, 100*i+20)
		}
		return b.Run(history.RunStart, 0, map[string]any{"requested": "pause,clock", "nemeses": []string{"pause", "clock"}}).
			Fault("pause", "n1", 200, 300).
			Run(history.RunEnd, 1000, map[string]any{"complete": true})
	}
	for _, tc := range []struct {
		name string
		cfg  harness.Config
		args []string
		want checkers.Verdict
	}{
		{"a requested fault never took effect", harness.Config{Checker: "both", MinOps: 10}, nil, checkers.Unknown},
		{"the run's own minimum", harness.Config{Checker: "porcupine", MinOps: 1000}, nil, checkers.Unknown},
		{"no minimum", harness.Config{Checker: "porcupine", MinOps: -1}, []string{"--stored"}, checkers.Unknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run, live := storedRun(t, busy(), tc.cfg)
			require.Equal(t, tc.want, live.Verdict, live.Reason)
			again, err := recheck(context.Background(), run.Dir, reportFlagsOf(t, tc.args...))
			require.NoError(t, err)
			assert.Equal(t, live.Verdict, again.Verdict)
			assert.Equal(t, live.Reason, again.Reason)
			assert.Equal(t, live.GateReasons, again.GateReasons)
			assert.Equal(t, live.Settings, again.Settings, "the stored settings, not the flags' defaults")
			assert.Equal(t, live.ExitCode, again.ExitCode)
		})
	}

	// A flag given on the command line overrides the stored setting.
	run, live := storedRun(t, busy(), harness.Config{Checker: "porcupine", MinOps: 1000})
	require.Contains(t, live.Reason, "at least 1000")
	again, err := recheck(context.Background(), run.Dir, reportFlagsOf(t, "--min-ops", "5"))
	require.NoError(t, err)
	assert.Equal(t, 5, again.Settings.MinOps)
	assert.NotContains(t, again.Reason, "at least 1000")
	assert.Equal(t, "porcupine", again.Settings.Checker)
}

// The summary names the fault the one cause rule names: for a counter that
// resets on restart, the restart between the acquires.
func TestSummaryNamesTheCause(t *testing.T) {
	b := historytest.New().
		OnNode("reference").Acquire("l1", 2000, 2010, "48").
		Fault("restart", "reference", 2250, 2880).
		Fault("pause", "client", 2780, 3300).
		Fault("partition", "reference", 3500, 4040).
		OnNode("reference").Acquire("l1", 3900, 4050, "2")
	res, err := analysis.Check(context.Background(), b.Events(), analysis.Options{MinOps: -1})
	require.NoError(t, err)
	var out bytes.Buffer
	printSummary(&out, res, "store/x")
	s := out.String()
	assert.Contains(t, s, "verdict: invalid")
	assert.Contains(t, s, "time to detection: 4.05 s after the start, can be explained by the restart of reference (2.25–2.88 s), or the partition of reference (3.50–4.04 s) between the acquires\n")
	assert.Contains(t, s, "first: [token-regression] ")
	assert.Contains(t, s, "returned token 2")
	assert.Contains(t, s, "report: store/x/report.html")
	assert.Contains(t, s, "prove a cause: fencecheck shrink store/x")
	assert.NotContains(t, s, "after pause started")
}

// issue 23: --min-ops is the default minimum for check and report, as for
// test (issue 12 had 0: an empty history passed),
// and a negative number is refused.
func TestMinOpsFlag(t *testing.T) {
	f := reportFlagsOf(t)
	assert.Equal(t, analysis.DefaultMinOps, f.checkerFlags.minOps)
	require.NoError(t, f.checkerFlags.validate())
	f = reportFlagsOf(t, "--min-ops", "-1")
	assert.ErrorContains(t, f.checkerFlags.validate(), "--min-ops must be 0 (no minimum) or more")
}
