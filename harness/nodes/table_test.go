package nodes_test

import (
	"context"
	"os"
	"os/exec"
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
	"github.com/fencecheck/fencecheck/harness/nodes"
	"github.com/fencecheck/fencecheck/history"
	"github.com/fencecheck/fencecheck/nemesis"
	"github.com/fencecheck/fencecheck/nemesis/lazyfs/lazyfstest"
)

// requireTool finds a program the test needs: missing it is a failure in CI
// (the CI script installs it) and a skip on a developer's machine.
func requireTool(t *testing.T, name, pkg string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err == nil {
		return path
	}
	if dockertest.Required() {
		t.Fatalf("%s not found: CI must install it (apt-get install -y %s)", name, pkg)
	}
	t.Skipf("%s not found; install it with: apt-get install -y %s", name, pkg)
	return ""
}

// fenced builds the project's adapter for this machine.
func fenced(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "fenced")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/fencecheck/fencecheck/cmd/fenced").CombinedOutput()
	require.NoError(t, err, "%s", out)
	return bin
}

// redisTable is a whole target as data: Debian's Redis (fsync before every
// answer) as a data node on this machine and two of the project's
// adapters in front of it, stateless, each started once Redis answers.
func redisTable(redis, fenced string) []nodes.Node {
	adapter := func(name string) nodes.Node {
		return nodes.Node{Name: name, Role: "adapter", Issuer: true, Resource: true, Stateless: true,
			Ports: []nodes.Port{{}}, WaitFor: []string{"redis-1"},
			Clock:   nodes.Clock{Via: nodes.ClockFile, Aside: "the Redis store reads no adapter clock"},
			Process: &nodes.Process{Argv: []string{fenced, "--addr", "127.0.0.1:{port}", "--backend", "redis", "--redis-addr", "{addr:redis-1}"}}}
	}
	return []nodes.Node{
		// As targets/redis declares it: Redis refuses to start on an AOF
		// with holes, which a partial crash state can leave (make check:
		// "Bad file format reading the append only file").
		{Name: "redis-1", Role: "redis", Ports: []nodes.Port{{}}, Data: nodes.Data{LoseAllOnly: "Redis refuses to start on an AOF with holes"},
			Clock:  nodes.Clock{Via: nodes.ClockProcesses, Preload: true},
			Health: nodes.Health{Probe: nodes.Probe{TCP: true}},
			Process: &nodes.Process{Argv: []string{redis, "--bind", "127.0.0.1", "--port", "{port}", "--dir", "{data}",
				"--save", "", "--appendonly", "yes", "--appendfsync", "always"}}},
		adapter("adapter-1"), adapter("adapter-2"),
	}
}

// A new target is a table: nothing but the rows above (no code of its own)
// is started, faulted where it holds state, healed, checked valid, and
// torn down.
func TestATargetIsATable(t *testing.T) {
	if testing.Short() {
		t.Skip("a fault-injected run of 8 s; make check runs it")
	}
	redis := requireTool(t, "redis-server", "redis-server")
	lazyfstest.Require(t)
	c, err := nodes.New("redis-on-this-machine", checkers.DefaultSemantics(), redisTable(redis, fenced(t)), nodes.Options{})
	require.NoError(t, err)
	assert.Equal(t, []nemesis.Node{{Name: "redis-1", Role: "redis"},
		{Name: "adapter-1", Role: "adapter", Stateless: true}, {Name: "adapter-2", Role: "adapter", Stateless: true}}, c.Nodes())
	assert.Empty(t, c.PartitionNodes(), "host processes are cut by the proxies, never by this machine's firewall")

	cfg := harness.Config{Target: c.Name(), Time: 8 * time.Second, Concurrency: 4, Keys: 2, Readers: 1,
		Nemesis: "restart,power-loss", Seed: 3, Store: t.TempDir(), CheckTimeout: 30 * time.Second}
	ctx := context.Background()
	run, err := harness.Execute(ctx, cfg, c)
	require.NoError(t, err)
	v, err := harness.Finish(ctx, run, c.Semantics())
	require.NoError(t, err)
	assert.Equal(t, checkers.Valid, v.Verdict, "anomalies: %v; gate: %v", v.Anomalies(), v.GateReasons)
	assert.Equal(t, []string{"redis-1"}, c.PowerNodes(), "only the node that holds state is on the layer")
	for _, n := range []string{"restart", "power-loss"} {
		assert.Positive(t, run.Nemeses[n].Started, "nemesis %s took effect", n)
	}
	events, err := history.ReadFile(run.HistoryPath)
	require.NoError(t, err)
	lost := 0
	for _, e := range events {
		if e.Process == history.NemesisProcess && e.F == "power-loss" && string(e.Extra["action"]) == `"start"` {
			lost++
			assert.Equal(t, "redis-1", e.Node, "a power loss hits the node that holds state")
		}
	}
	assert.Positive(t, lost)
	assert.Error(t, c.CheckRunning(ctx), "Stop stopped every program")
	for _, n := range []string{"redis-1", "adapter-1"} {
		assert.FileExists(t, filepath.Join(run.Dir, "logs", n+".log"))
	}
}

