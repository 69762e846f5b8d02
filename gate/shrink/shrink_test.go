package shrink

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/analysis"
	"github.com/fencecheck/fencecheck/gate"
	"github.com/fencecheck/fencecheck/harness"
	"github.com/fencecheck/fencecheck/nemesis"
)

const s = time.Second

// logTo shows a shrink's progress lines in the test's log.
func logTo(t *testing.T) io.Writer { return testLog{t} }

type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// storedRun writes a run folder as a failing run leaves it: config.json,
// results.json (verdict invalid, detection at detect) and schedule.json
// with the faults.
func storedRun(t *testing.T, verdict string, detect time.Duration, mainPhase time.Duration, faults []nemesis.Scheduled) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "store", "memory", "20261201T000000.000Z")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	write := func(name string, v any) {
		b, err := json.Marshal(v)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), b, 0o644))
	}
	write("config.json", map[string]any{"target": "memory", "bugs": []string{"counter-in-memory"}, "time_ns": mainPhase,
		"seed": 9, "nemesis": "all", "store": filepath.Join(dir, "..", ".."), "config_version": 2})
	write("results.json", map[string]any{"verdict": verdict, "first_invalid_at_ns": detect})
	b, err := (&nemesis.Schedule{Seed: 9, Nemesis: "all", MainPhase: mainPhase, Faults: faults}).Marshal()
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "schedule.json"), b, 0o644))
	return dir
}

// manyFaults is a busy schedule: every kind, one needed restart among them.
func manyFaults() []nemesis.Scheduled {
	kinds := []string{"pause", "clock", "partition", "strip", "delay", "restart"}
	links := []string{"clients->reference"}
	params := map[string]any{
		"pause": map[string]any{"mode": "node"}, "clock": map[string]any{"mode": "step", "offset_ms": 5000},
		"partition": map[string]any{"mode": "clients-from-node", "links": links},
		"strip":     map[string]any{"share": 0.5, "links": links}, "delay": map[string]any{"share": 0.5, "bound_ms": 900, "links": links},
	}
	var out []nemesis.Scheduled
	for i := range 30 {
		k := kinds[i%len(kinds)]
		out = append(out, nemesis.Scheduled{Nemesis: k, Nodes: []string{"reference"}, Start: time.Duration(i) * 900 * time.Millisecond,
			Duration: 800 * time.Millisecond, TakesOver: k == "restart" || k == "pause", Params: params[k]})
	}
	return out
}

// fake stands in for real runs: a try fails when the candidate's schedule
// has fault needed (by start) before the main phase ends, with probability
// p; it shows 0.3 s after that fault ends.
type fake struct {
	mu     sync.Mutex
	rng    *rand.Rand
	p      float64
	needed []time.Duration // starts of the faults the failure needs (none: it needs none)
	calls  int
	delay  time.Duration
}

