package spec

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/harness"
	"github.com/fencecheck/fencecheck/harness/docker/dockertest"
	"github.com/fencecheck/fencecheck/history"
	"github.com/fencecheck/fencecheck/nemesis"
	"github.com/fencecheck/fencecheck/nemesis/lazyfs/lazyfstest"
)

// The new node fields each say what is wrong, where.
func TestDataNodesPortsAndProbesAreValidated(t *testing.T) {
	api := `{"name":"a","roles":["issuer","resource"],"command":["srv","{port}"]}`
	cases := []struct {
		name string
		node string
		want string
	}{
		{"data with a role", `{"name":"d","roles":["data","issuer"],"command":["db"]}`, `nodes[1].roles: "data" is a node that serves no Fencing API`},
		{"image data node without a port", `{"name":"d","roles":["data"],"image":"db"}`, "nodes[1].port: missing"},
		{"numbered ports on a command node", `{"name":"d","roles":["data"],"command":["db"],"ports":{"peer":2380}}`, "nodes[1].ports.peer: a command node's ports are picked by the harness"},
		{"named ports on an image node", `{"name":"d","roles":["data"],"image":"db","port":1,"ports":["peer"]}`, "nodes[1].ports.peer: an image node gives each port its number inside the container"},
		{"bad port name", `{"name":"d","roles":["data"],"command":["db"],"ports":["Peer"]}`, `nodes[1].ports: port name "Peer" must match`},
		{"unknown named port", `{"name":"d","roles":["data"],"command":["db","{port:peer}"]}`, "nodes[1].command[1]: {port:peer} names no port of the node"},
		{"unknown port of a peer", `{"name":"d","roles":["data"],"command":["db","{addr:a:admin}"]}`, `{addr:a:admin}: node a has no port "admin"`},
		{"two questions", `{"name":"d","roles":["data"],"command":["db"],"health":{"tcp":true,"http":"/h"}}`, `nodes[1].health: give one of "http" (a path), "tcp": true or "command"`},
		{"health on an unknown port", `{"name":"d","roles":["data"],"command":["db"],"health":{"tcp":true,"port":"x"}}`, "nodes[1].health.port: names no port of the node"},
		{"leader by connection", `{"name":"d","roles":["data"],"command":["db"],"leader":{"tcp":true}}`, "nodes[1].leader.tcp: a connection says nothing about who leads"},
		{"probe with the node's data", `{"name":"d","roles":["data"],"command":["db"],"leader":{"command":["ls","{data}"]}}`, "nodes[1].leader.command[1]: {data} is the node's own"},
		{"misspelt probe field", `{"name":"d","roles":["data"],"command":["db"],"health":{"tpc":true}}`, `nodes[1].health.tpc: unknown field "tpc" (did you mean "tcp"?)`},
		{"log outside the data folder", `{"name":"d","roles":["data"],"command":["db"],"log":["../wal"]}`, `nodes[1].log[0]: must be a path relative to the node's data folder, inside it`},
		{"absolute log", `{"name":"d","roles":["data"],"command":["db"],"log":["/var/wal"]}`, `nodes[1].log[0]: must be a path relative`},
		{"log of an image node without data", `{"name":"d","roles":["data"],"image":"db","port":1,"log":["wal"]}`, "nodes[1].log: names a log in a data folder the node does not have"},
		{"data image node asked nothing", `{"name":"d","roles":["data"],"image":"db","ports":{"peer":2380}}`, "nodes[1].health: missing: a data node answers no GET /v1/health"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse([]byte(`{"name":"x","nodes":[` + api + `,` + c.node + `]}`))
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
		})
	}
}

// A node's log, as the spec names it, is where a power cut on an
// acknowledgement slows the fsyncs (nemesis.LogPather); a node that names
// none has every fsync slowed.
func TestTheSpecNamesANodesLog(t *testing.T) {
	s, err := Parse([]byte(`{"name":"x","nodes":[
		{"name":"db","roles":["data"],"command":["db","{data}"],"log":["member/wal"]},
		{"name":"a","roles":["issuer","resource"],"command":["srv","{port}"]}]}`))
	require.NoError(t, err)
	lp, ok := New(s, Options{}).(nemesis.LogPather)
	require.True(t, ok)
	assert.Equal(t, []string{"member/wal"}, lp.LogPaths("db"))
	assert.Empty(t, lp.LogPaths("a"))
}

// A data node holds state; the issuers and resources of a spec that has
// one are stateless adapters unless they say otherwise.
func TestDataNodesHoldTheState(t *testing.T) {
	s, err := Parse([]byte(`{"name":"x","nodes":[
		{"name":"db","roles":["data"],"image":"db","ports":{"client":5000,"peer":5001},"health":{"tcp":true,"port":"client"},
		 "leader":{"http":"/primary","port":"client"}},
		{"name":"a1","roles":["issuer","resource"],"image":"srv","port":7000,"command":["srv","{port}","{addr:db:client}"]},
		{"name":"a2","roles":["issuer","resource"],"image":"srv","port":7000,"stateless":false}]}`))
	require.NoError(t, err)
	tb := s.Table()
	assert.False(t, tb[0].Stateless)
	assert.False(t, tb[0].Serves(), "a data node serves no Fencing API")
	assert.True(t, tb[1].Stateless, "an adapter in front of a data node, by default")
	assert.False(t, tb[2].Stateless, "said otherwise")
	assert.Equal(t, "client", tb[0].Ports[0].Name)
	assert.Equal(t, 5001, tb[0].Ports[1].Number)
	tg := New(s, Options{})
	_, ok := tg.(nemesis.Leaderer)
	assert.True(t, ok, "a spec that says how to find its leader lets the faults aim at it")
	_, ok = New(pythonSpec(t, false), Options{}).(nemesis.Leaderer)
	assert.False(t, ok)
}

