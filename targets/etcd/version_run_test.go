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

// Short runs at two releases (3.5, built from the module proxy's 3.5.36 the
// first time: a few minutes on two cores, then cached; and the default) and
// at one and three members: each valid under restart, its system named in
// config.json and results.json.
func TestRunAtReleasesAndSizes(t *testing.T) {
	dockertest.Require(t)
	if testing.Short() {
		t.Skip("three fault-injected runs of 8 s, the first building etcd 3.5; make check runs them")
	}
	for i, c := range []struct {
		version string
		members int
		system  string
	}{
		{"3.5", 1, "etcd v3.5.36, 1 member"},
		{"3.5", 3, "etcd v3.5.36, 3 members"},
		{"", 1, "etcd " + DefaultVersion + ", 1 member"},
	} {
		t.Run(c.system, func(t *testing.T) {
			cfg := harness.Config{Target: "etcd", Version: c.version, Members: c.members, Time: 8 * time.Second,
				Concurrency: 3, Keys: 2, Readers: 1, Nemesis: "restart", Seed: uint64(31 + i), Store: t.TempDir(),
				CheckTimeout: 30 * time.Second, Log: logWriter{t}}
			target, err := Open(Options{Version: c.version, Members: c.members, Log: logWriter{t}})
			require.NoError(t, err)
			run, err := harness.Execute(context.Background(), cfg, target)
			require.NoError(t, err)
			v, err := harness.Finish(context.Background(), run, target.Semantics())
			require.NoError(t, err)
			assert.Equal(t, checkers.Valid, v.Verdict, "anomalies: %v; gate: %v", v.Anomalies(), v.GateReasons)
			assert.Positive(t, run.Nemeses["restart"].Started, "the restart took effect")
			assert.Equal(t, c.system, run.System)
			var stored struct {
				System  string   `json:"system"`
				Version string   `json:"version"`
				Members int      `json:"members"`
				Command []string `json:"command"`
			}
			b, err := os.ReadFile(filepath.Join(run.Dir, "config.json"))
			require.NoError(t, err)
			require.NoError(t, json.Unmarshal(b, &stored))
			assert.Equal(t, c.system, stored.System)
			assert.Equal(t, c.version, stored.Version)
			assert.Contains(t, stored.Command, fmt.Sprintf("--members=%d", c.members))
			var results struct {
				Run struct {
					System string `json:"system"`
				} `json:"run"`
			}
			b, err = os.ReadFile(filepath.Join(run.Dir, "results.json"))
			require.NoError(t, err)
			require.NoError(t, json.Unmarshal(b, &results))
			assert.Equal(t, c.system, results.Run.System)
		})
	}
}