func (f *fake) run(ctx context.Context, cfg harness.Config) Try {
	sched, err := nemesis.ReadSchedule(cfg.Schedule)
	if err != nil {
		return Try{ExitCode: analysis.ExitUsage, Error: err.Error(), usage: true}
	}
	if f.delay > 0 {
		select {
		case <-time.After(f.delay):
		case <-ctx.Done():
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	shows := time.Duration(0)
	for _, need := range f.needed {
		found := false
		for _, flt := range sched.Faults {
			if flt.Start == need && flt.Start < cfg.Time {
				found = true
				shows = max(shows, flt.Start+min(flt.Duration, 200*time.Millisecond)+300*time.Millisecond)
			}
		}
		if !found {
			return Try{ExitCode: analysis.ExitValid, Verdict: "valid", FirstInvalidAt: -1}
		}
	}
	if shows > cfg.Time || f.rng.Float64() >= f.p {
		return Try{ExitCode: analysis.ExitValid, Verdict: "valid", FirstInvalidAt: -1}
	}
	return Try{ExitCode: analysis.ExitInvalid, Verdict: "invalid", FirstInvalidAt: shows}
}

func newFake(p float64, needed ...time.Duration) *fake {
	return &fake{rng: rand.New(rand.NewPCG(1, 2)), p: p, needed: needed}
}

// A failure that needs one restart among 30 faults of six kinds shrinks to
// exactly that restart, shorter, in a main phase cut to just after it.
func TestShrinkKeepsTheOneFaultTheFailureNeeds(t *testing.T) {
	faults := manyFaults()
	restartAt := faults[11].Start // a restart, at 9.9 s
	require.Equal(t, "restart", faults[11].Nemesis)
	dir := storedRun(t, "invalid", restartAt+time.Second, 30*s, faults)
	f := newFake(1, restartAt)
	res, err := run(context.Background(), dir, Options{Progress: logTo(t)}, f.run)
	require.NoError(t, err)
	assert.Equal(t, analysis.ExitInvalid, res.ExitCode)
	assert.Equal(t, 30, res.Before.Faults)
	assert.Equal(t, 1, res.After.Faults)
	assert.Equal(t, "restart", res.After.Kinds)
	assert.Less(t, res.After.MainPhase, 12*s, "the main phase ends soon after the restart")
	assert.Equal(t, 3, res.Tries, "the kept schedule ran every try")
	assert.Equal(t, 3, res.Failed)
	assert.True(t, strings.HasPrefix(res.Summary, "fails with just: restart of reference at 9.90 s for 0.20 s (3 of 3 tries)"), res.Summary)

	kept, err := nemesis.ReadSchedule(filepath.Join(dir, "shrink", "schedule.json"))
	require.NoError(t, err)
	require.Len(t, kept.Faults, 1)
	assert.Equal(t, restartAt, kept.Faults[0].Start)
	assert.Equal(t, 200*time.Millisecond, kept.Faults[0].Duration, "halved twice")
	assert.Equal(t, res.After.MainPhase, kept.MainPhase)
	line := strings.Join(res.Command, " ")
	assert.Contains(t, line, "--schedule="+filepath.Join(dir, "shrink", "schedule.json"))
	assert.Contains(t, line, "--seed=9")
	assert.Contains(t, line, fmt.Sprintf("--time=%s", kept.MainPhase))
	txt, err := os.ReadFile(filepath.Join(dir, "shrink", "summary.txt"))
	require.NoError(t, err)
	assert.Contains(t, string(txt), res.Summary)
	assert.Contains(t, string(txt), harness.ShellLine(res.Command))
	for _, c := range res.Candidates {
		assert.FileExists(t, c.Schedule)
		assert.LessOrEqual(t, len(c.Tries), 3)
		if c.N != res.Candidates[len(res.Candidates)-1].N || !c.StillFails {
			// Decided early: two that agree settle it.
			assert.Len(t, c.Tries, 2, "candidate %d: %s", c.N, c.What)
		}
	}
	assert.LessOrEqual(t, len(res.Candidates), 16, "ddmin over kinds first keeps the candidates few")
	var stored Result
	b, err := os.ReadFile(filepath.Join(dir, "shrink", "summary.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &stored))
	assert.Equal(t, res.Summary, stored.Summary)
	assert.Equal(t, len(res.Candidates), len(stored.Candidates))
}

// A flaky failure (four tries in five) still shrinks: a candidate fails
// when two of three tries do.
func TestShrinkCopesWithAFlakyFailure(t *testing.T) {
	faults := manyFaults()
	dir := storedRun(t, "invalid", 9*s, 30*s, faults)
	f := newFake(0.8, faults[5].Start, faults[7].Start) // a restart and a clock fault
	res, err := run(context.Background(), dir, Options{Progress: logTo(t)}, f.run)
	require.NoError(t, err)
	assert.Equal(t, analysis.ExitInvalid, res.ExitCode)
	assert.Equal(t, 2, res.After.Faults, res.Summary)
	assert.Equal(t, "clock, restart", res.After.Kinds)
	assert.GreaterOrEqual(t, res.Failed, 2)
	for _, c := range res.Candidates {
		if c.StillFails {
			assert.GreaterOrEqual(t, c.Failed, 2)
		}
	}
}

// A bug that needs no fault shrinks to none.
func TestShrinkToNoFaultAtAll(t *testing.T) {
	dir := storedRun(t, "invalid", 50*time.Millisecond, 30*s, manyFaults())
	res, err := run(context.Background(), dir, Options{Progress: logTo(t)}, newFake(1).run)
	require.NoError(t, err)
	assert.Equal(t, analysis.ExitInvalid, res.ExitCode)
	assert.Equal(t, 0, res.After.Faults)
	assert.Equal(t, "fails with no fault at all (3 of 3 tries): the bug needs none", res.Summary)
	assert.Equal(t, time.Second, res.After.MainPhase, "the shortest main phase")
}

// When no replay fails again, the shrink says so and exits 2; a run that
// was not invalid, and a second shrink over the first, are usage errors.
func TestShrinkOutcomesAndUsage(t *testing.T) {
	faults := manyFaults()
	dir := storedRun(t, "invalid", 4*s, 30*s, faults)
	f := newFake(0) // never fails again
	res, err := run(context.Background(), dir, Options{Progress: logTo(t)}, f.run)
	require.NoError(t, err)
	assert.Equal(t, analysis.ExitUnknown, res.ExitCode)
	assert.Contains(t, res.Summary, "no candidate failed again")
	require.Len(t, res.Candidates, 2, "the faults before the violation, then the whole schedule")
	assert.Equal(t, 30, res.Candidates[1].Faults)
	assert.Equal(t, 4, f.calls, "two tries each: two passes settle it")

	_, err = run(context.Background(), dir, Options{Progress: logTo(t)}, f.run)
	assert.True(t, IsUsage(err))
	assert.ErrorContains(t, err, "--force")
	res, err = run(context.Background(), dir, Options{Force: true}, f.run)
	require.NoError(t, err, "--force replaces the earlier shrink")
	assert.Equal(t, analysis.ExitUnknown, res.ExitCode)

	valid := storedRun(t, "valid", -1, 30*s, faults)
	res, err = run(context.Background(), valid, Options{Progress: logTo(t)}, f.run)
	assert.True(t, IsUsage(err))
	assert.ErrorContains(t, err, "is valid, not invalid")
	assert.Equal(t, analysis.ExitUsage, res.ExitCode)

	_, err = run(context.Background(), dir, Options{Tries: 2, Need: 3}, f.run)
	assert.ErrorContains(t, err, "--need must be 1..--tries")
}

// The budget ends the shrink with what failed so far.
func TestShrinkStopsAtItsBudget(t *testing.T) {
	faults := manyFaults()
	dir := storedRun(t, "invalid", 11*s, 30*s, faults)
	f := newFake(1, faults[11].Start)
	f.delay = 100 * time.Millisecond
	res, err := run(context.Background(), dir, Options{Budget: 450 * time.Millisecond}, f.run)
	require.NoError(t, err)
	assert.True(t, res.OutOfTime)
	assert.Equal(t, analysis.ExitInvalid, res.ExitCode, "the reproduction failed before the budget ran out")
	assert.Greater(t, res.After.Faults, 1, "not shrunk all the way")
	assert.Less(t, res.Took, 2*s)
	txt, err := os.ReadFile(filepath.Join(dir, "shrink", "summary.txt"))
	require.NoError(t, err)
	assert.Contains(t, string(txt), "the budget of 450ms ran out")

	// An interrupt ends it the same way, and says so.
	ctx, cancel := context.WithTimeout(context.Background(), 450*time.Millisecond)
	defer cancel()
	res, err = run(ctx, dir, Options{Force: true}, f.run)
	require.NoError(t, err)
	assert.True(t, res.Interrupted)
	assert.False(t, res.OutOfTime)
	assert.Equal(t, analysis.ExitInvalid, res.ExitCode)
	txt, err = os.ReadFile(filepath.Join(dir, "shrink", "summary.txt"))
	require.NoError(t, err)
	assert.Contains(t, string(txt), "interrupted")
}

// A real shrink on the embedded reference with the counter kept in memory:
// a short run with a restart among other faults shrinks to the restart, the
// one fault that bug needs, and the stored run's report links the result.
func TestShrinkARealFailingRun(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the embedded reference about twenty times")
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "schedule.json")
	// The clock steps back (a step forward would grant leases that outlive
	// the restart in real time: every acquire after it would find its lock
	// held, and the reset counter would never show), and ends before the
	// restart.
	require.NoError(t, os.WriteFile(file, []byte(`{"schedule_version": 1, "main_phase_ns": 2000000000, "faults": [
		{"nemesis": "clock", "nodes": ["reference"], "params": {"mode": "step", "offset_ms": -30000}, "start_ns": 150000000, "duration_ns": 350000000},
		{"nemesis": "restart", "nodes": ["reference"], "takes_over": true, "start_ns": 700000000, "duration_ns": 200000000},
		{"nemesis": "pause", "nodes": ["client"], "params": {"mode": "holder", "stall_ms": 400}, "start_ns": 800000000, "duration_ns": 500000000}]}`), 0o644))
	cfg := gate.Config{Target: "memory", Bugs: []string{"counter-in-memory"}, Schedule: file, Concurrency: 3, Keys: 2, Readers: 1,
		TTL: 300 * time.Millisecond, OpTimeout: 500 * time.Millisecond, Seed: 4, Store: filepath.Join(dir, "store")}
	stored, err := gate.Run(context.Background(), cfg)
	require.NoError(t, err)
	require.Equal(t, analysis.ExitInvalid, stored.ExitCode, stored.Summary())

	began := time.Now()
	res, err := Run(context.Background(), stored.Dir, Options{Budget: 2 * time.Minute, Progress: logTo(t)})
	require.NoError(t, err)
	t.Logf("shrink took %s", time.Since(began).Round(time.Millisecond))
	assert.Equal(t, analysis.ExitInvalid, res.ExitCode, res.Summary)
	assert.Equal(t, 3, res.Before.Faults)
	assert.Equal(t, "restart", res.After.Kinds, "the counter kept in memory needs a restart, nothing else: %s", res.Summary)
	assert.GreaterOrEqual(t, res.Failed, 2)
	assert.Regexp(t, `^fails with just: restart of reference at 0\.7\d s for 0\.\d+ s \([23] of 3 tries\)$`, res.Summary,
		"the restart at 0.7 s (as the stored run started it)")

	// The kept schedule really fails when replayed with its command's config.
	kept := cfg
	kept.Schedule, kept.Time = res.Schedule, res.After.MainPhase
	again, err := gate.Run(context.Background(), kept)
	require.NoError(t, err)
	assert.Equal(t, analysis.ExitInvalid, again.ExitCode, "the kept schedule replays invalid: %s", again.Summary())

	// Every try is a normal run folder; the stored run links the summary.
	for _, c := range res.Candidates {
		for _, tr := range c.Tries {
			assert.FileExists(t, filepath.Join(tr.Dir, "results.json"))
		}
	}
	var results struct {
		Files struct{ Shrink, Schedule string }
	}
	b, err := os.ReadFile(filepath.Join(stored.Dir, "results.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &results))
	assert.Equal(t, "shrink/summary.txt", results.Files.Shrink)
	assert.Equal(t, "schedule.json", results.Files.Schedule)
	page, err := os.ReadFile(filepath.Join(stored.Dir, "report.html"))
	require.NoError(t, err)
	assert.Contains(t, string(page), res.Summary)
}
