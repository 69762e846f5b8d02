package redis

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/nemesis/lazyfs/lazyfstest"

	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/harness"
	"github.com/fencecheck/fencecheck/harness/docker"
	"github.com/fencecheck/fencecheck/history"
)

// A short `fencecheck test --target redis` per nemesis, the nemesis named
// (the gate turns the verdict to unknown if it never took effect): the
// durable Redis implementation is valid under each, the fault is in the
// history, and the run leaves nothing behind.
func TestRunRedisValidUnderEachNemesis(t *testing.T) {
	requireDocker(t)
	for i, n := range []string{"pause", "restart", "partition", "clock", "strip", "delay", "power-loss"} {
		t.Run(n, func(t *testing.T) {
			if n == "power-loss" {
				lazyfstest.Require(t)
			}
			target := Durable()
			cfg := harness.Config{Target: "redis", Time: 8 * time.Second, Concurrency: 4, Keys: 2, Readers: 1,
				Nemesis: n, Seed: uint64(7 + i), Store: t.TempDir(), CheckTimeout: 30 * time.Second, Log: testLog{t}}
			v := runTarget(t, cfg, target)
			assert.Equal(t, checkers.Valid, v.Verdict, "anomalies: %v; gate: %v", v.Anomalies(), v.GateReasons)
			assert.Positive(t, v.Run.Nemeses[n].Started, "nemesis %s took effect", n)
			events, err := history.ReadFile(v.Run.HistoryPath)
			require.NoError(t, err)
			recorded, onRedis := 0, false
			for _, e := range events {
				if e.Process == history.NemesisProcess && e.F == n {
					recorded++
					onRedis = onRedis || slices.Contains(strings.Split(e.Node, ","), RedisNode)
				}
			}
			assert.Positive(t, recorded, "nemesis %s recorded in the history", n)
			if n == "clock" {
				assert.True(t, onRedis, "the clock nemesis stepped Redis's clock")
			}
			c, nets := labelledObjects(t, target.Env().RunID)
			assert.Zero(t, c, "containers left after the run")
			assert.Zero(t, nets, "networks left after the run")
		})
	}
}

// redis-volatile under restart: the counter starts again after each kill, so
// the issuer hands out old tokens and the run is invalid.
func TestRunRedisVolatileInvalidUnderRestart(t *testing.T) {
	requireDocker(t)
	cfg := harness.Config{Target: "redis-volatile", Time: 12 * time.Second, Concurrency: 4, Keys: 2, Readers: 1,
		Nemesis: "restart", Seed: 3, Store: t.TempDir(), CheckTimeout: 30 * time.Second, Log: testLog{t}}
	v := runTarget(t, cfg, VolatileTarget())
	assert.Equal(t, checkers.Invalid, v.Verdict)
	assert.Equal(t, 1, v.ExitCode)
	kinds := map[string]int{}
	for _, a := range v.Anomalies() {
		kinds[a.Kind]++
	}
	assert.Positive(t, kinds["token-regression"]+kinds["duplicate-token"], "the issuer's counter went back: %v", kinds)
}

// redis-everysec under power-loss: Redis acknowledges what it fsyncs only
// about once a second, the power loss drops the rest (Redis's own data
// folder, on the lazyfs layer bind-mounted into its container), and the
// issuer hands out old tokens again. (Under restart it is valid: make
// matrix's rows and docs/power-loss.md.)
func TestRunRedisEverysecInvalidUnderPowerLoss(t *testing.T) {
	requireDocker(t)
	lazyfstest.Require(t)
	cfg := harness.Config{Target: "redis-everysec", Time: 8 * time.Second, Concurrency: 4, Keys: 2, Readers: 1,
		Nemesis: "power-loss", Seed: 3, Store: t.TempDir(), CheckTimeout: 30 * time.Second, Log: testLog{t}}
	v := runTarget(t, cfg, EverysecTarget())
	require.Equal(t, checkers.Invalid, v.Verdict, "gate: %v", v.GateReasons)
	assert.Positive(t, v.Run.Nemeses["power-loss"].Started)
	events, err := history.ReadFile(v.Run.HistoryPath)
	require.NoError(t, err)
	lost := 0
	for _, e := range events {
		if e.Process == history.NemesisProcess && e.F == "power-loss" {
			var n int
			if json.Unmarshal(e.Extra["lost_files"], &n) == nil {
				lost += n
			}
		}
	}
	assert.Positive(t, lost, "the power losses dropped AOF data Redis had not fsynced")
}

func runTarget(t *testing.T, cfg harness.Config, target *Target) *harness.Verdict {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	run, err := harness.Execute(ctx, cfg, target)
	require.NoError(t, err)
	v, err := harness.Finish(ctx, run, target.Semantics())
	require.NoError(t, err)
	return v
}

func labelledObjects(t *testing.T, runID string) (containers, networks int) {
	t.Helper()
	ctx := context.Background()
	cli, err := docker.Connect(ctx)
	require.NoError(t, err)
	defer cli.Close()
	f := filters.NewArgs(filters.Arg("label", docker.LabelRun+"="+runID))
	cs, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
	require.NoError(t, err)
	ns, err := cli.NetworkList(ctx, network.ListOptions{Filters: f})
	require.NoError(t, err)
	return len(cs), len(ns)
}
