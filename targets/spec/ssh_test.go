package spec

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/fencing"
	"github.com/fencecheck/fencecheck/harness"
	"github.com/fencecheck/fencecheck/harness/docker"
	"github.com/fencecheck/fencecheck/harness/docker/dockertest"
	"github.com/fencecheck/fencecheck/harness/docker/sshlab"
	"github.com/fencecheck/fencecheck/nemesis"
	"github.com/fencecheck/fencecheck/nemesis/netcut"
)

// Every node fault on an ssh node, each proven by its effect on the host as
// this machine sees it (its /proc, its kernel's tables, the time its server
// answers with), not by the agent's word: host-1 takes every fault, host-2
// has no /dev/fuse, so power loss is not applicable there, with why.
// fencedLab starts hosts with the project's fenced at /opt/fc/fenced.
func fencedLab(t *testing.T, ctx context.Context, opts sshlab.Options) *sshlab.Lab {
	t.Helper()
	dockertest.Require(t)
	fenced, err := docker.Binary(ctx, nil, docker.ImageFenced)
	require.NoError(t, err)
	bin := t.TempDir()
	b, err := os.ReadFile(fenced)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(bin, "fenced"), b, 0o755))
	opts.Binds = []docker.Bind{{Host: bin, Container: "/opt/fc", ReadOnly: true}}
	lab, err := sshlab.Start(ctx, opts)
	require.NoError(t, err)
	t.Cleanup(func() { lab.Close(context.Background()) })
	return lab
}

// fencedNode is the reference (fenced's file-backed store) as an ssh node.
func fencedNode(lab *sshlab.Lab, name string, h sshlab.Host, roles []string, args ...string) map[string]any {
	return map[string]any{"name": name, "roles": roles, "port": 7000,
		"ssh":     map[string]any{"host": h.IP, "user": sshlab.User, "key": lab.KeyFile, "known_hosts": lab.KnownHosts},
		"command": append([]string{"/opt/fc/fenced", "--addr", "0.0.0.0:{port}", "--backend", "memory", "--data", "{data}"}, args...)}
}

// A program that exits on its host fails the start at once, with the last
// lines of its log there; nothing is left on the host.
func TestSSHNodeThatExitsFailsTheStart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	lab := fencedLab(t, ctx, sshlab.Options{})
	raw, err := json.Marshal(map[string]any{"name": "ssh-exits", "start_timeout": "60s", "nodes": []any{
		fencedNode(lab, "n1", lab.Hosts[0], []string{"issuer", "resource"}, "--no-such-flag")}})
	require.NoError(t, err)
	s, err := Parse(raw)
	require.NoError(t, err)
	dir := t.TempDir()
	began := time.Now()
	_, err = New(s, Options{}).Start(ctx, harness.Env{RunID: "spec-ssh-exit-" + filepath.Base(dir), Dir: dir})
	require.Error(t, err)
	assert.Less(t, time.Since(began), 30*time.Second, "not a wait for the 60 s start timeout")
	assert.Contains(t, err.Error(), "exited on")
	assert.Contains(t, err.Error(), "exit status 64")
	assert.Contains(t, err.Error(), "last lines of its log on the host")
	t.Logf("the start failed %.1fs after it began", time.Since(began).Seconds())
	left, lerr := lab.WaitLeftovers(ctx, "host-1", "", 10*time.Second)
	require.NoError(t, lerr)
	assert.True(t, left.Empty(), "%s", left)
}

