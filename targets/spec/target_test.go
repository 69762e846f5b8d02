package spec

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/fencing"
	"github.com/fencecheck/fencecheck/harness"
	"github.com/fencecheck/fencecheck/harness/ports"
	"github.com/fencecheck/fencecheck/nemesis"
)

// pythonSpec is the example's spec with extra arguments (bug switches) and
// the clock opt-in switched as asked (without it, the node opts out of clock
// faults). The example is the real thing: a host process in another
// language.
func pythonSpec(t *testing.T, clock bool, args ...string) *Spec {
	t.Helper()
	s, err := Load("../../examples/python-fence/spec.json")
	require.NoError(t, err)
	s.Nodes[0].Command = append(s.Nodes[0].Command, args...)
	if !clock {
		s.Nodes[0].Clock = ClockNone
	}
	return s
}

func startTarget(t *testing.T, s *Spec, opts Options) (harness.Target, harness.Endpoints, string) {
	t.Helper()
	dir := t.TempDir()
	var log bytes.Buffer
	if opts.Log == nil {
		opts.Log = &log
	}
	tg := New(s, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	eps, err := tg.Start(ctx, harness.Env{RunID: "spec-test", Dir: dir})
	t.Cleanup(func() { require.NoError(t, tg.Stop(context.Background())) })
	require.NoError(t, err, "log: %s", log.String())
	return tg, eps, dir
}

func client(eps harness.Endpoints) *fencing.Client {
	return fencing.NewClient(eps.Resources[0].URL, nil)
}

func opCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestHostProcessStartsWithPreflightAndLogs(t *testing.T) {
	tg, eps, dir := startTarget(t, pythonSpec(t, true), Options{})
	require.Len(t, eps.Issuers, 1)
	require.Len(t, eps.Resources, 1)
	assert.Equal(t, "n1", eps.Issuers[0].Node)
	assert.True(t, strings.HasPrefix(eps.Issuers[0].URL, "http://127.0.0.1:"))
	rep := tg.(*Target).PreflightReport()
	require.NotNil(t, rep)
	assert.True(t, rep.Conformant(), "%v", rep.Deviations)
	assert.Equal(t, []nemesis.Node{{Name: "n1", Role: "issuer+resource"}}, tg.(nemesis.Cluster).Nodes())

	log, err := os.ReadFile(filepath.Join(dir, "logs", "n1.log"))
	require.NoError(t, err)
	assert.Contains(t, string(log), "python-fence listening on 127.0.0.1:")
	// {data} is a folder of the run that survives restarts.
	assert.Contains(t, string(log), filepath.Join(dir, "nodes", "n1", "data"))
}

func TestRestartKeepsDataAndWipeEmptiesIt(t *testing.T) {
	tg, eps, _ := startTarget(t, pythonSpec(t, false), Options{NoPreflight: true})
	c := client(eps)
	r := c.Acquire(opCtx(t, 2*time.Second), "k", "a", time.Second)
	require.Equal(t, fencing.Ok, r.Outcome, "%+v", r)
	tok := r.Token
	require.Equal(t, fencing.Ok, c.Write(opCtx(t, 2*time.Second), "k", tok, []byte("v1")).Outcome)

	rs := tg.(nemesis.Restarter)
	require.NoError(t, rs.KillNode(context.Background(), "n1"))
	assert.Equal(t, fencing.Fail, c.Read(opCtx(t, 2*time.Second), "k").Outcome, "a killed node refuses connections")
	require.NoError(t, rs.StartNode(context.Background(), "n1", false))
	rd := c.Read(opCtx(t, 2*time.Second), "k")
	require.Equal(t, fencing.Ok, rd.Outcome)
	assert.Equal(t, "v1", string(rd.Value), "the data dir survives kill -9")
	// The counter too: the next token is newer.
	r2 := c.Acquire(opCtx(t, 2*time.Second), "k2", "b", time.Second)
	require.Equal(t, fencing.Ok, r2.Outcome)

	require.NoError(t, rs.KillNode(context.Background(), "n1"))
	require.NoError(t, rs.StartNode(context.Background(), "n1", true))
	rd = c.Read(opCtx(t, 2*time.Second), "k")
	require.Equal(t, fencing.Ok, rd.Outcome)
	assert.False(t, rd.Found, "restart-wipe starts from an empty data dir")

	// A start retried on a node that runs (the final heal after a start that
	// got it running and then failed) waits for it and keeps it: the data
	// written since is still there, so it was not killed again.
	require.Equal(t, fencing.Ok, c.Write(opCtx(t, 2*time.Second), "k", r2.Token, []byte("v2")).Outcome)
	require.NoError(t, rs.StartNode(context.Background(), "n1", true), "a running node is only waited for")
	rd = c.Read(opCtx(t, 2*time.Second), "k")
	require.Equal(t, fencing.Ok, rd.Outcome)
	assert.Equal(t, "v2", string(rd.Value), "not wiped, not restarted")
}

func TestPauseStopsTheProcessGroup(t *testing.T) {
	tg, eps, _ := startTarget(t, pythonSpec(t, false), Options{NoPreflight: true})
	c := client(eps)
	pz := tg.(nemesis.Pauser)
	require.NoError(t, pz.PauseNode(context.Background(), "n1"))
	r := c.Read(opCtx(t, 300*time.Millisecond), "k")
	assert.Equal(t, fencing.Info, r.Outcome, "a frozen node does not answer: %+v", r)
	assert.Equal(t, fencing.ErrWordTimeout, r.Error)
	require.NoError(t, pz.ResumeNode(context.Background(), "n1"))
	r = c.Read(opCtx(t, 2*time.Second), "k")
	assert.Equal(t, fencing.Ok, r.Outcome, "%+v", r)
}

func TestClockOffsetFileForNodesThatOptIn(t *testing.T) {
	tg, _, dir := startTarget(t, pythonSpec(t, true), Options{NoPreflight: true})
	cs := tg.(nemesis.ClockSkewer)
	assert.Equal(t, []string{"n1"}, cs.ClockNodes())
	file := filepath.Join(dir, "nodes", "n1", "clock", "offset")
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	assert.Equal(t, "0\n", string(b))
	require.NoError(t, cs.SetClockOffset(context.Background(), "n1", -90*time.Second))
	b, err = os.ReadFile(file)
	require.NoError(t, err)
	assert.Equal(t, strconv.FormatInt(int64(-90*time.Second), 10)+"\n", string(b))

	// The program was told where the file is.
	pid := tg.(*Target).PID("n1")
	env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	require.NoError(t, err)
	assert.Contains(t, string(env), ClockFileEnv+"="+file+"\x00")
	assert.Contains(t, string(env), "FENCECHECK_NODE=n1\x00")

	// The example reads the file: a lease of a minute is over once its
	// clock jumps two minutes ahead.
	require.NoError(t, cs.SetClockOffset(context.Background(), "n1", 0))
	c := fencing.NewClient(tg.(*Target).Endpoints().Issuers[0].URL, nil)
	require.Equal(t, fencing.Ok, c.Acquire(opCtx(t, 2*time.Second), "lease", "a", time.Minute).Outcome)
	require.Equal(t, fencing.Fail, c.Acquire(opCtx(t, 2*time.Second), "lease", "b", time.Minute).Outcome)
	require.NoError(t, cs.SetClockOffset(context.Background(), "n1", 2*time.Minute))
	require.Eventually(t, func() bool {
		return c.Acquire(opCtx(t, 2*time.Second), "lease", "b", time.Minute).Outcome == fencing.Ok
	}, 2*time.Second, 20*time.Millisecond)

	tg2, _, _ := startTarget(t, pythonSpec(t, false), Options{NoPreflight: true})
	assert.Empty(t, tg2.(nemesis.ClockSkewer).ClockNodes(), "opted out, no clock faults")
	assert.Error(t, tg2.(nemesis.ClockSkewer).SetClockOffset(context.Background(), "n1", time.Second))
}

// A system that breaks the contract does not start: the run stops with
// "could not run" and the error lists the deviations in words.
func TestPreflightFailureStopsStart(t *testing.T) {
	tg := New(pythonSpec(t, false, "--bug", "accept-equal"), Options{Log: &bytes.Buffer{}})
	_, err := tg.Start(context.Background(), harness.Env{RunID: "spec-test", Dir: t.TempDir()})
	defer tg.Stop(context.Background())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "conformance preflight")
	assert.Contains(t, err.Error(), "[write-equal-token] n1")
}

