package spec

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/fencing"
	"github.com/fencecheck/fencecheck/harness"
	"github.com/fencecheck/fencecheck/harness/docker"
	"github.com/fencecheck/fencecheck/harness/docker/dockertest"
	"github.com/fencecheck/fencecheck/nemesis"
	"github.com/fencecheck/fencecheck/nemesis/lazyfs/lazyfstest"
)

// An image node: the project's own adapter image with its file-backed
// store, described by a spec as any team's image would be. It passes the
// preflight, keeps its data across a restart, freezes under pause and reads
// the clock offset file.
func TestImageNode(t *testing.T) {
	dockertest.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	tags, err := docker.EnsureImages(ctx, nil, docker.ImageFenced)
	require.NoError(t, err)
	b, err := json.Marshal(map[string]any{"name": "image-fence", "nodes": []any{map[string]any{
		"name": "c1", "roles": []string{"issuer", "resource"}, "image": tags[docker.ImageFenced], "port": 7000,
		"data": "/data", "clock": "offset-file",
		"command": []string{"/usr/local/bin/fenced", "--addr", "0.0.0.0:{port}", "--backend", "memory", "--data", "{data}"},
	}}})
	require.NoError(t, err)
	s, err := Parse(b)
	require.NoError(t, err)
	dir := t.TempDir()
	tg := New(s, Options{})
	eps, err := tg.Start(ctx, harness.Env{RunID: "spec-image-test-" + filepath.Base(dir), Dir: dir})
	defer func() { assert.NoError(t, tg.Stop(context.Background())) }()
	require.NoError(t, err)
	require.True(t, tg.(*Target).PreflightReport().Conformant())

	c := fencing.NewClient(eps.Resources[0].URL, nil)
	acq := c.Acquire(opCtx(t, 5*time.Second), "k", "a", time.Second)
	require.Equal(t, fencing.Ok, acq.Outcome, "%+v", acq)
	require.Equal(t, fencing.Ok, c.Write(opCtx(t, 5*time.Second), "k", acq.Token, []byte("v")).Outcome)

	rs := tg.(nemesis.Restarter)
	require.NoError(t, rs.KillNode(ctx, "c1"))
	require.NoError(t, rs.StartNode(ctx, "c1", false))
	rd := c.Read(opCtx(t, 5*time.Second), "k")
	require.Equal(t, fencing.Ok, rd.Outcome, "%+v", rd)
	assert.Equal(t, "v", string(rd.Value), "the data path survives a kill")

	pz := tg.(nemesis.Pauser)
	require.NoError(t, pz.PauseNode(ctx, "c1"))
	assert.Equal(t, fencing.Info, c.Read(opCtx(t, 300*time.Millisecond), "k").Outcome)
	require.NoError(t, pz.ResumeNode(ctx, "c1"))
	assert.Equal(t, fencing.Ok, c.Read(opCtx(t, 5*time.Second), "k").Outcome)

	require.NoError(t, tg.(nemesis.ClockSkewer).SetClockOffset(ctx, "c1", time.Hour))
	off, err := os.ReadFile(filepath.Join(dir, "nodes", "c1", "clock", "offset"))
	require.NoError(t, err)
	assert.Equal(t, "3600000000000\n", string(off))

	require.NoError(t, rs.KillNode(ctx, "c1"))
	require.NoError(t, rs.StartNode(ctx, "c1", true))
	rd = c.Read(opCtx(t, 5*time.Second), "k")
	require.Equal(t, fencing.Ok, rd.Outcome)
	assert.False(t, rd.Found, "restart-wipe empties the data path")
}

// Two image nodes can be cut from each other (rules in each container's
// network namespace); the cut heals. Neither says anything about clocks, so
// fencecheck moves the clock of each container's (static Go) process. Both
// from this machine and through the engine's API alone (helper containers,
// as behind Docker Desktop or a remote engine).
func TestImageNodesPartition(t *testing.T) {
	dockertest.Require(t)
	t.Run("from this machine", func(t *testing.T) { imageNodesPartition(t, "host") })
	t.Run("through the engine's API", func(t *testing.T) {
		dockertest.UseRemote(t)
		imageNodesPartition(t, "api")
	})
}

