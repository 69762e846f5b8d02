package etcd

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/harness"
	"github.com/fencecheck/fencecheck/harness/docker/dockertest"
	"github.com/fencecheck/fencecheck/history"
)

// A short `fencecheck test --target etcd` per nemesis, the nemesis named
// (so the gate turns the verdict to unknown if it never took effect): the
// etcd fencing implementation is valid under each, the fault is in the
// history, and the run leaves nothing behind.
func TestRunValidUnderEachNemesis(t *testing.T) {
	dockertest.Require(t)
	if testing.Short() {
		t.Skip("six fault-injected runs of 8 s; make check runs them")
	}
	for i, n := range []string{"pause", "restart", "partition", "clock", "strip", "delay"} {
		t.Run(n, func(t *testing.T) {
			cfg := harness.Config{Target: "etcd", Time: 8 * time.Second, Concurrency: 4, Keys: 2, Readers: 1,
				Nemesis: n, Seed: uint64(7 + i), Store: t.TempDir(), CheckTimeout: 30 * time.Second, Log: logWriter{t}}
			target := New(Options{Log: logWriter{t}}).(*Target)
			run, err := harness.Execute(context.Background(), cfg, target)
			require.NoError(t, err)
			v, err := harness.Finish(context.Background(), run, target.Semantics())
			require.NoError(t, err)
			assert.Equal(t, checkers.Valid, v.Verdict, "anomalies: %v; gate: %v", v.Anomalies(), v.GateReasons)
			assert.Positive(t, run.Nemeses[n].Started, "nemesis %s took effect", n)

			events, err := history.ReadFile(run.HistoryPath)
			require.NoError(t, err)
			recorded := 0
			for _, e := range events {
				if e.Process == history.NemesisProcess && e.F == n {
					recorded++
				}
			}
			assert.Positive(t, recorded, "nemesis %s recorded in the history", n)
			c, nets := dockertest.Leftovers(t, target.Env().RunID)
			assert.Zero(t, c, "containers left after the run")
			assert.Zero(t, nets, "networks left after the run")
		})
	}
}
