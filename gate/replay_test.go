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
	"github.com/fencecheck/fencecheck/gate"
	"github.com/fencecheck/fencecheck/history"
	"github.com/fencecheck/fencecheck/nemesis"
	"github.com/fencecheck/fencecheck/reports"
	"github.com/fencecheck/fencecheck/targets"
)

// Every run records its schedule, and a run given that schedule carries out
// the same faults: same nemeses, nodes and parameters, at the same times
// within jitter, the workload from the same seed. The replay's reproduce
// line names the file.
func TestARunsScheduleReplays(t *testing.T) {
	store := t.TempDir()
	cfg := gate.Config{Target: "memory", Time: 4 * time.Second, Concurrency: 3, Keys: 2, Readers: 1,
		TTL: 300 * time.Millisecond, OpTimeout: 500 * time.Millisecond, Nemesis: "all", Seed: 21, Store: store}
	first, err := gate.Run(context.Background(), cfg)
	require.NoError(t, err)
	file := filepath.Join(first.Dir, nemesis.ScheduleFile)
	drawn, err := nemesis.ReadSchedule(file)
	require.NoError(t, err)
	require.NotEmpty(t, drawn.Faults)
	assert.Equal(t, "all", drawn.Nemesis)
	assert.Equal(t, uint64(21), drawn.Seed)
	assert.Equal(t, nemesis.ModeGuided, drawn.Mode, "all is guided by default: its faults replay as any")
	started, aimed := 0, 0
	for _, f := range drawn.Faults {
		if f.Error == "" {
			started++
		}
		if f.Why != "" {
			aimed++
		}
	}
	assert.Positive(t, aimed, "the guided faults say why they were chosen")
	total := 0
	for _, n := range first.Faults {
		total += n
	}
	assert.Equal(t, total, started, "the schedule lists every fault the run started")
	res := readResults(t, first.Dir)
	assert.Equal(t, nemesis.ScheduleFile, res.Files.Schedule, "results.json links the schedule")

	cfg.Nemesis, cfg.Time, cfg.Schedule = "", 0, file
	again, err := gate.Run(context.Background(), cfg)
	require.NoError(t, err)
	line := strings.Join(again.Command, " ")
	assert.Contains(t, line, "--schedule="+file)
	assert.Contains(t, line, "--seed=21")
	assert.Contains(t, line, "--time=4s", "the schedule's main phase")
	assert.NotContains(t, line, "--nemesis")
	replayed := again.Run.Schedule
	assert.Equal(t, file, replayed.ReplayOf)
	require.Len(t, replayed.Faults, len(drawn.Faults))
	byNemesis := func(s *nemesis.Schedule) map[string][]nemesis.Scheduled {
		out := map[string][]nemesis.Scheduled{}
		for _, f := range s.Faults {
			out[f.Nemesis] = append(out[f.Nemesis], f)
		}
		return out
	}
	want, got := byNemesis(drawn), byNemesis(replayed)
	for name, fs := range want {
		require.Len(t, got[name], len(fs), name)
		for i, f := range fs {
			g := got[name][i]
			assert.Equal(t, f.Nodes, g.Nodes, "%s %d", name, i)
			assert.Equal(t, f.Params, g.Params, "%s %d", name, i)
			// Tried when it started then; one whose node was still held
			// (the fault before it, packed close by the guided schedule,
			// stopped later on a loaded machine) waited for it.
			assert.InDelta(t, f.Start, g.Start-g.Waited, float64(200*time.Millisecond), "%s is tried when it started (replayed at %s, waited %s)", f.Describe(), g.Start, g.Waited)
		}
	}
	// The history's fault starts are the schedule's.
	events, err := history.ReadFile(again.Run.HistoryPath)
	require.NoError(t, err)
	starts := 0
	for _, e := range events {
		if e.Process == history.NemesisProcess && e.F != history.RunEvent && string(e.Extra["action"]) == `"start"` {
			starts++
		}
	}
	assert.Equal(t, len(replayed.Faults)-failedFaults(replayed), starts)
}

