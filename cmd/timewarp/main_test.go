package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/fencecheck/fencecheck/harness/docker"
	"github.com/fencecheck/fencecheck/harness/docker/dockertest"
)

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// TestMain removes the programs built for this run.
func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// binaries builds this command and timewarp's clock probe, both static.
func binaries(t *testing.T) (helper, probe string) {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "timewarp-cmd-")
		if buildErr != nil {
			return
		}
		for _, b := range [][2]string{{"timewarp", "."}, {"goprobe", "../../nemesis/timewarp/testdata/goprobe"}} {
			cmd := exec.Command("go", "build", "-o", filepath.Join(binDir, b[0]), b[1])
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
			if out, err := cmd.CombinedOutput(); err != nil {
				buildErr = fmt.Errorf("building %s: %w: %s", b[0], err, out)
				return
			}
		}
	})
	require.NoError(t, buildErr)
	return filepath.Join(binDir, "timewarp"), filepath.Join(binDir, "goprobe")
}

// lines talks a line protocol over a pipe pair.
type lines struct {
	t   *testing.T
	in  io.Writer
	out *bufio.Scanner
}

func (l lines) ask(cmd string) string {
	l.t.Helper()
	_, err := io.WriteString(l.in, cmd+"\n")
	require.NoError(l.t, err)
	require.True(l.t, l.out.Scan(), "no answer to %q", cmd)
	return l.out.Text()
}

// skew is the probe's wall clock minus this machine's, from its answer to
// "now" (its wall clock and CLOCK_MONOTONIC, read together) and this
// process's own pair: the median of three.
func (l lines) skew() time.Duration {
	l.t.Helper()
	var s []time.Duration
	for i := 0; i < 3; i++ {
		f := strings.Fields(l.ask("now"))
		require.Len(l.t, f, 2)
		s = append(s, pairSkew(l.t, f[0], f[1]))
	}
	slices.Sort(s)
	return s[1]
}

func pairSkew(t *testing.T, wall, mono string) time.Duration {
	t.Helper()
	w, err1 := strconv.ParseInt(wall, 10, 64)
	m, err2 := strconv.ParseInt(mono, 10, 64)
	require.NoError(t, errors.Join(err1, err2))
	return time.Duration(w-m) - wallMinusMono()
}

// wallMinusMono is this process's wall clock minus CLOCK_MONOTONIC, from a
// wall reading bracketed by two monotonic ones less than 100 µs apart.
func wallMinusMono() time.Duration {
	for {
		var a, b unix.Timespec
		unix.ClockGettime(unix.CLOCK_MONOTONIC, &a)
		wall := time.Now().UnixNano()
		unix.ClockGettime(unix.CLOCK_MONOTONIC, &b)
		if b.Nano()-a.Nano() < 100_000 {
			return time.Duration(wall - (a.Nano()+b.Nano())/2)
		}
	}
}

func start(t *testing.T, cmd *exec.Cmd) (lines, io.Closer) {
	t.Helper()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	require.NoError(t, err)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		in.Close()
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
	})
	return lines{t: t, in: in, out: bufio.NewScanner(out)}, in
}

// The helper run from the host: it is not the probe's parent, the way it
// is not the target's in a container.
func TestServeAndSet(t *testing.T) {
	helper, probeBin := binaries(t)
	probeCmd := exec.Command(probeBin)
	probe, _ := start(t, probeCmd)
	require.True(t, probe.out.Scan())
	require.Equal(t, "ready", probe.out.Text())
	pid := probeCmd.Process.Pid // also its process group (Setpgid)

	srv := exec.Command(helper, "serve", "--pgid", strconv.Itoa(pid))
	h, stdin := start(t, srv)
	assert.Equal(t, "ok processes=1 injected=1 preload-only=0", h.ask("offset 90000000000"))
	assert.InDelta(t, 90, probe.skew().Seconds(), 0.05)
	assert.Equal(t, "ok processes=1 injected=0 preload-only=0", h.ask("offset -30000000000"))
	assert.InDelta(t, -30, probe.skew().Seconds(), 0.05)
	assert.Equal(t, "ok offset=-30000000000", h.ask("status"))
	assert.Contains(t, h.ask("offset soon"), "error offset")
	assert.Contains(t, h.ask("launch"), "error unknown command")
	// The harness goes away: the helper heals before it exits.
	require.NoError(t, stdin.Close())
	require.NoError(t, srv.Wait())
	assert.Less(t, probe.skew().Abs(), 50*time.Millisecond)

	// One shot, stateless: finds the patch the serve left.
	b, err := exec.Command(helper, "set", "--pid", strconv.Itoa(pid), "--offset", "2m").CombinedOutput()
	require.NoError(t, err, "%s", b)
	assert.Contains(t, string(b), "already patched")
	assert.InDelta(t, 120, probe.skew().Seconds(), 0.05)

	assert.Equal(t, 64, run(nil, nil, io.Discard, io.Discard), "usage")
	assert.Equal(t, 64, run([]string{"set"}, nil, io.Discard, io.Discard), "set needs --pid")
}