func TestNodeThatDiesAtStartShowsItsLog(t *testing.T) {
	s, err := Parse([]byte(`{"name":"broken","nodes":[{"name":"n1","roles":["issuer","resource"],
		"command":["python3","-c","import sys; print('cannot bind {port}'); sys.exit(3)"]}]}`))
	require.NoError(t, err)
	tg := New(s, Options{})
	_, err = tg.Start(context.Background(), harness.Env{RunID: "spec-test", Dir: t.TempDir()})
	defer tg.Stop(context.Background())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "node n1 exited before it answered GET /v1/health (exit status 3)")
	assert.Contains(t, err.Error(), "cannot bind")
}

// A url node is someone else's process: fencecheck neither pauses nor
// restarts it, and says so through the nemeses' applicability.
func TestURLNode(t *testing.T) {
	port, err := ports.Stable()
	require.NoError(t, err)
	cmd := exec.Command("python3", "../../examples/python-fence/fence.py", "--port", strconv.Itoa(port), "--data", t.TempDir())
	require.NoError(t, cmd.Start())
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	url := "http://127.0.0.1:" + strconv.Itoa(port)
	s, err := Parse([]byte(`{"name":"running","start_timeout":"10s","nodes":[{"name":"svc","roles":["issuer","resource"],"url":"` + url + `/"}]}`))
	require.NoError(t, err)
	tg, eps, _ := startTarget(t, s, Options{})
	assert.Equal(t, url, eps.Issuers[0].URL)
	assert.True(t, tg.(*Target).PreflightReport().Conformant())
	assert.Empty(t, tg.(nemesis.Cluster).Nodes())
	assert.Empty(t, tg.(nemesis.ClockSkewer).ClockNodes())
	env := &nemesis.Env{Target: tg}
	sel := nemesis.Select([]string{"restart", "clock"}, env)
	assert.Contains(t, sel.NotApplicable["restart"], "no node fencecheck runs (a node it does not start, such as a spec's url node")
	assert.NotContains(t, sel.NotApplicable["restart"], "lists no nodes", "the spec lists one")
	assert.Contains(t, sel.NotApplicable, "clock")
	assert.Error(t, tg.(nemesis.Pauser).PauseNode(context.Background(), "svc"))
}

