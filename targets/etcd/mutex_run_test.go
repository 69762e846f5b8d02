package etcd

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/harness"
	"github.com/fencecheck/fencecheck/harness/docker/dockertest"
	"github.com/fencecheck/fencecheck/history"
)

// sharedCluster lets one started cluster serve several runs. Each run after
// the first starts from an empty key space under the adapters' prefix, as
// the checker assumes: the previous run's keys are deleted, every member
// must be healthy again (the previous run's final phase healed its faults)
// and every adapter must answer. The members carry on, revisions included.
type sharedCluster struct {
	*Target
	eps harness.Endpoints
	// dir is the current run's folder ("" once closed).
	dir string
}

func (s *sharedCluster) Start(ctx context.Context, env harness.Env) (harness.Endpoints, error) {
	s.dir = env.Dir
	if s.eps.Issuers == nil {
		eps, err := s.Target.Start(ctx, env)
		s.eps = eps
		return eps, err
	}
	var urls []string
	for _, n := range s.members {
		if err := waitEtcdHealthy(ctx, s.memberURL(n), 60*time.Second); err != nil {
			return harness.Endpoints{}, fmt.Errorf("member %s: %w", n, err)
		}
		urls = append(urls, s.memberURL(n))
	}
	cli, err := hostClient(urls)
	if err != nil {
		return harness.Endpoints{}, err
	}
	defer cli.Close()
	if err := retryFor(ctx, 30*time.Second, func(ctx context.Context) error {
		_, err := cli.Delete(ctx, "/fence/", clientv3.WithPrefix())
		return err
	}); err != nil {
		return harness.Endpoints{}, fmt.Errorf("emptying the key space: %w", err)
	}
	return s.eps, harness.WaitHealthy(ctx, s.eps, 30*time.Second)
}

// Stop keeps the cluster; it saves the nodes' logs into the run's folder.
func (s *sharedCluster) Stop(ctx context.Context) error {
	if s.dir == "" {
		return nil
	}
	return s.SaveLogs(ctx, filepath.Join(s.dir, "logs"))
}

// close stops the cluster for good (the runs kept their logs).
func (s *sharedCluster) close(ctx context.Context) error {
	s.dir = ""
	return s.Target.Stop(ctx)
}

// A short `fencecheck test --target etcd-mutex` per nemesis, all on one
// cluster: the issuer through etcd's own client lock, fenced by the
// resource's check, is valid under each, the fault is in the history, and
// nothing is left behind.
func TestMutexRunValidUnderEachNemesis(t *testing.T) {
	dockertest.Require(t)
	if testing.Short() {
		t.Skip("six fault-injected runs of 8 s; make check runs them")
	}
	ctx := context.Background()
	target := &sharedCluster{Target: New(Options{Mutex: true, Log: logWriter{t}}).(*Target)}
	var runID string
	defer func() {
		require.NoError(t, target.close(ctx))
		c, nets := dockertest.Leftovers(t, runID)
		assert.Zero(t, c, "containers left after the runs")
		assert.Zero(t, nets, "networks left after the runs")
		if root := filepath.Dir(target.Folder("etcd-1")); root != "." {
			_, err := os.Stat(root)
			assert.True(t, os.IsNotExist(err), "the members' data is removed: %v", err)
		}
	}()
	for i, n := range []string{"pause", "restart", "partition", "clock", "strip", "delay"} {
		t.Run(n, func(t *testing.T) {
			cfg := harness.Config{Target: "etcd-mutex", Time: 8 * time.Second, Concurrency: 4, Keys: 2, Readers: 1,
				Nemesis: n, Seed: uint64(17 + i), Store: t.TempDir(), CheckTimeout: 30 * time.Second, Log: logWriter{t}}
			run, err := harness.Execute(ctx, cfg, target)
			require.NoError(t, err)
			if runID == "" {
				runID = target.Env().RunID
			}
			v, err := harness.Finish(ctx, run, target.Semantics())
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
		})
	}
}
