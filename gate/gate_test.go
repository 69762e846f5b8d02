package gate

import (
	"context"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/analysis"
	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/harness"
	"github.com/fencecheck/fencecheck/history"
)

// exampleSpec writes a copy of the Python example's spec whose command
// carries extra arguments (bug switches) and opts in to clock faults or
// not. The copy points at the example's program by absolute path.
// exampleSpec runs examples/python-fence as a spec command node. clock is the
// node's "clock" setting: "" (fencecheck moves the process's clock),
// "offset-file" (the program applies the offset) or "none" (no clock faults).
func exampleSpec(t *testing.T, clock string, args ...string) string {
	t.Helper()
	prog, err := filepath.Abs("../examples/python-fence/fence.py")
	require.NoError(t, err)
	node := map[string]any{
		"name": "n1", "roles": []string{"issuer", "resource"},
		"command": append([]string{"python3", prog, "--port", "{port}", "--data", "{data}"}, args...),
	}
	if clock != "" {
		node["clock"] = clock
	}
	b, err := json.Marshal(map[string]any{"name": "python-fence", "nodes": []any{node}})
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "spec.json")
	require.NoError(t, os.WriteFile(path, b, 0o644))
	return "spec:" + path
}

func run(t *testing.T, cfg Config) *Result {
	t.Helper()
	if cfg.Store == "" {
		cfg.Store = t.TempDir()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := Run(ctx, cfg)
	require.NoError(t, err)
	return res
}

// A correct system in another language, every fault that applies: exit 0,
// and the JUnit file is where CI expects it.
func TestCorrectHostProcessSystemPasses(t *testing.T) {
	junit := filepath.Join(t.TempDir(), "fencecheck.xml")
	res := run(t, Config{Target: exampleSpec(t, "offset-file"), Time: 14 * time.Second, Nemesis: "all", Seed: 3, JUnit: junit})
	require.Equal(t, analysis.ExitValid, res.ExitCode, res.Summary())
	assert.True(t, res.Passed())
	assert.Equal(t, checkers.Valid, res.Verdict)
	assert.Empty(t, res.Reasons)
	for _, n := range []string{"pause", "clock", "partition", "strip", "delay", "power-loss"} {
		assert.Positive(t, res.Faults[n], "nemesis %s should act on a host process", n)
	}
	// A kill and a start again, at random or timed by an acknowledgement
	// (all shares its time among more nemeses than a short run has turns).
	assert.Positive(t, res.Faults["restart"]+res.Faults["crash-on-ack"], "a kill and restart should act on a host process: %v", res.Faults)
	// Every fault applies but a membership change and the link faults: one
	// process has no cluster to leave, and no links of its own to others.
	na := maps.Clone(res.NotApplicable)
	for _, n := range []string{"member-replace", "link-loss", "link-delay", "link-duplicate"} {
		assert.Contains(t, res.NotApplicable, n)
		delete(na, n)
	}
	assert.Empty(t, na)
	b, err := os.ReadFile(junit)
	require.NoError(t, err)
	assert.Contains(t, string(b), "<testsuite")
	assert.FileExists(t, filepath.Join(res.Dir, "report.html"))
}

// The bug no preflight can see: the lock counter lives in memory, so after
// a kill -9 the server hands out tokens it handed out before. Only a fault
// run finds it: exit 1.
func TestBuggyHostProcessSystemFails(t *testing.T) {
	res := run(t, Config{Target: exampleSpec(t, "", "--bug", "counter-in-memory"), Time: 8 * time.Second,
		Nemesis: "restart", Seed: 1})
	require.Equal(t, analysis.ExitInvalid, res.ExitCode, res.Summary())
	assert.Equal(t, checkers.Invalid, res.Verdict)
	assert.NotEmpty(t, res.Anomalies)
	assert.Positive(t, res.Faults["restart"])
}

// The flaws only idle time shows: a server that evicts an idle key's mark
// after 3 s, or drops a free lock's counter after 4 s, its timers started
// again at each start. No fault is needed, only the idle probes' quiet
// idle times (the 5 s scale's): exit 1, with the anomaly each flaw makes,
// explained by the idle time before it.
func TestIdleFlawsOfAHostProcessSystemFail(t *testing.T) {
	for _, c := range []struct {
		bug  string
		kind []string
	}{
		{"forget-idle", []string{checkers.KindStaleWriteAccepted}},
		{"forget-free-lock", []string{checkers.KindDuplicateToken, checkers.KindTokenRegression}},
	} {
		t.Run(c.bug, func(t *testing.T) {
			t.Parallel()
			res := run(t, Config{Target: exampleSpec(t, "", "--bug", c.bug), Time: 10 * time.Second, Nemesis: "none", Seed: 1})
			require.Equal(t, analysis.ExitInvalid, res.ExitCode, res.Summary())
			kinds := map[string]bool{}
			for _, a := range res.Checked.Anomalies() {
				kinds[a.Kind] = true
			}
			assert.True(t, slices.ContainsFunc(c.kind, func(k string) bool { return kinds[k] }), "one of %v among %v", c.kind, kinds)
			// No fault ran: the explanation is the idle time.
			first := res.Checked.FirstViolation
			require.NotNil(t, first)
			require.NotNil(t, first.Cause, first.Text)
			assert.Positive(t, first.Cause.Idle, first.Cause.Text)
			assert.Contains(t, first.Cause.Text, "can be explained by idle time")
		})
	}
}

// The preflight is evidence: a replay the system accepted there is in the
// history (its own phase) and the checkers find it, so the run is invalid
// with the anomaly in words; --strict-contract keeps the strict meaning (a
// deviation stops the run: exit 3, the deviation in words). A system whose
// answers cannot be classified (a stale write answered 500) cannot run.
func TestPreflightFindingsAreVerdicts(t *testing.T) {
	res, err := Run(context.Background(), Config{Target: exampleSpec(t, "", "--bug", "accept-equal"),
		Time: 2 * time.Second, Nemesis: "none", Store: t.TempDir()})
	require.NoError(t, err)
	assert.Equal(t, analysis.ExitInvalid, res.ExitCode)
	found := false
	for _, a := range res.Checked.Anomalies() {
		// The preflight's names are in the run's namespace too.
		found = found || a.Kind == checkers.KindReplayAccepted && strings.HasPrefix(a.Key, res.Run.Namespace+".conform-")
	}
	assert.True(t, found, "the preflight's accepted replay is a violation: %v", res.Checked.Anomalies())
	events, err := history.ReadFile(res.Run.HistoryPath)
	require.NoError(t, err)
	assert.JSONEq(t, `"preflight"`, string(events[1].Extra[history.RunExtraPhase]))

	res, err = Run(context.Background(), Config{Target: exampleSpec(t, "", "--bug", "accept-equal"),
		Time: 2 * time.Second, Nemesis: "none", StrictContract: true, Store: t.TempDir()})
	require.Error(t, err)
	assert.ErrorIs(t, err, harness.ErrCannotRun)
	assert.Equal(t, analysis.ExitCannot, res.ExitCode)
	assert.Contains(t, err.Error(), "[write-equal-token] n1")
	assert.Contains(t, res.Summary(), "could not be carried out")
}

// The clock nemesis on a system that did not opt in cannot act: a valid
// history, but the gate says unknown and why.
func TestFaultThatCannotApplyIsUnknown(t *testing.T) {
	res := run(t, Config{Target: exampleSpec(t, "none"), Time: 3 * time.Second, Nemesis: "pause,clock"})
	require.Equal(t, analysis.ExitUnknown, res.ExitCode, res.Summary())
	assert.Equal(t, checkers.Unknown, res.Verdict)
	require.Contains(t, res.NotApplicable, "clock")
	assert.Contains(t, strings.Join(res.Reasons, "\n"), "nemesis clock was requested but cannot act on this target")
}

func TestTooShortForMinOpsIsUnknown(t *testing.T) {
	res := run(t, Config{Target: exampleSpec(t, ""), Time: 2 * time.Second, Nemesis: "none", MinOps: 1_000_000})
	require.Equal(t, analysis.ExitUnknown, res.ExitCode, res.Summary())
	assert.Contains(t, strings.Join(res.Reasons, "\n"), "the gate needs at least 1000000 (--min-ops)")
}

func TestUsageErrors(t *testing.T) {
	res, err := Run(context.Background(), Config{Target: "no-such-target", Store: t.TempDir()})
	require.Error(t, err)
	assert.True(t, IsUsage(err))
	assert.Equal(t, analysis.ExitUsage, res.ExitCode)

	bad := filepath.Join(t.TempDir(), "bad.json")
	require.NoError(t, os.WriteFile(bad, []byte(`{"name":"x","nodes":[{"name":"n1","roles":["issuer"],"comand":["a"]}]}`), 0o644))
	res, err = Run(context.Background(), Config{Target: "spec:" + bad, Store: t.TempDir()})
	require.Error(t, err)
	assert.True(t, IsUsage(err))
	assert.Equal(t, analysis.ExitUsage, res.ExitCode)
	assert.Contains(t, err.Error(), `nodes[0].comand: unknown field "comand" (did you mean "command"?)`)

	_, err = Run(context.Background(), Config{Target: "memory", Time: -time.Second, Store: t.TempDir()})
	assert.True(t, IsUsage(err))
}

// A requested nemesis that cannot act is in the start event, with why.
func TestHistoryRecordsANemesisThatCannotAct(t *testing.T) {
	res := run(t, Config{Target: exampleSpec(t, "none"), Time: 2 * time.Second, Nemesis: "clock", Seed: 5})
	events, err := history.ReadFile(res.Run.HistoryPath)
	require.NoError(t, err)
	require.True(t, events[0].IsRun())
	x := map[string]any{}
	for k, v := range events[0].Extra {
		var val any
		require.NoError(t, json.Unmarshal(v, &val))
		x[k] = val
	}
	assert.Equal(t, "clock", x[history.RunExtraRequested])
	assert.Empty(t, x[history.RunExtraNemeses])
	na, _ := x[history.RunExtraNotApplicable].(map[string]any)
	assert.Contains(t, na, "clock")
	assert.NotEmpty(t, na["clock"], "with why")
}

// A server that differs from the contract in a detail that cannot let a
// bad token through (a missing token refused with 400, not 428), run as a
// user runs it (a spec command node): the preflight reports the deviation,
// the fault run goes on and passes; --strict-contract stops at it.
func TestASafeContractDeviationIsReportedAndTheRunGoesOn(t *testing.T) {
	spec := exampleSpec(t, "", "--quirk", "missing-token-400")
	res := run(t, Config{Target: spec, Time: 3 * time.Second, Nemesis: "restart", Seed: 2})
	require.Equal(t, analysis.ExitValid, res.ExitCode, res.Summary())
	assert.Positive(t, res.Faults["restart"], "the fault run went on")
	rj, err := os.ReadFile(filepath.Join(res.Run.Dir, "results.json"))
	require.NoError(t, err)
	assert.Contains(t, string(rj), "contract deviation, reported", "the deviation is in results.json's notes")
	assert.Contains(t, string(rj), "[write-missing-token] n1")
	page, err := os.ReadFile(filepath.Join(res.Run.Dir, "report.html"))
	require.NoError(t, err)
	assert.Contains(t, string(page), "[write-missing-token] n1", "and in the report")

	res, err = Run(context.Background(), Config{Target: spec, Time: 2 * time.Second, Nemesis: "none",
		StrictContract: true, Store: t.TempDir()})
	require.Error(t, err)
	assert.Equal(t, analysis.ExitCannot, res.ExitCode)
	assert.Contains(t, err.Error(), "[write-missing-token] n1")
}