// The one validation of partition groups: every node known and allowed,
// each in one group.
func TestCheckGroups(t *testing.T) {
	allow := func(n string) error {
		if !slices.Contains([]string{"a", "b", "c"}, n) {
			return assert.AnError
		}
		return nil
	}
	group, err := nodes.CheckGroups([][]string{{"a"}, {"b", "c"}}, allow)
	require.NoError(t, err)
	assert.Equal(t, map[string]int{"a": 0, "b": 1, "c": 1}, group)
	_, err = nodes.CheckGroups([][]string{{"a", "b"}, {"b"}}, allow)
	assert.ErrorContains(t, err, "node b is in two partition groups")
	_, err = nodes.CheckGroups([][]string{{"a"}, {"z"}}, allow)
	assert.ErrorIs(t, err, assert.AnError)
}

// A table that cannot run is refused with every reason.
func TestATableIsValidated(t *testing.T) {
	_, err := nodes.New("bad", checkers.DefaultSemantics(), []nodes.Node{
		{Name: "a", Issuer: true, Process: &nodes.Process{Argv: []string{"x"}}},
		{Name: "a", URL: "http://h:1", Container: &nodes.Container{Image: "x"}},
		{Name: "c", WaitFor: []string{"zz"}, Container: &nodes.Container{}, Ports: []nodes.Port{{Name: "p"}}},
	}, nodes.Options{})
	require.Error(t, err)
	for _, want := range []string{
		"node a serves the Fencing API but has no main port",
		"node a is listed twice",
		"node a must be exactly one of in-process, process, container, ssh or url",
		`node c: port "p" needs its number inside the container`,
		"node c: a container needs an image to build or a tag",
		"node c waits for zz, which is not a node",
	} {
		assert.True(t, strings.Contains(err.Error(), want), "%q in %v", want, err)
	}
}

// A node's data files name the other nodes as they reach each other (a
// ZooKeeper server's zoo.cfg): the placeholders are filled when the folder
// is made and again after a wipe.
func TestDataFilesNameTheNodes(t *testing.T) {
	sleep := requireTool(t, "sleep", "coreutils")
	up := nodes.Health{Probe: nodes.Probe{Func: func(context.Context, string) error { return nil }}}
	node := func(name, peer string) nodes.Node {
		return nodes.Node{Name: name, Ports: []nodes.Port{{}, {Name: "peer"}}, Health: up,
			Data:    nodes.Data{Files: map[string]string{"cfg": "me={name} peer={addr:" + peer + ":peer} run={run}\n"}},
			Process: &nodes.Process{Argv: []string{sleep, "60"}}}
	}
	c, err := nodes.New("files", checkers.DefaultSemantics(), []nodes.Node{node("a", "b"), node("b", "a")}, nodes.Options{})
	require.NoError(t, err)
	ctx := context.Background()
	env := harness.Env{RunID: "files-run", Dir: t.TempDir()}
	_, err = c.Start(ctx, env)
	require.NoError(t, err)
	defer c.Stop(ctx)
	peer, err := c.NetAddr("b", "peer")
	require.NoError(t, err)
	want := "me=a peer=" + peer + " run=files-run\n"
	cfg := filepath.Join(c.Folder("a"), "data", "cfg")
	got, err := os.ReadFile(cfg)
	require.NoError(t, err)
	assert.Equal(t, want, string(got))
	require.NoError(t, os.WriteFile(cfg, []byte("changed by the node\n"), 0o644))
	require.NoError(t, c.KillNode(ctx, "a"))
	require.NoError(t, c.StartNode(ctx, "a", true))
	got, err = os.ReadFile(cfg)
	require.NoError(t, err)
	assert.Equal(t, want, string(got), "written again by the wipe")
}
