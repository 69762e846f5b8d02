package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/harness/docker"
	"github.com/fencecheck/fencecheck/harness/docker/dockertest"
	"github.com/fencecheck/fencecheck/harness/docker/sshlab"
)

// Issue 25: a spec whose nodes are SSH hosts, each its own network
// namespace (the project's own sshd containers), fault-tested through the
// command itself, and every host left as it was found.

// sshLab starts n hosts with the project's etcd and fenced programs at
// /opt/fc (read-only), for the length of the test.
func sshLab(t *testing.T, n int, noFUSE ...string) *sshlab.Lab {
	t.Helper()
	dockertest.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	bin := t.TempDir()
	for _, name := range []string{docker.ImageEtcd, docker.ImageFenced} {
		p, err := docker.Binary(ctx, os.Stderr, name)
		require.NoError(t, err)
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(bin, name), b, 0o755))
	}
	lab, err := sshlab.Start(ctx, sshlab.Options{Hosts: n, NoFUSE: noFUSE, Binds: []docker.Bind{{Host: bin, Container: "/opt/fc", ReadOnly: true}}})
	require.NoError(t, err)
	t.Cleanup(func() { lab.Close(context.Background()) })
	return lab
}

// sshNode is one node of a spec on a lab host.
func sshNode(lab *sshlab.Lab, host sshlab.Host, knownHosts string, node map[string]any) map[string]any {
	node["ssh"] = map[string]any{"host": host.IP, "port": host.Port, "user": sshlab.User, "key": lab.KeyFile, "known_hosts": knownHosts}
	return node
}

func writeSpec(t *testing.T, spec map[string]any) string {
	t.Helper()
	b, err := json.MarshalIndent(spec, "", "  ")
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "ssh.json")
	require.NoError(t, os.WriteFile(path, b, 0o644))
	return path
}

// referenceSpec is the reference (fenced's file-backed store) on one host.
func referenceSpec(t *testing.T, lab *sshlab.Lab, knownHosts string, bugs ...string) string {
	cmd := []string{"/opt/fc/fenced", "--addr", "0.0.0.0:{port}", "--backend", "memory", "--data", "{data}"}
	if len(bugs) > 0 {
		cmd = append(cmd, "--bug", strings.Join(bugs, ","))
	}
	return writeSpec(t, map[string]any{"name": "ssh-reference", "start_timeout": "20s", "nodes": []any{
		sshNode(lab, lab.Hosts[0], knownHosts, map[string]any{"name": "n1", "roles": []string{"issuer", "resource"}, "port": 7000, "command": cmd}),
	}})
}

// etcdSpec is three etcd members and an adapter beside each, one host
// each: the deployment a user runs on three machines.
func etcdSpec(t *testing.T, lab *sshlab.Lab) string {
	var members []string
	var nodes []any
	for i := range lab.Hosts {
		members = append(members, fmt.Sprintf("etcd-%d=http://{addr:etcd-%d:peer}", i+1, i+1))
	}
	for i, h := range lab.Hosts {
		name := fmt.Sprintf("etcd-%d", i+1)
		nodes = append(nodes, sshNode(lab, h, lab.KnownHosts, map[string]any{"name": name, "roles": []string{"data"},
			"port": 2379, "ports": map[string]int{"peer": 2380}, "health": map[string]any{"tcp": true},
			"command": []string{"/opt/fc/etcd", "--name", name, "--data-dir", "{data}",
				"--listen-client-urls", "http://0.0.0.0:{port}", "--advertise-client-urls", "http://{addr:" + name + "}",
				"--listen-peer-urls", "http://0.0.0.0:{port:peer}", "--initial-advertise-peer-urls", "http://{addr:" + name + ":peer}",
				"--initial-cluster", strings.Join(members, ","), "--initial-cluster-state", "new"}}))
	}
	var endpoints []string
	for i := range lab.Hosts {
		endpoints = append(endpoints, fmt.Sprintf("http://{addr:etcd-%d}", i+1))
	}
	for i, h := range lab.Hosts {
		nodes = append(nodes, sshNode(lab, h, lab.KnownHosts, map[string]any{"name": fmt.Sprintf("a%d", i+1), "roles": []string{"issuer", "resource"},
			"port": 7000, "command": []string{"/opt/fc/fenced", "--addr", "0.0.0.0:{port}", "--backend", "etcd", "--etcd-endpoints", strings.Join(endpoints, ",")}}))
	}
	return writeSpec(t, map[string]any{"name": "ssh-etcd", "semantics": map[string]any{"scope": "global"}, "start_timeout": "60s", "nodes": nodes})
}

