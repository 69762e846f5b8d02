package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/harness"
	"github.com/fencecheck/fencecheck/harness/docker/dockertest"
	"github.com/fencecheck/fencecheck/history"
)

// shared lets one started ensemble serve several runs (starting three JVMs
// is most of a short run's cost). Each run after the first starts from an
// empty namespace, as the checker assumes: the previous run's znodes are
// deleted, every server must serve again (the previous run's final phase
// healed its faults) and every adapter must be healthy. The servers carry
// on, zxids included; the adapters recreate the paths they need.
type shared struct {
	*Target
	eps harness.Endpoints
	// dir is the current run's folder ("" once closed).
	dir string
}

func (s *shared) Start(ctx context.Context, env harness.Env) (harness.Endpoints, error) {
	s.dir = env.Dir
	if s.eps.Issuers == nil {
		eps, err := s.Target.Start(ctx, env)
		s.eps = eps
		return eps, err
	}
	for _, n := range s.servers {
		if err := s.waitServing(ctx, n, 60*time.Second); err != nil {
			return harness.Endpoints{}, fmt.Errorf("server %s: %w", n, err)
		}
	}
	if err := s.deleteTree(ctx, "/fence"); err != nil {
		return harness.Endpoints{}, err
	}
	return s.eps, harness.WaitHealthy(ctx, s.eps, 30*time.Second)
}

// Stop keeps the ensemble; it saves the nodes' logs into the run's folder.
func (s *shared) Stop(ctx context.Context) error {
	if s.dir == "" {
		return nil
	}
	return s.SaveLogs(ctx, filepath.Join(s.dir, "logs"))
}

// close stops the ensemble for good (the runs kept their logs).
func (s *shared) close(ctx context.Context) error {
	s.dir = ""
	return s.Target.Stop(ctx)
}

// deleteTree removes p and everything under it, through the servers'
// published ports.
func (s *shared) deleteTree(ctx context.Context, p string) error {
	var addrs []string
	for _, n := range s.servers {
		a, err := s.ServerAddr(n)
		if err != nil {
			return err
		}
		addrs = append(addrs, a)
	}
	conn, _, err := zk.Connect(addrs, 4*time.Second, zk.WithLogInfo(false))
	if err != nil {
		return err
	}
	defer conn.Close()
	var del func(p string) error
	del = func(p string) error {
		children, _, err := conn.Children(p)
		if errors.Is(err, zk.ErrNoNode) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("listing %s: %w", p, err)
		}
		for _, c := range children {
			if err := del(p + "/" + c); err != nil {
				return err
			}
		}
		if err := conn.Delete(p, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
			return fmt.Errorf("deleting %s: %w", p, err)
		}
		return nil
	}
	return del(p)
}

// A short `fencecheck test --target zookeeper` per nemesis, the nemesis
// named (so the gate turns the verdict to unknown if it never took effect),
// all on one ensemble: the ZooKeeper fencing implementation is valid under
// each, the fault is in the history, and nothing is left behind.
func TestRunValidUnderEachNemesis(t *testing.T) {
	dockertest.Require(t)
	if testing.Short() {
		t.Skip("seven fault-injected runs of 8 s; make check runs them")
	}
	ctx := context.Background()
	target := &shared{Target: New(Options{Log: logWriter{t}})}
	var runID string
	defer func() {
		require.NoError(t, target.close(ctx))
		c, nets := dockertest.Leftovers(t, runID)
		assert.Zero(t, c, "containers left after the runs")
		assert.Zero(t, nets, "networks left after the runs")
		if root := filepath.Dir(target.Folder("zk-1")); root != "." {
			_, err := os.Stat(root)
			assert.True(t, os.IsNotExist(err), "the servers' folders are removed: %v", err)
		}
	}()
	for i, n := range []string{"pause", "restart", "partition", "clock", "strip", "delay", "member-replace"} {
		t.Run(n, func(t *testing.T) {
			cfg := harness.Config{Target: "zookeeper", Time: 8 * time.Second, Concurrency: 4, Keys: 2, Readers: 1,
				Nemesis: n, Seed: uint64(7 + i), Store: t.TempDir(), CheckTimeout: 30 * time.Second, Log: logWriter{t}}
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
			recorded, onServer := 0, false
			for _, e := range events {
				if e.Process == history.NemesisProcess && e.F == n {
					recorded++
					onServer = onServer || slices.ContainsFunc(strings.Split(e.Node, ","), func(s string) bool { return strings.HasPrefix(s, "zk-") })
				}
			}
			assert.Positive(t, recorded, "nemesis %s recorded in the history", n)
			if n == "member-replace" {
				// The heal left the ensemble whole: every server lists
				// every member.
				for _, s := range target.servers {
					assert.Len(t, viewOf(t, target.Target, s).servers, len(target.servers), "%s's membership after the run", s)
				}
			}
			if n == "clock" {
				assert.True(t, onServer, "the clock nemesis stepped a server's clock")
			}
		})
	}
}