// The way to a container whose processes this machine cannot see (Docker
// Desktop, a remote engine): a helper container from a scratch image that
// joins the target container's PID namespace with only CAP_SYS_PTRACE, and
// is spoken to through the engine's attach stream. The target is a static
// Go program; its own clock answers over HTTP.
func TestHelperContainer(t *testing.T) {
	dockertest.Require(t)
	helper, probeBin := binaries(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cli, err := docker.Connect(ctx)
	require.NoError(t, err)
	defer cli.Close()
	var files []docker.File
	for name, path := range map[string]string{"/timewarp": helper, "/goprobe": probeBin} {
		data, err := os.ReadFile(path)
		require.NoError(t, err)
		files = append(files, docker.File{Name: "rootfs" + name, Mode: 0o755, Data: data})
	}
	files = append(files, docker.File{Name: "rootfs/tmp", Dir: true, Mode: 0o1777})
	tag, _, err := docker.BuildImage(ctx, cli, docker.ImageSpec{Repository: "fencecheck/test-timewarp",
		Dockerfile: "FROM scratch\nCOPY rootfs/ /\n", Files: files}, nil)
	require.NoError(t, err)
	docker.PruneSuperseded(ctx, cli, "fencecheck/test-timewarp", tag, time.Hour)

	runID := fmt.Sprintf("timewarp-helper-%d", time.Now().UnixNano())
	rt, err := docker.New(ctx, runID, docker.Options{NoWatchdog: true})
	require.NoError(t, err)
	defer func() {
		require.NoError(t, rt.Close(context.Background()))
		c, n := dockertest.Leftovers(t, runID)
		assert.Zero(t, c+n, "leftovers")
	}()
	nw, err := rt.Network(ctx)
	require.NoError(t, err)
	target, err := rt.Run(ctx, docker.ContainerSpec{Node: "target", Image: tag, IP: nw.HostIP(0),
		Cmd: []string{"/goprobe", "-http", "0.0.0.0:8080"}, Ports: []int{8080}, User: "1000:1000"})
	require.NoError(t, err)
	url := "http://" + target.Addr(8080) + "/now"
	require.Eventually(t, func() bool {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
		}
		return err == nil
	}, 10*time.Second, 10*time.Millisecond)
	skew := func() time.Duration {
		var s []time.Duration
		for i := 0; i < 3; i++ {
			resp, err := http.Get(url)
			require.NoError(t, err)
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			f := strings.Fields(string(b))
			require.Len(t, f, 2, "%q", b)
			s = append(s, pairSkew(t, f[0], f[1]))
		}
		slices.Sort(s)
		return s[1]
	}

	// What the engine-API helper does: --pid container:<target>,
	// --cap-drop ALL --cap-add SYS_PTRACE, stdin and stdout attached.
	created, err := cli.ContainerCreate(ctx,
		&container.Config{Image: tag, Cmd: []string{"/timewarp", "serve"},
			OpenStdin: true, StdinOnce: true, AttachStdin: true, AttachStdout: true, AttachStderr: true,
			Labels: map[string]string{docker.LabelProject: "1", docker.LabelRun: runID, docker.LabelPID: strconv.Itoa(os.Getpid())}},
		&container.HostConfig{PidMode: container.PidMode("container:" + target.ID),
			CapDrop: []string{"ALL"}, CapAdd: []string{"SYS_PTRACE"}, NetworkMode: "none"},
		nil, nil, "fencecheck-"+runID+"-timewarp")
	require.NoError(t, err)
	att, err := cli.ContainerAttach(ctx, created.ID, container.AttachOptions{Stream: true, Stdin: true, Stdout: true, Stderr: true})
	require.NoError(t, err)
	defer att.Close()
	pr, pw := io.Pipe()
	var stderr strings.Builder
	go func() { stdcopy.StdCopy(pw, &stderr, att.Reader); pw.Close() }()
	require.NoError(t, cli.ContainerStart(ctx, created.ID, container.StartOptions{}))
	h := lines{t: t, in: att.Conn, out: bufio.NewScanner(pr)}

	assert.Equal(t, "ok processes=1 injected=1 preload-only=0", h.ask("offset 90000000000"), "stderr: %s", stderr.String())
	assert.InDelta(t, 90, skew().Seconds(), 0.05, "the target's own clock")
	assert.Equal(t, "ok processes=1 injected=0 preload-only=0", h.ask("offset -45000000000"))
	assert.InDelta(t, -45, skew().Seconds(), 0.05)

	// The harness hangs up: the helper heals and exits 0.
	waitC, errC := cli.ContainerWait(ctx, created.ID, container.WaitConditionNotRunning)
	require.NoError(t, att.CloseWrite())
	select {
	case w := <-waitC:
		assert.Zero(t, w.StatusCode, "stderr: %s", stderr.String())
	case err := <-errC:
		t.Fatal(err)
	}
	assert.Less(t, skew().Abs(), 50*time.Millisecond, "healed")
	st, err := rt.State(ctx, "target")
	require.NoError(t, err)
	assert.True(t, st.Running)
}