// askFrom asks addr for its health from inside node's network namespace,
// within 700 ms. The connection is opened on a locked thread that joins
// the namespace and exits afterwards (a socket stays in the namespace it
// was made in).
func askFrom(rt *docker.Runtime, node, addr string) error {
	pid, err := rt.PID(context.Background(), node)
	if err != nil {
		return err
	}
	ns, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", pid))
	if err != nil {
		return err
	}
	defer ns.Close()
	deadline := time.Now().Add(700 * time.Millisecond)
	var c net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		if err = unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err == nil {
			c, err = net.DialTimeout("tcp", addr, time.Until(deadline))
		}
	}()
	<-done
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(deadline)
	if _, err := fmt.Fprintf(c, "GET /v1/health HTTP/1.0\r\nHost: %s\r\n\r\n", addr); err != nil {
		return err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("health answered %s", resp.Status)
	}
	return nil
}

func imageNodesPartition(t *testing.T, path string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	tags, err := docker.EnsureImages(ctx, nil, docker.ImageFenced)
	require.NoError(t, err)
	node := func(name string) map[string]any {
		return map[string]any{"name": name, "roles": []string{"issuer", "resource"}, "image": tags[docker.ImageFenced], "port": 7000,
			"data": "/data", "command": []string{"/usr/local/bin/fenced", "--addr", "0.0.0.0:{port}", "--backend", "memory", "--data", "{data}"}}
	}
	b, err := json.Marshal(map[string]any{"name": "two-images", "nodes": []any{node("a"), node("b")}})
	require.NoError(t, err)
	s, err := Parse(b)
	require.NoError(t, err)
	dir := t.TempDir()
	// Two independent stores are not one system: no preflight here.
	tg := New(s, Options{NoPreflight: true})
	_, err = tg.Start(ctx, harness.Env{RunID: "spec-image-part-" + path + "-" + filepath.Base(dir), Dir: dir})
	defer func() { assert.NoError(t, tg.Stop(context.Background())) }()
	require.NoError(t, err)
	pt, ok := tg.(nemesis.Partitioner)
	require.True(t, ok)
	require.NoError(t, pt.Partition(ctx, [][]string{{"a"}, {"b"}}))
	p := tg.(*Target)
	ip := func(n string) string {
		a, err := p.NetAddr(n, "")
		require.NoError(t, err)
		h, _, _ := net.SplitHostPort(a)
		return h
	}
	rt := p.Runtime()
	assert.Equal(t, []string{ip("b")}, rt.Blocked("a"))
	assert.Equal(t, []string{ip("a")}, rt.Blocked("b"))
	assert.Error(t, pt.Partition(ctx, [][]string{{"a"}, {"zz"}}))
	require.NoError(t, pt.HealPartition(ctx))
	assert.Empty(t, rt.Blocked("a"))

	// One way, seen from both sides: a cannot reach b (its requests time
	// out), while b's requests to a are answered.
	addr := func(n string) string {
		a, err := p.NetAddr(n, "")
		require.NoError(t, err)
		return a
	}
	require.NoError(t, askFrom(rt, "a", addr("b")), "before the cut")
	require.NoError(t, tg.(nemesis.Grudger).Grudge(ctx, map[string][]string{"a": {"b"}}))
	assert.Equal(t, docker.Cut{To: []string{ip("b")}}, rt.CutOf("a"))
	assert.Empty(t, rt.CutOf("b"), "the rules are on the side that cannot reach")
	assert.Error(t, askFrom(rt, "a", addr("b")), "a's request to b is dropped")
	assert.NoError(t, askFrom(rt, "b", addr("a")), "b's request to a is answered")
	require.NoError(t, pt.HealPartition(ctx))
	assert.NoError(t, askFrom(rt, "a", addr("b")), "healed")

	cs := tg.(nemesis.ClockSkewer)
	assert.Equal(t, []string{"a", "b"}, cs.ClockNodes())
	a, b2 := p.Endpoints().Issuers[0].URL+"/v1/health", p.Endpoints().Issuers[1].URL+"/v1/health"
	require.NoError(t, cs.SetClockOffset(ctx, "a", 90*time.Second))
	assert.InDelta(t, 90, skewOf(t, a, false).Seconds(), 1.1, "fenced's own Date header")
	assert.InDelta(t, 0, skewOf(t, b2, false).Seconds(), 1.1, "the other node is untouched")
	require.NoError(t, cs.SetClockOffset(ctx, "a", 0))
	assert.InDelta(t, 0, skewOf(t, a, false).Seconds(), 1.1)
	if path == "api" {
		assert.Equal(t, docker.PathAPI, rt.FaultPath("partition"))
		assert.Equal(t, docker.PathAPI, rt.FaultPath("clock"))
	}
}

