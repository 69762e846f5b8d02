package docker_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/network"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/harness/docker"
	"github.com/fencecheck/fencecheck/harness/docker/dockertest"
)

// A test binary re-run with this variable plays a harness that gets killed.
const helperHarnessEnv = "FENCECHECK_TEST_HELPER_HARNESS"

func TestMain(m *testing.M) {
	if run := os.Getenv(helperHarnessEnv); run != "" {
		helperHarness(run, os.Getenv("FENCECHECK_TEST_IMAGE"))
		return
	}
	if run := os.Getenv(layerHarnessEnv); run != "" {
		layerHarness(run, os.Getenv(layerWatchdogEnv) == "1")
		return
	}
	os.Exit(m.Run())
}

// helperHarness starts a runtime with its watchdog and one container, says
// "ready" and waits to be killed.
func helperHarness(run, image string) {
	ctx := context.Background()
	rt, err := docker.New(ctx, run, docker.Options{})
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	nw, err := rt.Network(ctx)
	if err == nil {
		_, err = rt.RunDir()
	}
	if err == nil {
		_, err = rt.Run(ctx, etcdSpec("victim", image, nw.HostIP(0), ""))
	}
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fmt.Println("ready")
	select {}
}

func etcdSpec(node, image, ip, dataDir string) docker.ContainerSpec {
	spec := docker.ContainerSpec{
		Node:  node,
		Image: image,
		Cmd: []string{"/usr/local/bin/etcd", "--name", node, "--data-dir", "/data",
			"--listen-client-urls", "http://0.0.0.0:2379", "--advertise-client-urls", "http://" + ip + ":2379"},
		IP:    ip,
		Ports: []int{2379},
	}
	if dataDir != "" {
		spec.Binds = []docker.Bind{{Host: dataDir, Container: "/data"}}
	}
	return spec
}

