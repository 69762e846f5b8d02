package etcd

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/harness"
	"github.com/fencecheck/fencecheck/harness/docker"
	"github.com/fencecheck/fencecheck/harness/docker/dockertest"
	"github.com/fencecheck/fencecheck/history"
)

// shared runs harness runs on a cluster that is already up: each run starts
// on an empty keyspace (the keys of the run before are deleted; tokens are
// revisions and keep growing), and Stop leaves the cluster to the test.
type shared struct {
	*Target
	eps harness.Endpoints
}

func (s shared) Start(ctx context.Context, _ harness.Env) (harness.Endpoints, error) {
	var urls []string
	for _, m := range s.members {
		urls = append(urls, s.memberURL(m))
	}
	cli, err := hostClient(urls)
	if err != nil {
		return harness.Endpoints{}, err
	}
	defer cli.Close()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := cli.Delete(cctx, "", clientv3.WithPrefix()); err != nil {
		return harness.Endpoints{}, fmt.Errorf("clearing the keyspace: %w", err)
	}
	return s.eps, nil
}

func (s shared) Stop(context.Context) error { return nil }

// The etcd target as behind Docker Desktop, a rootless engine or a remote
// DOCKER_HOST: the engine is reached through a TCP proxy on loopback and
// the host path is off, so every container fault goes through the engine's
// API (partitions and clocks by helper containers; pauses and restarts go
// through the API on every engine, and TestRunValidUnderEachNemesis runs
// them). One cluster serves everything: each fault measured from the other
// side, then a short run under each fault the API path changes, each valid
// with every fault it tried applied.
func TestClusterThroughEngineAPI(t *testing.T) {
	dockertest.Require(t)
	if testing.Short() {
		t.Skip("a cluster and two fault-injected runs; make check runs them")
	}
	remote := dockertest.UseRemote(t)
	ctx := context.Background()
	tg := New(Options{Log: logWriter{t}}).(*Target)
	env := harness.Env{RunID: fmt.Sprintf("test-etcd-api-%d", time.Now().UnixNano()%1e9), Dir: t.TempDir(), Log: logWriter{t}}
	eps, err := tg.Start(ctx, env)
	require.NoError(t, err)
	stopped := false
	defer func() {
		if !stopped {
			tg.Stop(ctx)
		}
	}()
	assert.Equal(t, []string{"etcd-1", "etcd-2", "etcd-3", "adapter-1", "adapter-2"}, tg.ClockNodes(),
		"every clock is reachable through a helper")
	rt := tg.Runtime()

	t.Run("partition: the isolated leader loses its leadership", func(t *testing.T) {
		leader, err := tg.Leader(ctx)
		require.NoError(t, err)
		var rest []string
		for _, n := range tg.members {
			if n != leader {
				rest = append(rest, n)
			}
		}
		require.NoError(t, tg.Partition(ctx, [][]string{{leader}, rest}))
		assert.Equal(t, docker.PathAPI, rt.FaultPath("partition"))
		// The members cannot reach it: they elect another leader, and it
		// steps down (check-quorum), since it cannot reach them either.
		require.Eventually(t, func() bool {
			l, err := tg.Leader(ctx)
			return err == nil && l != leader
		}, 20*time.Second, 250*time.Millisecond, "the majority must elect a new leader")
		require.Eventually(t, func() bool {
			id, lead, err := tg.memberStatus(ctx, leader)
			return err == nil && lead != id
		}, 20*time.Second, 250*time.Millisecond, "the isolated leader must lose leadership")
		require.NoError(t, tg.HealPartition(ctx))
		require.NoError(t, waitEtcdHealthy(ctx, tg.memberURL(leader), 20*time.Second))
	})

	t.Run("clock: a member's own clock", func(t *testing.T) {
		dateSkew := func(name string) float64 {
			before := time.Now()
			resp, err := http.Get(tg.memberURL(name) + "/version")
			require.NoError(t, err)
			resp.Body.Close()
			date, err := http.ParseTime(resp.Header.Get("Date"))
			require.NoError(t, err)
			return date.Sub(before.Truncate(time.Second)).Seconds()
		}
		require.NoError(t, tg.SetClockOffset(ctx, "etcd-2", 90*time.Second))
		assert.Equal(t, docker.PathAPI, rt.FaultPath("clock"))
		assert.InDelta(t, 90, dateSkew("etcd-2"), 1.1, "etcd-2's own clock")
		assert.InDelta(t, 0, dateSkew("etcd-1"), 1.1, "the others are untouched")
		require.NoError(t, tg.SetClockOffset(ctx, "etcd-2", 0))
		assert.InDelta(t, 0, dateSkew("etcd-2"), 1.1, "healed")
	})

	for i, n := range []string{"partition", "clock"} {
		t.Run("run under "+n, func(t *testing.T) {
			cfg := harness.Config{Target: "etcd", Time: 7 * time.Second, Concurrency: 4, Keys: 2, Readers: 1,
				Nemesis: n, Seed: uint64(13 + i), Store: t.TempDir(), CheckTimeout: 30 * time.Second, Log: logWriter{t}}
			target := shared{Target: tg, eps: eps}
			run, err := harness.Execute(ctx, cfg, target)
			require.NoError(t, err)
			v, err := harness.Finish(ctx, run, target.Semantics())
			require.NoError(t, err)
			assert.Equal(t, checkers.Valid, v.Verdict, "anomalies: %v; gate: %v", v.Anomalies(), v.GateReasons)
			assert.Zero(t, v.Nemeses[n].Failed, "no %s fault failed to apply, as the history says", n)
			c := run.Nemeses[n]
			require.NotNil(t, c)
			assert.Positive(t, c.Started, "nemesis %s took effect", n)
			assert.Zero(t, c.Failed, "every %s fault applied (last error: %s)", n, c.Error)
			if n == "partition" {
				cuts := 0
				for mode, mc := range c.Modes {
					if !strings.HasPrefix(mode, "clients-") {
						cuts += mc.Started
					}
				}
				assert.Positive(t, cuts, "cuts between the containers (not only client black-holes): %v", c.Modes)
			}
			events, err := history.ReadFile(run.HistoryPath)
			require.NoError(t, err)
			for _, e := range events {
				if e.Process == history.NemesisProcess && e.F == n {
					assert.NotEqual(t, `"error"`, string(e.Extra["action"]), "%s", e.Extra)
				}
			}
		})
	}

	require.NoError(t, tg.Stop(ctx))
	stopped = true
	c, nets := dockertest.Leftovers(t, env.RunID)
	assert.Zero(t, c, "containers left after Stop, helpers included")
	assert.Zero(t, nets, "networks left after Stop")
	assert.Positive(t, remote.Conns(), "the engine was reached through the proxy")
}