func TestSSHFaultsTakeEffectOnTheHost(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	lab := fencedLab(t, ctx, sshlab.Options{Hosts: 2, NoFUSE: []string{"host-2"}})
	node := func(name string, h sshlab.Host, roles []string) map[string]any {
		return fencedNode(lab, name, h, roles)
	}
	raw, err := json.Marshal(map[string]any{"name": "ssh-faults", "nodes": []any{
		node("n1", lab.Hosts[0], []string{"issuer", "resource"}), node("n2", lab.Hosts[1], []string{"data"})}})
	// n1 keeps the state (a spec with data nodes takes its issuers for
	// stateless adapters unless told).
	raw = []byte(strings.Replace(string(raw), `"name":"n1",`, `"name":"n1","stateless":false,`, 1))
	require.NoError(t, err)
	s, err := Parse(raw)
	require.NoError(t, err)
	dir := t.TempDir()
	run := "spec-ssh-test-" + filepath.Base(dir)
	tg := New(s, Options{})
	eps, err := tg.Start(ctx, harness.Env{RunID: run, Dir: dir, DiskLayer: true})
	defer func() { assert.NoError(t, tg.Stop(context.Background())) }()
	require.NoError(t, err)

	fencedOn := func(host string) sshlab.Process {
		left, err := lab.Leftovers(ctx, host, "")
		require.NoError(t, err)
		i := slices.IndexFunc(left.Processes, func(p sshlab.Process) bool { return strings.HasPrefix(p.Cmdline, "/opt/fc/fenced") })
		if i < 0 {
			return sshlab.Process{}
		}
		return left.Processes[i]
	}
	c := fencing.NewClient(eps.Resources[0].URL, nil)
	acq := c.Acquire(opCtx(t, 5*time.Second), "k", "a", time.Second)
	require.Equal(t, fencing.Ok, acq.Outcome, "%+v", acq)
	require.Equal(t, fencing.Ok, c.Write(opCtx(t, 5*time.Second), "k", acq.Token, []byte("v")).Outcome)

	// pause: the program is stopped on its host (state T), then runs.
	pz := tg.(nemesis.Pauser)
	require.NoError(t, pz.PauseNode(ctx, "n1"))
	assert.Equal(t, "T", fencedOn("host-1").State)
	require.NoError(t, pz.ResumeNode(ctx, "n1"))
	assert.NotEqual(t, "T", fencedOn("host-1").State)

	// clock: the server's own wall clock, as its HTTP Date header says.
	ck := tg.(nemesis.ClockSkewer)
	require.Contains(t, ck.ClockNodes(), "n1")
	require.NoError(t, ck.SetClockOffset(ctx, "n1", 2*time.Hour))
	assert.InDelta(t, 2*time.Hour.Seconds(), serverSkew(t, eps.Resources[0].URL).Seconds(), 60)
	require.NoError(t, ck.SetClockOffset(ctx, "n1", 0))
	assert.InDelta(t, 0, serverSkew(t, eps.Resources[0].URL).Seconds(), 60)

	// partition: the run's own table in each host's network namespace, read
	// from this machine; gone after the heal.
	pt := tg.(nemesis.Partitioner)
	require.ElementsMatch(t, []string{"n1", "n2"}, pt.PartitionNodes())
	require.NoError(t, pt.Partition(ctx, [][]string{{"n1"}, {"n2"}}))
	for _, h := range []string{"host-1", "host-2"} {
		left, err := lab.Leftovers(ctx, h, "")
		require.NoError(t, err)
		assert.Contains(t, left.Tables, "ip "+netcut.TableOf(run), "host %s", h)
	}
	require.NoError(t, pt.HealPartition(ctx))
	for _, h := range []string{"host-1", "host-2"} {
		left, err := lab.Leftovers(ctx, h, "")
		require.NoError(t, err)
		assert.Empty(t, left.Tables, "host %s after the heal", h)
	}

	// One way, seen from both hosts: n1 cannot reach n2 (the rules are on
	// host-1 only), while n2's requests to n1 are answered.
	addr := func(n string) string {
		a, err := tg.(*Target).NetAddr(n, "")
		require.NoError(t, err)
		return a
	}
	require.NoError(t, askFrom(lab.Runtime(), "host-1", addr("n2")), "before the cut")
	require.NoError(t, tg.(nemesis.Grudger).Grudge(ctx, map[string][]string{"n1": {"n2"}}))
	for h, want := range map[string]bool{"host-1": true, "host-2": false} {
		left, err := lab.Leftovers(ctx, h, "")
		require.NoError(t, err)
		assert.Equal(t, want, slices.Contains(left.Tables, "ip "+netcut.TableOf(run)), "host %s", h)
	}
	assert.Error(t, askFrom(lab.Runtime(), "host-1", addr("n2")), "n1's request to n2 is dropped")
	assert.NoError(t, askFrom(lab.Runtime(), "host-2", addr("n1")), "n2's request to n1 is answered")
	require.NoError(t, pt.HealPartition(ctx))
	assert.NoError(t, askFrom(lab.Runtime(), "host-1", addr("n2")), "healed")

	// power loss: host-1's layer; host-2 cannot mount one, and says why.
	pw := tg.(nemesis.PowerCutter)
	assert.Equal(t, []string{"n1"}, pw.PowerNodes())
	assert.Contains(t, tg.(nemesis.PowerExplainer).PowerUnreachable()["n2"], "FUSE")
	before := fencedOn("host-1").PID
	_, err = pw.CutPower(ctx, "n1")
	require.NoError(t, err)
	assert.Zero(t, fencedOn("host-1").PID, "the program is dead after the power cut")
	require.NoError(t, tg.(nemesis.Restarter).StartNode(ctx, "n1", false))
	after := fencedOn("host-1").PID
	assert.NotZero(t, after)
	assert.NotEqual(t, before, after)
	rd := c.Read(opCtx(t, 5*time.Second), "k")
	require.Equal(t, fencing.Ok, rd.Outcome, "%+v", rd)
	assert.Equal(t, "v", string(rd.Value), "what the reference fsynced survives the power loss")

	// restart-wipe: the data folder on the host is emptied.
	rs := tg.(nemesis.Restarter)
	require.NoError(t, rs.KillNode(ctx, "n1"))
	require.NoError(t, rs.StartNode(ctx, "n1", true))
	rd = c.Read(opCtx(t, 5*time.Second), "k")
	require.Equal(t, fencing.Ok, rd.Outcome)
	assert.False(t, rd.Found, "restart-wipe empties the node's data on its host")
}

// serverSkew is how far the server's clock (its Date header, whole
// seconds) is from this machine's.
func serverSkew(t *testing.T, base string) time.Duration {
	t.Helper()
	resp, err := http.Get(base + "/v1/health")
	require.NoError(t, err)
	resp.Body.Close()
	at, err := http.ParseTime(resp.Header.Get("Date"))
	require.NoError(t, err)
	return at.Sub(time.Now())
}