func etcdImage(t *testing.T) string {
	t.Helper()
	dockertest.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	tags, err := docker.EnsureImages(ctx, testWriter{t}, docker.ImageEtcd)
	require.NoError(t, err)
	return tags[docker.ImageEtcd]
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func runID(t *testing.T) string {
	return fmt.Sprintf("test-%s-%d", strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-")), time.Now().UnixNano()%1e9)
}

// healthy asks etcd's /health through the published port, with a short
// timeout: a frozen container accepts nothing and answers nothing.
func healthy(addr string) error {
	c := http.Client{Timeout: 700 * time.Millisecond}
	resp, err := c.Get("http://" + addr + "/health")
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

func waitHealthy(t *testing.T, addr string) {
	t.Helper()
	require.Eventually(t, func() bool { return healthy(addr) == nil }, 30*time.Second, 200*time.Millisecond, "etcd at %s never became healthy", addr)
}

func TestImageCachedByContent(t *testing.T) {
	dockertest.Require(t)
	ctx := context.Background()
	cli, err := docker.Connect(ctx)
	require.NoError(t, err)
	defer cli.Close()
	spec := docker.ImageSpec{
		Repository: "fencecheck/test-cache",
		Dockerfile: "FROM scratch\nCOPY rootfs/ /\n",
		Files: []docker.File{
			{Name: "rootfs/tmp", Dir: true, Mode: 0o1777},
			{Name: "rootfs/hello", Mode: 0o644, Data: []byte(t.Name() + time.Now().String())},
		},
	}
	tag, built, err := docker.BuildImage(ctx, cli, spec, nil)
	require.NoError(t, err)
	assert.True(t, built)
	t.Cleanup(func() { cli.ImageRemove(ctx, tag, imageRemoveOptions) })
	again, built, err := docker.BuildImage(ctx, cli, spec, nil)
	require.NoError(t, err)
	assert.False(t, built, "same content must not be built twice")
	assert.Equal(t, tag, again)

	_, _, err = docker.BuildImage(ctx, cli, docker.ImageSpec{Repository: "fencecheck/x", Dockerfile: "# syntax=docker/dockerfile:1\nFROM scratch\n"}, nil)
	assert.ErrorContains(t, err, "syntax")
}

func TestContainerLifecycleAndFaults(t *testing.T) {
	image := etcdImage(t)
	ctx := context.Background()
	run := runID(t)
	rt, err := docker.New(ctx, run, docker.Options{Log: testWriter{t}})
	require.NoError(t, err)
	defer func() {
		require.NoError(t, rt.Close(ctx))
		c, n := dockertest.Leftovers(t, run)
		assert.Zero(t, c, "containers left after Close")
		assert.Zero(t, n, "networks left after Close")
	}()
	nw, err := rt.Network(ctx)
	require.NoError(t, err)
	data := t.TempDir()
	c, err := rt.Run(ctx, etcdSpec("n1", image, nw.HostIP(0), data))
	require.NoError(t, err)
	_, _ = rt.Run(ctx, etcdSpec("n2", image, nw.HostIP(1), ""))
	addr := c.Addr(2379)
	assert.True(t, strings.HasPrefix(addr, "127.0.0.1:"), "ports are published on loopback only: %s", addr)
	waitHealthy(t, addr)

	// Pause freezes the process: it stops answering, then answers again.
	// On this machine it takes the host path: the container's freezer
	// file says frozen, and the engine does not know (its state is not
	// paused); the thaw reverses it.
	require.NoError(t, rt.Pause(ctx, "n1"))
	assert.Error(t, healthy(addr), "a paused member must not answer")
	if state, err := os.ReadFile("/sys/fs/cgroup/freezer/docker/" + c.ID + "/freezer.state"); err == nil {
		assert.Equal(t, "FROZEN", strings.TrimSpace(string(state)), "frozen through its freezer file")
		st, err := rt.State(ctx, "n1")
		require.NoError(t, err)
		assert.False(t, st.Paused, "not through the engine")
	} else {
		t.Logf("no cgroup v1 freezer file here (%v): the pause took another path", err)
	}
	require.NoError(t, rt.Unpause(ctx, "n1"))
	waitHealthy(t, addr)
	// A member frozen from this machine is still killed (the signal
	// lands as it thaws), and started again.
	require.NoError(t, rt.Pause(ctx, "n1"))
	killCtx, cancelKill := context.WithTimeout(ctx, 20*time.Second)
	require.NoError(t, rt.Kill(killCtx, "n1"), "a frozen member is killed, not waited on")
	cancelKill()
	require.NoError(t, rt.Start(ctx, "n1"))
	waitHealthy(t, addr)

	// Partition rules live in our chain in the container's namespace.
	peer := nw.HostIP(1)
	require.NoError(t, rt.Partition(ctx, "n1", []string{peer}))
	require.NoError(t, rt.Partition(ctx, "n1", []string{peer}), "partition is idempotent")
	rules := chainRules(t, rt, "n1")
	assert.Contains(t, rules, "-A FENCECHECK -s "+peer+"/32 -j DROP")
	assert.Contains(t, rules, "-A FENCECHECK -d "+peer+"/32 -j DROP")
	assert.Equal(t, 1, strings.Count(allRules(t, rt, "n1"), "-A INPUT -j FENCECHECK"))

	// Kill -9 and start: same host port, data kept, partition re-applied.
	pid, err := rt.PID(ctx, "n1")
	require.NoError(t, err)
	require.NoError(t, rt.Kill(ctx, "n1"))
	assert.Error(t, healthy(addr))
	require.NoError(t, rt.Start(ctx, "n1"))
	newPID, err := rt.PID(ctx, "n1")
	require.NoError(t, err)
	assert.NotEqual(t, pid, newPID)
	waitHealthy(t, addr)
	assert.Contains(t, chainRules(t, rt, "n1"), "-s "+peer+"/32 -j DROP", "rules re-applied after restart")
	_, err = os.Stat(data + "/member")
	assert.NoError(t, err, "etcd's data is on the bind mount")

	// A heal that comes as the node starts again, after the start read the
	// cut and before it put it back, leaves no rule behind: the start puts
	// back what it read, and without one change at a time a partition
	// healed then stayed in the new namespace (etcd under all: a member
	// cut off for 25 s with no fault on it).
	read := make(chan struct{}, 1)
	restore := docker.OnCutRead(func(string) { read <- struct{}{}; time.Sleep(300 * time.Millisecond) })
	require.NoError(t, rt.Kill(ctx, "n1"))
	started := make(chan error, 1)
	go func() { started <- rt.Start(ctx, "n1") }()
	<-read
	require.NoError(t, rt.Heal(ctx, "n1"))
	require.NoError(t, <-started)
	restore()
	assert.Empty(t, rt.CutOf("n1").Both)
	assert.NotContains(t, allRules(t, rt, "n1"), peer+"/32 -j DROP", "a heal during a start leaves no cut")
	waitHealthy(t, addr)
	require.NoError(t, rt.Partition(ctx, "n1", []string{peer}))

	require.NoError(t, rt.HealAll(ctx))
	assert.NotContains(t, chainRules(t, rt, "n1"), "DROP")

	logs := t.TempDir()
	require.NoError(t, rt.SaveLogs(ctx, logs))
	b, err := os.ReadFile(logs + "/n1.log")
	require.NoError(t, err)
	assert.Contains(t, string(b), "serving client traffic")
}

func chainRules(t *testing.T, rt *docker.Runtime, node string) string {
	return nsenter(t, rt, node, "-S", docker.PartitionChain)
}

func allRules(t *testing.T, rt *docker.Runtime, node string) string {
	return nsenter(t, rt, node, "-S")
}

func nsenter(t *testing.T, rt *docker.Runtime, node string, args ...string) string {
	t.Helper()
	pid, err := rt.PID(context.Background(), node)
	require.NoError(t, err)
	out, err := exec.Command("nsenter", append([]string{"-t", fmt.Sprint(pid), "-n", "iptables", "-w"}, args...)...).CombinedOutput()
	require.NoError(t, err, "%s", out)
	return string(out)
}

// A harness killed with SIGKILL runs no deferred cleanup; its watchdog must
// sweep the run at once.
func TestWatchdogSweepsAfterSIGKILL(t *testing.T) {
	image := etcdImage(t)
	run := runID(t)
	exe, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), helperHarnessEnv+"="+run, "FENCECHECK_TEST_IMAGE="+image)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	line, _ := bufio.NewReader(out).ReadString('\n')
	require.Equal(t, "ready\n", line)
	require.DirExists(t, filepath.Join(os.TempDir(), "fencecheck-run-"+run))
	c, n := dockertest.Leftovers(t, run)
	require.Equal(t, 1, c)
	require.Equal(t, 1, n)

	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	cmd.Wait()
	killed := time.Now()
	require.Eventually(t, func() bool {
		c, n := dockertest.Leftovers(t, run)
		_, err := os.Stat(filepath.Join(os.TempDir(), "fencecheck-run-"+run))
		return c == 0 && n == 0 && os.IsNotExist(err)
	}, 30*time.Second, 100*time.Millisecond, "the watchdog did not sweep run %s (containers, network, run directory)", run)
	t.Logf("swept %.1fs after SIGKILL", time.Since(killed).Seconds())
}

// Objects whose owner pid is dead are swept by the next runtime.
func TestOrphansSweptAtStart(t *testing.T) {
	dockertest.Require(t)
	ctx := context.Background()
	cli, err := docker.Connect(ctx)
	require.NoError(t, err)
	defer cli.Close()
	run := runID(t)
	// A pid that cannot be alive: above the kernel's pid_max default range.
	_, err = cli.NetworkCreate(ctx, "fencecheck-"+run, network.CreateOptions{Labels: map[string]string{
		docker.LabelProject: "1", docker.LabelRun: run, docker.LabelPID: "2147483646",
	}})
	require.NoError(t, err)
	rt, err := docker.New(ctx, runID(t), docker.Options{NoWatchdog: true})
	require.NoError(t, err)
	defer rt.Close(ctx)
	_, n := dockertest.Leftovers(t, run)
	assert.Zero(t, n, "an orphaned network must be swept when a runtime starts")
}

var imageRemoveOptions = image.RemoveOptions{Force: true, PruneChildren: true}
