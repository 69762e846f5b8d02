package spec

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/harness"
	"github.com/fencecheck/fencecheck/nemesis"
	"github.com/fencecheck/fencecheck/nemesis/lazyfs/lazyfstest"
)

// redisCLI runs redis-cli against addr (host:port) and returns its output.
func redisCLI(t *testing.T, addr string, args ...string) string {
	t.Helper()
	out, err := exec.Command("redis-cli", append([]string{"-u", "redis://" + addr}, args...)...).CombinedOutput()
	require.NoError(t, err, "redis-cli %v: %s", args, out)
	return strings.TrimSpace(string(out))
}

// drawn is the node each of n plans of nem acts on, drawn with a fixed seed.
func drawn(t *testing.T, env *nemesis.Env, name string, n int) []string {
	t.Helper()
	sel := nemesis.Select([]string{name}, env)
	require.Len(t, sel.Active, 1, "%s: %v", name, sel.NotApplicable)
	rng := rand.New(rand.NewPCG(7, 11))
	out := make([]string, n)
	for i := range out {
		p, err := sel.Active[0].Draw(context.Background(), env, rng)
		require.NoError(t, err)
		if name == nemesis.PowerLoss && len(p.Nodes) > 1 {
			// Every node keeping state at once: no leader to aim at.
			out[i] = strings.Join(p.Nodes, ",")
			continue
		}
		require.Len(t, p.Nodes, 1, "%s: %+v", name, p)
		out[i] = p.Nodes[0]
	}
	return out
}

// aimedAt compares the nodes drawn with one seed while `before` led and
// while `after` did: the draws a leader probe aimed are the only ones that
// differ, each from the old leader to the new. It returns how many there
// were.
func aimedAt(t *testing.T, name string, first, second []string, before, after string) int {
	t.Helper()
	aimed := 0
	for i := range first {
		if first[i] == second[i] {
			continue
		}
		assert.Equal(t, [2]string{before, after}, [2]string{first[i], second[i]}, "%s draw %d moved elsewhere than to the new leader", name, i)
		aimed++
	}
	return aimed
}

