package etcd

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/harness"
	"github.com/fencecheck/fencecheck/harness/docker/dockertest"
	"github.com/fencecheck/fencecheck/harness/history"
	"github.com/fencecheck/fencecheck/models"
)

// A short `fencecheck test --target etcd` with every nemesis named (so the
// gate turns the verdict to unknown if any of them never took effect): the
// etcd fencing implementation is valid under all of them, and the run
// leaves nothing behind.
func TestRunValidUnderEveryNemesis(t *testing.T) {
	dockertest.Require(t)
	if testing.Short() {
		t.Skip("a 20 s fault-injected run; make check runs it")
	}
	nemeses := []string{"pause", "restart", "partition", "clock", "strip", "delay"}
	cfg := harness.Config{Target: "etcd", Time: 20 * time.Second, Concurrency: 4, Keys: 2, Readers: 1,
		Nemesis: "pause,restart,partition,clock,strip,delay", Seed: 7, Store: t.TempDir(),
		CheckTimeout: 30 * time.Second, Log: logWriter{t}}
	target := New(Options{Log: logWriter{t}}).(*Target)
	run, err := harness.Execute(context.Background(), cfg, target)
	require.NoError(t, err)
	v, err := harness.Finish(context.Background(), run, target.Semantics())
	require.NoError(t, err)
	assert.Equal(t, models.Valid, v.Verdict, "anomalies: %v; gate: %v", v.Report.Anomalies(), v.GateReasons)

	events, err := history.ReadFile(run.HistoryPath)
	require.NoError(t, err)
	started := map[string]int{}
	for _, e := range events {
		if e.Process == history.NemesisProcess && string(e.Extra["action"]) == `"start"` {
			started[e.F]++
		}
	}
	for _, n := range nemeses {
		assert.Positive(t, run.Nemeses[n].Started, "nemesis %s took effect", n)
		if n != "strip" { // strip records each tampered write, not start/stop
			assert.Positive(t, started[n], "nemesis %s recorded in the history", n)
		}
	}
	c, n := dockertest.Leftovers(t, target.env.RunID)
	assert.Zero(t, c, "containers left after the run")
	assert.Zero(t, n, "networks left after the run")
}
