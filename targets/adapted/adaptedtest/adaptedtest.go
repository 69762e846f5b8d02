// Package adaptedtest lets the Docker tests of adapted targets (postgres,
// mysql) share one running cluster between short fault-injected runs:
// starting a database and two adapters costs more than a run of a few
// seconds, and make check has a time budget. Sharing is honest only if every
// run starts from what a fresh cluster would give it, so Shared checks that
// every node is up and unfaulted and empties the database before each run.
package adaptedtest

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

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/harness"
	"github.com/fencecheck/fencecheck/harness/docker/dockertest"
	"github.com/fencecheck/fencecheck/history"
	"github.com/fencecheck/fencecheck/targets/adapted"
)

// Shared is a started adapted target that several harness runs use in
// turn. Its Start resets the target instead of starting it, and its Stop
// saves the nodes' logs into the run's folder instead of stopping it; Close
// stops it for real. The nemesis capabilities are the target's own.
type Shared struct {
	*adapted.Target
	// Reset empties the system's state (all locks and resources) through
	// a direct connection to the server at addr.
	Reset func(ctx context.Context, addr string) error

	eps harness.Endpoints
	dir string
}

// StartShared starts target once for the whole test (stopped at cleanup,
// after which the test asserts that nothing of it is left).
func StartShared(t *testing.T, target *adapted.Target, reset func(ctx context.Context, addr string) error) *Shared {
	t.Helper()
	dockertest.Require(t)
	if testing.Short() {
		t.Skip("a database, two adapters and fault-injected runs; make check runs them")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	env := harness.Env{RunID: fmt.Sprintf("test-%s-%d", target.Name(), time.Now().UnixNano()%1e9), Dir: t.TempDir(), Log: Log{t}}
	s := &Shared{Target: target, Reset: reset, dir: env.Dir}
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		begin := time.Now()
		assert.NoError(t, target.Stop(stopCtx))
		t.Logf("%s stopped in %.1fs", target.Name(), time.Since(begin).Seconds())
		if t.Failed() {
			logTails(t, filepath.Join(env.Dir, "logs"))
		}
		c, nets := dockertest.Leftovers(t, env.RunID)
		assert.Zero(t, c, "containers left after the test")
		assert.Zero(t, nets, "networks left after the test")
	})
	begin := time.Now()
	eps, err := target.Start(ctx, env)
	require.NoError(t, err)
	t.Logf("%s started in %.1fs", target.Name(), time.Since(begin).Seconds())
	s.eps = eps
	return s
}

// Endpoints are the adapters' endpoints.
func (s *Shared) Endpoints() harness.Endpoints { return s.eps }

// Start implements harness.Target: every node must be running and not
// paused (the previous run's final phase healed it), every adapter healthy,
// and the database empty.
func (s *Shared) Start(ctx context.Context, env harness.Env) (harness.Endpoints, error) {
	s.dir = env.Dir
	for _, n := range s.Nodes() {
		if err := s.ResumeNode(ctx, n.Name); err != nil {
			return harness.Endpoints{}, err
		}
	}
	if err := s.HealPartition(ctx); err != nil {
		return harness.Endpoints{}, err
	}
	for _, n := range s.ClockNodes() {
		if err := s.SetClockOffset(ctx, n, 0); err != nil {
			return harness.Endpoints{}, err
		}
	}
	if err := harness.WaitHealthy(ctx, s.eps, time.Minute); err != nil {
		return harness.Endpoints{}, errors.Join(err, s.CheckRunning(ctx))
	}
	addr, err := s.ServerAddr()
	if err != nil {
		return harness.Endpoints{}, err
	}
	if err := s.Reset(ctx, addr); err != nil {
		return harness.Endpoints{}, fmt.Errorf("resetting %s: %w", s.Name(), err)
	}
	return s.eps, nil
}

// Stop implements harness.Target: the logs so far go to the run's folder;
// the cluster keeps running for the next run.
func (s *Shared) Stop(ctx context.Context) error {
	return s.SaveLogs(ctx, filepath.Join(s.dir, "logs"))
}

// Run is one short run of the shared target under nemesis n, checked.
func (s *Shared) Run(t *testing.T, n string, seed uint64, d time.Duration) *harness.Verdict {
	t.Helper()
	cfg := harness.Config{Target: s.Name(), Time: d, Concurrency: 4, Keys: 2, Readers: 1,
		Nemesis: n, Seed: seed, Store: t.TempDir(), CheckTimeout: 30 * time.Second, Log: Log{t}}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	run, err := harness.Execute(ctx, cfg, s)
	require.NoError(t, err)
	v, err := harness.Finish(ctx, run, s.Semantics())
	require.NoError(t, err)
	return v
}

// RequireValid asserts what a valid run under nemesis n must show: the
// verdict, the fault taking effect and recorded in the history, and for
// clock, a step of the server's own clock.
func (s *Shared) RequireValid(t *testing.T, v *harness.Verdict, n string) {
	t.Helper()
	if !assert.Equal(t, checkers.Valid, v.Verdict, "anomalies: %v; gate: %v", v.Anomalies(), v.GateReasons) {
		logTails(t, filepath.Join(v.Run.Dir, "logs"))
	}
	assert.Positive(t, v.Run.Nemeses[n].Started, "nemesis %s took effect", n)
	events, err := history.ReadFile(v.Run.HistoryPath)
	require.NoError(t, err)
	recorded, onServer := 0, false
	server := s.Nodes()[0].Name
	for _, e := range events {
		if e.Process == history.NemesisProcess && e.F == n {
			recorded++
			onServer = onServer || slices.Contains(strings.Split(e.Node, ","), server)
		}
	}
	assert.Positive(t, recorded, "nemesis %s recorded in the history", n)
	if n == "clock" {
		assert.True(t, onServer, "the clock nemesis stepped %s's clock", server)
	}
}

// logTails shows the end of every node log in dir, for a failed test
// (its folders are removed with it).
func logTails(t *testing.T, dir string) {
	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	for _, l := range logs {
		b, err := os.ReadFile(l)
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		if len(lines) > 40 {
			lines = lines[len(lines)-40:]
		}
		t.Logf("last lines of %s:\n%s", filepath.Base(l), strings.Join(lines, "\n"))
	}
}

// Log forwards progress lines to the test log.
type Log struct{ T *testing.T }

func (w Log) Write(p []byte) (int, error) {
	w.T.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