// Two Redis servers as data nodes (the replica first in the table, so table
// order cannot pass for aim) behind two of the project's adapters, as host
// processes. Each asks its leader a different way: a command (redis-cli
// ROLE), or GET /primary on a named side port answered by a small
// Patroni-like sidecar. The drawn faults aim at whoever leads: drawn again
// with the same seed after a failover, the same share of pauses, restarts
// and power losses moves from the old primary to the new one. Restarts
// prefer the nodes that hold state, power losses reach only them, and both
// data nodes answer their own health checks (a TCP connection; a command).
func TestLeaderProbeAimsFaults(t *testing.T) {
	requireTool(t, "redis-server", "redis-server")
	requireTool(t, "redis-cli", "redis-tools")
	requireTool(t, "python3", "python3")
	lazyfstest.Require(t)
	sidecar, err := filepath.Abs("testdata/primary.py")
	require.NoError(t, err)
	server := []string{"redis-server", "--bind", "127.0.0.1", "--port", "{port}", "--dir", "{data}", "--save", "", "--appendonly", "yes"}
	for _, probe := range []string{"command", "http"} {
		t.Run(probe, func(t *testing.T) {
			store := func(name string) map[string]any {
				n := map[string]any{"name": name, "roles": []string{"data"}, "clock": "none"}
				if probe == "command" {
					// Health: the default for a data node with a port, a TCP connection.
					n["command"] = server
					n["leader"] = map[string]any{"command": []string{"sh", "-c", "redis-cli -p {port} role | head -1 | grep -qx master"}}
				} else {
					n["command"] = append([]string{"python3", sidecar, "{port:admin}", "{port}"}, server...)
					n["ports"] = []string{"admin"}
					n["health"] = map[string]any{"command": []string{"redis-cli", "-p", "{port}", "ping"}}
					n["leader"] = map[string]any{"http": "/primary", "port": "admin"}
				}
				return n
			}
			adapter := func(name string) map[string]any {
				return map[string]any{"name": name, "roles": []string{"issuer", "resource"}, "clock": "none",
					"command": []string{fenced(t), "--addr", "127.0.0.1:{port}", "--backend", "redis", "--redis-addr", "{addr:r1}"}}
			}
			b, err := json.Marshal(map[string]any{"name": "redis-pair", "start_timeout": "20s",
				"nodes": []any{store("r2"), store("r1"), adapter("a1"), adapter("a2")}})
			require.NoError(t, err)
			s, err := Parse(b)
			require.NoError(t, err)
			tg := New(s, Options{NoPreflight: true})
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_, err = tg.Start(ctx, harness.Env{RunID: "spec-leader-" + probe, Dir: t.TempDir(), DiskLayer: true})
			defer func() { assert.NoError(t, tg.Stop(context.Background())) }()
			require.NoError(t, err)
			st := tg.(leading).Target
			addr := func(node string) string {
				a, err := st.HostAddr(node, "")
				require.NoError(t, err)
				return a
			}
			leader := func() string {
				l, err := tg.(nemesis.Leaderer).Leader(ctx)
				require.NoError(t, err)
				return l
			}
			assert.Equal(t, "r2", leader(), "two lone servers both lead: the first in the table answers")
			redisCLI(t, addr("r2"), "replicaof", "127.0.0.1", strings.Split(addr("r1"), ":")[1])
			require.Equal(t, "r1", leader())

			env := &nemesis.Env{Target: tg.(nemesis.Cluster), TTL: time.Second}
			const n = 60
			first := map[string][]string{}
			for _, name := range []string{nemesis.Pause, nemesis.Restart, nemesis.PowerLoss} {
				first[name] = drawn(t, env, name, n)
			}
			count := func(nodes []string, want ...string) int {
				c := 0
				for _, x := range nodes {
					for _, w := range want {
						if x == w {
							c++
						}
					}
				}
				return c
			}
			assert.LessOrEqual(t, count(first[nemesis.Restart], "a1", "a2"), n/6, "restarts prefer the nodes that hold state: %v", first[nemesis.Restart])
			assert.Zero(t, count(first[nemesis.PowerLoss], "a1", "a2"), "power losses reach only the nodes that hold state: %v", first[nemesis.PowerLoss])
			assert.Positive(t, count(first[nemesis.Pause], "a1", "a2"), "pauses reach every node")

			// Failover: r2 is promoted, r1 follows it.
			redisCLI(t, addr("r2"), "replicaof", "no", "one")
			redisCLI(t, addr("r1"), "replicaof", "127.0.0.1", strings.Split(addr("r2"), ":")[1])
			require.Equal(t, "r2", leader())
			for _, name := range []string{nemesis.Pause, nemesis.Restart, nemesis.PowerLoss} {
				aimed := aimedAt(t, name, first[name], drawn(t, env, name, n), "r1", "r2")
				t.Logf("%s: %d of %d draws aimed at the leader; with r1 leading: r1 %d, r2 %d, adapters %d", name, aimed, n,
					count(first[name], "r1"), count(first[name], "r2"), count(first[name], "a1", "a2"))
				assert.GreaterOrEqual(t, aimed, n/6, "%s: about a third of the draws aim at the leader", name)
				assert.LessOrEqual(t, aimed, n/2, name)
			}
		})
	}
}

// A data node's own health check is really asked: a TCP check on a port
// nothing listens on, or a command that never succeeds, fails the start
// within start_timeout, naming the node and the check; the same server with
// a check it passes starts (TestLeaderProbeAimsFaults).
func TestDataNodeHealthIsAsked(t *testing.T) {
	requireTool(t, "redis-server", "redis-server")
	requireTool(t, "redis-cli", "redis-tools")
	cases := []struct {
		name   string
		health map[string]any
		want   string
	}{
		{"tcp", map[string]any{"tcp": true, "port": "spare"}, "a TCP connection"},
		{"command", map[string]any{"command": []string{"sh", "-c", "redis-cli -p {port} ping | grep -qx READY"}}, "its probe command"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b, err := json.Marshal(map[string]any{"name": "unhealthy", "start_timeout": "2s", "nodes": []any{
				map[string]any{"name": "db", "roles": []string{"data"}, "clock": "none", "ports": []string{"spare"}, "health": c.health,
					"command": []string{"redis-server", "--bind", "127.0.0.1", "--port", "{port}", "--save", "", "--appendonly", "no"}},
				map[string]any{"name": "a1", "roles": []string{"issuer", "resource"}, "clock": "none",
					"command": []string{fenced(t), "--addr", "127.0.0.1:{port}", "--backend", "redis", "--redis-addr", "{addr:db}"}}}})
			require.NoError(t, err)
			s, err := Parse(b)
			require.NoError(t, err)
			tg := New(s, Options{NoPreflight: true})
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			start := time.Now()
			_, err = tg.Start(ctx, harness.Env{RunID: "spec-health-" + c.name, Dir: t.TempDir()})
			defer func() { assert.NoError(t, tg.Stop(context.Background())) }()
			require.Error(t, err)
			assert.Contains(t, err.Error(), "db")
			assert.Contains(t, err.Error(), c.want)
			assert.Less(t, time.Since(start), 15*time.Second, "the wait ends at start_timeout")
			t.Log(err)
		})
	}
}
