package etcd

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/harness"
	"github.com/fencecheck/fencecheck/harness/docker/dockertest"
)

// A short run's whole life on one member at the default release (no build):
// valid under restart, its system named in config.json and results.json,
// nothing left behind. The same at etcd 3.5 (built from the module proxy's
// 3.5.36 the first time: minutes on two cores) and with three members is
// TestRunAtOtherReleases, behind the releases build tag: `make releases`.
func TestRunAtReleasesAndSizes(t *testing.T) {
	dockertest.Require(t)
	if testing.Short() {
		t.Skip("a fault-injected run of 8 s; make check runs it")
	}
	runAt(t, "", 1, "etcd "+DefaultVersion+", 1 member", 33)
}

// runAt runs the etcd target at a release and size, valid under restart,
// and checks that the run names its system everywhere and leaves nothing.
func runAt(t *testing.T, version string, members int, system string, seed uint64) {
	cfg := harness.Config{Target: "etcd", Version: version, Members: members, Time: 8 * time.Second,
		Concurrency: 3, Keys: 2, Readers: 1, Nemesis: "restart", Seed: seed, Store: t.TempDir(),
		CheckTimeout: 30 * time.Second, Log: logWriter{t}}
	target, err := Open(Options{Version: version, Members: members, Log: logWriter{t}})
	require.NoError(t, err)
	run, err := harness.Execute(context.Background(), cfg, target)
	require.NoError(t, err)
	v, err := harness.Finish(context.Background(), run, target.Semantics())
	require.NoError(t, err)
	assert.Equal(t, checkers.Valid, v.Verdict, "anomalies: %v; gate: %v", v.Anomalies(), v.GateReasons)
	assert.Positive(t, run.Nemeses["restart"].Started, "the restart took effect")
	assert.Equal(t, system, run.System)
	var stored struct {
		System  string   `json:"system"`
		Version string   `json:"version"`
		Members int      `json:"members"`
		Command []string `json:"command"`
	}
	b, err := os.ReadFile(filepath.Join(run.Dir, "config.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &stored))
	assert.Equal(t, system, stored.System)
	assert.Equal(t, version, stored.Version)
	assert.Contains(t, stored.Command, fmt.Sprintf("--members=%d", members))
	var results struct {
		Run struct {
			System string `json:"system"`
		} `json:"run"`
	}
	b, err = os.ReadFile(filepath.Join(run.Dir, "results.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &results))
	assert.Equal(t, system, results.Run.System)
	c, nets := dockertest.Leftovers(t, target.(*Target).Env().RunID)
	assert.Zero(t, c, "containers left after the run")
	assert.Zero(t, nets, "networks left after the run")
}