func failedFaults(s *nemesis.Schedule) int {
	n := 0
	for _, f := range s.Faults {
		if f.Error != "" {
			n++
		}
	}
	return n
}

func readResults(t *testing.T, dir string) reports.Results {
	t.Helper()
	var r reports.Results
	b, err := os.ReadFile(filepath.Join(dir, reports.ResultsFile))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &r))
	return r
}

// A schedule that does not fit the target is a usage error that names the
// problem, found before the main phase: no fault, no operation.
func TestAScheduleThatDoesNotFitIsAUsageError(t *testing.T) {
	dir := t.TempDir()
	for name, tc := range map[string]struct{ faults, want string }{
		"missing node": {`{"nemesis": "restart", "nodes": ["etcd-1"], "takes_over": true, "start_ns": 1000000, "duration_ns": 1000000}`,
			"line 2: fault 1 (restart): the target has no node etcd-1 (it has: client, reference)"},
		"unknown group": {`{"nemesis": "partition", "nodes": ["reference"], "params": {"mode": "one", "groups": [["reference"], ["x"]]}, "duration_ns": 1000000}`,
			"line 2: fault 1 (partition): group names x, which is not a node of the target"},
		"bad file": {`{"nemesis": "restart", "nodes": ["reference"], "bogus": 1}`, `unknown field "bogus"`},
	} {
		t.Run(name, func(t *testing.T) {
			file := filepath.Join(dir, name+".json")
			require.NoError(t, os.WriteFile(file, []byte("{\"schedule_version\": 1, \"faults\": [\n"+tc.faults+"]}"), 0o644))
			res, err := gate.Run(context.Background(), gate.Config{Target: "memory", Schedule: file, Time: time.Second, Store: dir})
			require.Error(t, err)
			assert.True(t, gate.IsUsage(err), "%v", err)
			assert.Equal(t, analysis.ExitUsage, res.ExitCode)
			assert.Contains(t, err.Error(), tc.want)
			assert.Contains(t, err.Error(), file)
			// Found before the main phase (once the target was up, for a
			// schedule that names what it lacks): no fault and no
			// operation happened, and the refused run left no folder.
			assert.Empty(t, res.Dir)
			left, _ := filepath.Glob(filepath.Join(dir, "*", "2*"))
			assert.Empty(t, left, "no empty run folder in the store")
		})
	}
}

// A run's settings are normalised once: the schedule file is read by
// Normalize, and the run carries out what it read (the file is gone by
// then), its nemeses parsed once, the checker selection spelled one way.
func TestTheScheduleIsReadOnce(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "s.json")
	require.NoError(t, os.WriteFile(file, []byte(`{"schedule_version": 1, "main_phase_ns": 1500000000, "faults": [
		{"nemesis": "restart", "nodes": ["reference"], "takes_over": true, "start_ns": 300000000, "duration_ns": 300000000}]}`), 0o644))
	n, err := gate.Config{Target: "memory", Schedule: file, Checker: "porcupine,fast", Store: dir}.Normalize()
	require.NoError(t, err)
	assert.Equal(t, []string{"restart"}, n.Nemeses)
	assert.Equal(t, 1500*time.Millisecond, n.Time, "the schedule's main phase")
	assert.Equal(t, analysis.CheckerBoth, n.Checker)
	require.Len(t, n.Replay.Faults, 1)
	require.NoError(t, os.Remove(file))
	target, err := targets.New(n.Config)
	require.NoError(t, err)
	run, err := n.Execute(context.Background(), target)
	require.NoError(t, err)
	assert.Equal(t, 1, run.Nemeses["restart"].Started, "the replay carried out the schedule it was given")
	assert.Equal(t, file, run.Schedule.ReplayOf)
}