var (
	fencedOnce sync.Once
	fencedPath string
	fencedErr  error
)

// fenced is the project's adapter, built for this machine once per test
// binary (TestMain removes it; a test's own folder would go with the test).
func fenced(t *testing.T) string {
	t.Helper()
	fencedOnce.Do(func() {
		dir, err := os.MkdirTemp("", "spec-fenced-")
		if err != nil {
			fencedErr = err
			return
		}
		fencedPath = filepath.Join(dir, "fenced")
		if out, err := exec.Command("go", "build", "-o", fencedPath, "github.com/fencecheck/fencecheck/cmd/fenced").CombinedOutput(); err != nil {
			fencedErr = fmt.Errorf("%w: %s", err, out)
		}
	})
	require.NoError(t, fencedErr)
	return fencedPath
}

// requireTool finds a program: missing it fails in CI and skips elsewhere.
func requireTool(t *testing.T, name, pkg string) {
	t.Helper()
	if _, err := exec.LookPath(name); err == nil {
		return
	}
	if dockertest.Required() {
		t.Fatalf("%s not found: CI must install it (apt-get install -y %s)", name, pkg)
	}
	t.Skipf("%s not found; install it with: apt-get install -y %s", name, pkg)
}

// A store run as a user would: Redis as a data node (its own health and
// leader probes, a named port), two of the project's adapters in front of
// it. The faults that hit state aim at Redis: every power loss, and the
// leader the restarts and pauses aim at; the run is valid.
func TestDataNodeBehindAdapters(t *testing.T) {
	if testing.Short() {
		t.Skip("a fault-injected run of 8 s; make check runs it")
	}
	requireTool(t, "redis-server", "redis-server")
	requireTool(t, "redis-cli", "redis-tools")
	lazyfstest.Require(t)
	adapter := func(name string) map[string]any {
		return map[string]any{"name": name, "roles": []string{"issuer", "resource"},
			"command": []string{fenced(t), "--addr", "127.0.0.1:{port}", "--backend", "redis", "--redis-addr", "{addr:store}"},
			"env":     map[string]string{"STORE_SPARE": "{addr:store:spare}"}}
	}
	b, err := json.Marshal(map[string]any{"name": "redis-by-spec", "nodes": []any{
		map[string]any{"name": "store", "roles": []string{"data"}, "ports": []string{"spare"},
			"command": []string{"redis-server", "--bind", "127.0.0.1", "--port", "{port}", "--dir", "{data}",
				"--save", "", "--appendonly", "yes", "--appendfsync", "always"},
			"health": map[string]any{"command": []string{"redis-cli", "-p", "{port}", "ping"}},
			"leader": map[string]any{"command": []string{"sh", "-c", "redis-cli -p {port} role | head -1 | grep -qx master"}}},
		adapter("a1"), adapter("a2")}})
	require.NoError(t, err)
	s, err := Parse(b)
	require.NoError(t, err)
	ctx := context.Background()

	// Who leads, and the named port as another node is told it.
	tg, eps, _ := startTarget(t, s, Options{})
	leader, err := tg.(nemesis.Leaderer).Leader(ctx)
	require.NoError(t, err)
	assert.Equal(t, "store", leader, "the leader probe names the store")
	assert.Equal(t, []string{"a1", "a2"}, []string{eps.Issuers[0].Node, eps.Issuers[1].Node}, "clients talk to the adapters only")
	st := tg.(leading).Target
	spare, err := st.HostAddr("store", "spare")
	require.NoError(t, err)
	env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", st.PID("a1")))
	require.NoError(t, err)
	assert.Contains(t, string(env), "STORE_SPARE="+spare+"\x00")
	assert.Equal(t, []nemesis.Node{{Name: "store", Role: "data"}, {Name: "a1", Role: "issuer+resource", Stateless: true},
		{Name: "a2", Role: "issuer+resource", Stateless: true}}, tg.(nemesis.Cluster).Nodes())

	// A run: the faults that hit state aim at the store.
	cfg := harness.Config{Target: s.Name, Time: 8 * time.Second, Concurrency: 4, Keys: 2, Readers: 1,
		Nemesis: "restart,power-loss,pause", Seed: 5, Store: t.TempDir(), CheckTimeout: 30 * time.Second}
	run, err := harness.Execute(ctx, cfg, New(s, Options{}))
	require.NoError(t, err)
	v, err := harness.Finish(ctx, run, s.ModelSemantics())
	require.NoError(t, err)
	assert.Equal(t, checkers.Valid, v.Verdict, "anomalies: %v; gate: %v", v.Anomalies(), v.GateReasons)
	events, err := history.ReadFile(run.HistoryPath)
	require.NoError(t, err)
	hits := map[string]map[string]int{}
	for _, e := range events {
		if e.Process == history.NemesisProcess && string(e.Extra["action"]) == `"start"` {
			if hits[e.F] == nil {
				hits[e.F] = map[string]int{}
			}
			hits[e.F][e.Node]++
		}
	}
	assert.Positive(t, hits["power-loss"]["store"])
	assert.Equal(t, hits["power-loss"]["store"], hits["power-loss"]["store"]+hits["power-loss"]["a1"]+hits["power-loss"]["a2"],
		"every power loss hits the node that holds state: %v", hits["power-loss"])
	assert.Positive(t, hits["restart"]["store"], "restarts aim at the store: %v", hits["restart"])
}