func TestImageNodesArePartitionable(t *testing.T) {
	s, err := Parse([]byte(`{"name":"c","nodes":[
		{"name":"a","roles":["issuer","resource"],"image":"x","port":1},
		{"name":"b","roles":["issuer","resource"],"image":"x","port":1}]}`))
	require.NoError(t, err)
	assert.Equal(t, []string{"a", "b"}, New(s, Options{}).(nemesis.Partitioner).PartitionNodes())
	assert.Empty(t, New(pythonSpec(t, false), Options{}).(nemesis.Partitioner).PartitionNodes(),
		"host processes are cut by the harness's proxies, never by this machine's firewall")
}

// A program that exits with status 0 before it answers says so, not
// "<nil>".
func TestNodeThatExitsCleanlyAtStartShowsItsStatus(t *testing.T) {
	s, err := Parse([]byte(`{"name":"quits","nodes":[{"name":"n1","roles":["issuer","resource"],
		"command":["python3","-c","print('nothing to do on {port}')"]}]}`))
	require.NoError(t, err)
	tg := New(s, Options{})
	_, err = tg.Start(context.Background(), harness.Env{RunID: "spec-test", Dir: t.TempDir()})
	defer tg.Stop(context.Background())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "node n1 exited before it answered GET /v1/health (exit status 0)")
	assert.NotContains(t, err.Error(), "<nil>")
}