// An image node's data path on the lazyfs layer (power-loss): the layer is
// bind-mounted into the container, so what the node writes goes through it
// (the mount shows a file that was not there when it was made), and a power
// loss keeps what the node made durable.
func TestImageNodeOnLayer(t *testing.T) {
	dockertest.Require(t)
	lazyfstest.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	tags, err := docker.EnsureImages(ctx, nil, docker.ImageFenced)
	require.NoError(t, err)
	b, err := json.Marshal(map[string]any{"name": "image-fence", "nodes": []any{map[string]any{
		"name": "c1", "roles": []string{"issuer", "resource"}, "image": tags[docker.ImageFenced], "port": 7000,
		"data": "/data", "clock": "none",
		"command": []string{"/usr/local/bin/fenced", "--addr", "0.0.0.0:{port}", "--backend", "memory", "--data", "{data}"},
	}}})
	require.NoError(t, err)
	s, err := Parse(b)
	require.NoError(t, err)
	dir := t.TempDir()
	tg := New(s, Options{NoPreflight: true})
	eps, err := tg.Start(ctx, harness.Env{RunID: "spec-layer-test-" + filepath.Base(dir), Dir: dir, DiskLayer: true})
	defer func() { assert.NoError(t, tg.Stop(context.Background())) }()
	require.NoError(t, err)
	pc := tg.(nemesis.PowerCutter)
	require.Equal(t, []string{"c1"}, pc.PowerNodes(), "%v", tg.(nemesis.PowerExplainer).PowerUnreachable())

	c := fencing.NewClient(eps.Resources[0].URL, nil)
	acq := c.Acquire(opCtx(t, 5*time.Second), "k", "a", time.Second)
	require.Equal(t, fencing.Ok, acq.Outcome, "%+v", acq)
	require.Equal(t, fencing.Ok, c.Write(opCtx(t, 5*time.Second), "k", acq.Token, []byte("v")).Outcome)
	mnt := filepath.Join(dir, "nodes", "c1", "mnt")
	entries, err := os.ReadDir(mnt)
	require.NoError(t, err)
	assert.NotEmpty(t, entries, "the container wrote through the layer")

	_, err = pc.CutPower(ctx, "c1")
	require.NoError(t, err)
	require.NoError(t, tg.(nemesis.Restarter).StartNode(ctx, "c1", false))
	rd := c.Read(opCtx(t, 5*time.Second), "k")
	require.Equal(t, fencing.Ok, rd.Outcome, "%+v", rd)
	assert.Equal(t, "v", string(rd.Value), "what the node fsynced survives the power loss")
}

// Jepsen's majorities ring on three image nodes, seen from every side: each
// node reaches the one before it and not the one after (a one-way cycle),
// asked from inside each container's namespace.
func TestImageNodesRing(t *testing.T) {
	dockertest.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	tags, err := docker.EnsureImages(ctx, nil, docker.ImageFenced)
	require.NoError(t, err)
	var table []any
	for _, name := range []string{"a", "b", "c"} {
		table = append(table, map[string]any{"name": name, "roles": []string{"issuer", "resource"}, "image": tags[docker.ImageFenced], "port": 7000,
			"data": "/data", "clock": "none", "command": []string{"/usr/local/bin/fenced", "--addr", "0.0.0.0:{port}", "--backend", "memory", "--data", "{data}"}})
	}
	b, err := json.Marshal(map[string]any{"name": "three-images", "nodes": table})
	require.NoError(t, err)
	s, err := Parse(b)
	require.NoError(t, err)
	dir := t.TempDir()
	tg := New(s, Options{NoPreflight: true})
	_, err = tg.Start(ctx, harness.Env{RunID: "spec-image-ring-" + filepath.Base(dir), Dir: dir})
	defer func() { assert.NoError(t, tg.Stop(context.Background())) }()
	require.NoError(t, err)
	p := tg.(*Target)
	addr := func(n string) string {
		a, err := p.NetAddr(n, "")
		require.NoError(t, err)
		return a
	}
	require.NoError(t, tg.(nemesis.Grudger).Grudge(ctx, map[string][]string{"a": {"b"}, "b": {"c"}, "c": {"a"}}))
	for _, pair := range [][2]string{{"a", "b"}, {"b", "c"}, {"c", "a"}} {
		assert.Error(t, askFrom(p.Runtime(), pair[0], addr(pair[1])), "%s cannot reach %s", pair[0], pair[1])
		assert.NoError(t, askFrom(p.Runtime(), pair[1], addr(pair[0])), "%s reaches %s", pair[1], pair[0])
	}
	require.NoError(t, tg.(nemesis.Partitioner).HealPartition(ctx))
	assert.NoError(t, askFrom(p.Runtime(), "a", addr("b")), "healed")
}
