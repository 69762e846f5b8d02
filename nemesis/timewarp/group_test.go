//go:build linux && amd64

package timewarp

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/fencing"
)

// startGroupProbe starts argv in a process group of its own behind a shell
// that stays its parent, as a command node's wrapper script would.
func startGroupProbe(t *testing.T, env []string, argv ...string) *probe {
	t.Helper()
	script := `"$@"`
	cmd := exec.Command("sh", append([]string{"-c", script, "sh"}, argv...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Env = append(os.Environ(), env...)
	return startCmd(t, cmd)
}

func startCmd(t testing.TB, cmd *exec.Cmd) *probe {
	t.Helper()
	p, stop := startCmdStop(t, cmd)
	t.Cleanup(stop)
	return p
}

// startCmdStop starts a probe and returns the function that ends it.
func startCmdStop(t testing.TB, cmd *exec.Cmd) (*probe, func()) {
	t.Helper()
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	require.NoError(t, err)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	p := &probe{t: t, cmd: cmd, in: in, exited: make(chan struct{})}
	p.out = bufio.NewScanner(out)
	go func() { Wait(cmd); close(p.exited) }()
	stop := func() {
		in.Close()
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-p.exited
	}
	if !p.out.Scan() || p.out.Text() != "ready" {
		stop()
		t.Fatalf("probe did not start")
	}
	return p, stop
}

func TestGroupFollowsTheNodeAcrossRestarts(t *testing.T) {
	bin := filepath.Join(builds(t), "goprobe-static")
	pr := startGroupProbe(t, nil, bin)
	g := NewGroup(ProcessGroup(pr.pid()), GroupOptions{})
	defer g.Close()

	// Nothing is touched before the first offset.
	rep, err := g.Sync()
	require.NoError(t, err)
	assert.Equal(t, Report{}, rep)

	rep, err = g.SetOffset(time.Hour)
	require.NoError(t, err)
	assert.Equal(t, 2, rep.Processes, "the shell and the probe")
	assert.Equal(t, 2, rep.Injected)
	assert.InDelta(t, 3600, pr.skew("now", time.Nanosecond).Seconds(), tolerance.Seconds())

	rep, err = g.SetOffset(-time.Minute)
	require.NoError(t, err)
	assert.Equal(t, 0, rep.Injected, "a later change is a memory write")
	assert.InDelta(t, -60, pr.skew("now", time.Nanosecond).Seconds(), tolerance.Seconds())

	// The node restarts: the new processes get the offset in force at the
	// start hook, before anything else asks them the time.
	syscall.Kill(-pr.pid(), syscall.SIGKILL)
	<-pr.exited
	again := startGroupProbe(t, nil, bin)
	g.SetScope(ProcessGroup(again.pid()))
	rep, err = g.Sync()
	require.NoError(t, err)
	assert.Equal(t, 2, rep.Injected)
	assert.InDelta(t, -60, again.skew("now", time.Nanosecond).Seconds(), tolerance.Seconds())

	_, err = g.SetOffset(0)
	require.NoError(t, err)
	assert.Less(t, again.skew("now", time.Nanosecond).Abs(), tolerance)
	assert.True(t, again.running())
}

// A dynamically linked program gets both mechanisms, and its clock moves
// once, not twice: the preload library reads the wall clock from the
// kernel, never through the patched vDSO.
func TestPreloadAndPatchTogether(t *testing.T) {
	lib, err := Preload(context.Background())
	require.NoError(t, err)
	dir := t.TempDir()
	file := filepath.Join(dir, "offset")
	require.NoError(t, fencing.WriteClockOffset(file, 0))
	env := PreloadEnv(nil, lib, file)
	env = append(env, PreloadRefreshEnv+"=1")

	c := startGroupProbe(t, env, filepath.Join(builds(t), "cprobe"))
	require.True(t, preloadedInGroup(t, c.pid()), "the library is loaded")
	g := NewGroup(ProcessGroup(c.pid()), GroupOptions{Also: func(d time.Duration) error { return fencing.WriteClockOffset(file, d) }})
	defer g.Close()
	_, err = g.SetOffset(2 * time.Hour)
	require.NoError(t, err)
	time.Sleep(5 * time.Millisecond) // the library's refresh interval
	got := c.ask("all")
	host := wallMinusMono()
	mono := time.Duration(got[4])
	for i, what := range []string{"clock_gettime", "coarse", "gettimeofday"} {
		wall := time.Duration(got[i])
		if i == 2 {
			wall *= time.Microsecond
		}
		assert.InDelta(t, 7200, (wall - mono - host).Seconds(), 0.1, what)
	}
	assert.InDelta(t, 7200, (time.Duration(got[3])*time.Second - mono - host).Seconds(), 1.1, "time")
	_, err = g.SetOffset(0)
	require.NoError(t, err)
	time.Sleep(5 * time.Millisecond)
	assert.Less(t, c.skew("now", time.Nanosecond).Abs(), tolerance)

	// The same library under Python, whose time.time() goes through libc.
	if python, err := exec.LookPath("python3"); err == nil {
		py := startGroupProbe(t, env, python, "testdata/pyprobe.py")
		require.NoError(t, fencing.WriteClockOffset(file, -3*time.Minute))
		time.Sleep(5 * time.Millisecond)
		assert.InDelta(t, -180, py.skew("now", time.Nanosecond).Seconds(), tolerance.Seconds(), "preload alone")
		require.NoError(t, fencing.WriteClockOffset(file, 0))
	}
}

func preloadedInGroup(t *testing.T, pgid int) bool {
	pids, err := ProcessGroup(pgid)()
	require.NoError(t, err)
	for _, pid := range pids {
		if Preloaded(pid, PreloadName) {
			return true
		}
	}
	return false
}

// A process that execs another program after its patch (a launcher, a
// pyenv shim, a shell's exec) is patched again: the new image has a new
// vDSO.
func TestGroupFollowsExec(t *testing.T) {
	bin := filepath.Join(builds(t), "goprobe-static")
	cmd := exec.Command("sh", "-c", `echo ready; read go; exec "$@"`, "sh", bin)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	pr := startCmd(t, cmd)
	g := NewGroup(ProcessGroup(pr.pid()), GroupOptions{})
	defer g.Close()
	rep, err := g.SetOffset(time.Hour)
	require.NoError(t, err)
	assert.Equal(t, 1, rep.Injected, "the shell")

	_, err = io.WriteString(pr.in, "go\n")
	require.NoError(t, err)
	require.True(t, pr.out.Scan())
	require.Equal(t, "ready", pr.out.Text(), "the probe took the shell's place")
	rep, err = g.SetOffset(time.Hour)
	require.NoError(t, err)
	assert.Equal(t, 1, rep.Injected, "the new image")
	assert.InDelta(t, 3600, pr.skew("now", time.Nanosecond).Seconds(), tolerance.Seconds())
}