// noLeftovers asserts that no host keeps anything of the run: no process
// but sshd, no mount, no rule, no folder of fencecheck's under /tmp.
func noLeftovers(t *testing.T, lab *sshlab.Lab, within time.Duration) {
	t.Helper()
	for _, h := range lab.Hosts {
		left, err := lab.WaitLeftovers(context.Background(), h.Name, "", within)
		require.NoError(t, err)
		assert.True(t, left.Empty(), "host %s: %s", h.Name, left)
		files, err := os.ReadDir(fmt.Sprintf("/proc/%d/root/tmp", h.PID))
		require.NoError(t, err)
		for _, f := range files {
			assert.False(t, strings.HasPrefix(f.Name(), "fencecheck-"), "host %s keeps /tmp/%s", h.Name, f.Name())
		}
	}
}

func TestSSHReferenceBugFoundAndHostsLeftClean(t *testing.T) {
	lab := sshLab(t, 1)
	store := t.TempDir()
	code, out, errOut := cli(t, nil, "test", "--target", "spec:"+referenceSpec(t, lab, lab.KnownHosts, "counter-in-memory"),
		"--nemesis", "restart", "--time", "8s", "--seed", "1", "--store", store)
	require.Equal(t, 1, code, "a counter reset on an SSH host is found\n%s\n%s", out, errOut)
	assert.Contains(t, out, "duplicate-token")
	noLeftovers(t, lab, 10*time.Second)
	logs, err := os.ReadFile(filepath.Join(runDir(store), "logs", "n1.log"))
	require.NoError(t, err, "the node's log is copied back from its host")
	assert.Contains(t, string(logs), "killed by fencecheck", "the restarts are in the host's log")
}

func TestSSHHostWithAMismatchingKeyIsRefused(t *testing.T) {
	lab := sshLab(t, 1)
	wrong, err := lab.WrongKnownHosts(lab.Hosts[0].Name)
	require.NoError(t, err)
	code, out, errOut := cli(t, nil, "test", "--target", "spec:"+referenceSpec(t, lab, wrong), "--time", "3s", "--store", t.TempDir())
	assert.Equal(t, 3, code, "%s\n%s", out, errOut)
	assert.Contains(t, out+errOut, "does NOT match known_hosts")
	noLeftovers(t, lab, 5*time.Second)
}

// Three etcd members and their adapters on three hosts, under every
// nemesis of all: valid, every nemesis acted, and nothing left after a
// normal end.
func TestSSHEtcdOnThreeHostsUnderAll(t *testing.T) {
	lab := sshLab(t, 3)
	store := t.TempDir()
	code, out, errOut := cli(t, nil, "test", "--target", "spec:"+etcdSpec(t, lab), "--nemesis", "all", "--time", "20s", "--seed", "3", "--store", store)
	require.Equal(t, 0, code, "%s\n%s", out, errOut)
	res := readResults(t, runDir(store))
	nem, _ := res["nemeses"].(map[string]any)
	started := func(n string) float64 {
		st, _ := nem[n].(map[string]any)
		v, _ := st["started"].(float64)
		return v
	}
	for _, n := range []string{"pause", "power-loss", "clock", "partition", "strip", "delay"} {
		assert.Positive(t, started(n), "nemesis %s acted on the SSH hosts: %v", n, nem[n])
	}
	// A kill and a start again, at random or timed by an acknowledgement.
	assert.Positive(t, started("restart")+started("crash-on-ack"), "kills acted on the SSH hosts: %v", nem)
	noLeftovers(t, lab, 10*time.Second)
}

// Ctrl-C and kill -9 of fencecheck in the main phase, with faults live:
// every host heals (the agent's lease and its connection's end), and
// nothing is left on any.
func TestSSHInterruptAndKillLeaveNothingOnTheHosts(t *testing.T) {
	lab := sshLab(t, 1)
	spec := referenceSpec(t, lab, lab.KnownHosts)
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGKILL} {
		t.Run(sig.String(), func(t *testing.T) {
			store := t.TempDir()
			c := startCLI(t, "test", "--target", "spec:"+spec, "--nemesis", "pause,clock,power-loss", "--time", "2m", "--quiet", "--store", store)
			waitFor(t, 3*time.Minute, "the main phase", func() bool { return inMainPhase(store) })
			time.Sleep(4 * time.Second) // faults under way
			// A power cut takes the layer down until the node starts
			// again, so the mount is looked for over a few seconds.
			var left sshlab.Leftovers
			var err error
			for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(250 * time.Millisecond) {
				left, err = lab.Leftovers(context.Background(), lab.Hosts[0].Name, "")
				require.NoError(t, err)
				if len(left.Mounts) > 0 || time.Now().After(deadline) {
					break
				}
			}
			require.False(t, left.Empty(), "a live run has its agent and node on the host")
			require.NotEmpty(t, left.Mounts, "the power-loss layer is mounted on the host: %s", left)
			began := time.Now()
			require.NoError(t, c.cmd.Process.Signal(sig))
			c.wait(t, 90*time.Second)
			noLeftovers(t, lab, 45*time.Second)
			t.Logf("%s: the host was clean %.1fs after the signal", sig, time.Since(began).Seconds())
		})
	}
}
