package docker_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/harness/docker"
	"github.com/fencecheck/fencecheck/harness/docker/dockertest"
	"github.com/fencecheck/fencecheck/nemesis/lazyfs"
	"github.com/fencecheck/fencecheck/nemesis/lazyfs/lazyfstest"
)

// A test binary re-run with layerHarnessEnv plays a harness whose run
// directory holds a power-loss layer (a FUSE mount it serves itself, as
// fencecheck did before its local agent), and gets killed; with
// layerWatchdogEnv its runtime (and watchdog) is Docker's. The layer is
// served as every test's is (lazyfstest.Serve): should the test binary die
// before the harness is killed, the harness lets its layer go and ends.
const (
	layerHarnessEnv  = "FENCECHECK_TEST_LAYER_HARNESS"
	layerWatchdogEnv = "FENCECHECK_TEST_LAYER_WATCHDOG"
)

func layerHarness(run string, watchdog bool) {
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "layer harness:", err)
		os.Exit(1)
	}
	dir := filepath.Join(os.TempDir(), "fencecheck-run-"+run)
	var rt *docker.Runtime
	if watchdog {
		var err error
		if rt, err = docker.New(context.Background(), run, docker.Options{}); err != nil {
			fail(err)
		}
		if dir, err = rt.RunDir(); err != nil {
			fail(err)
		}
	} else {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			fail(err)
		}
		if err := os.WriteFile(filepath.Join(dir, ".owner-pid"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
			fail(err)
		}
	}
	if err := lazyfstest.Serve(lazyfstest.Spec{Backing: filepath.Join(dir, "n1"), Mount: filepath.Join(dir, "n1.mnt")}); err != nil {
		fail(err)
	}
	// The runtime holds the watchdog's pipe: collected while the layer is
	// served (which allocates, unlike the select{} this was), the pipe's
	// finalizer would close it, and the watchdog sweep the run under a live
	// harness (it did: the backing folder removed, the mount point left).
	runtime.KeepAlive(rt)
	os.Exit(0)
}

// startLayerHarness starts one and kills it with SIGKILL once its layer is
// mounted and holds a file; it returns the run's directory, whose layer is
// then dead.
func startLayerHarness(t *testing.T, run string, watchdog bool) string {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), layerHarnessEnv+"="+run)
	if watchdog {
		cmd.Env = append(cmd.Env, layerWatchdogEnv+"=1")
	}
	layer := lazyfstest.StartCommand(t, cmd)
	dir := filepath.Join(os.TempDir(), "fencecheck-run-"+run)
	require.Equal(t, filepath.Join(dir, "n1.mnt"), layer.Dir())
	require.NoError(t, os.WriteFile(filepath.Join(layer.Dir(), "data"), []byte("x"), 0o644))
	layer.Kill()
	select {
	case <-layer.Exited():
	case <-time.After(10 * time.Second):
		t.Fatal("the killed harness did not end")
	}
	return dir
}

// issue 23: kill -9 of a harness whose run directory holds a power-loss
// layer: its watchdog detaches the dead mount and removes the directory
// (before: the removal failed on the dead mount, "transport endpoint is not
// connected", and the folder stayed with it).
func TestWatchdogDetachesADeadLayerAndRemovesTheRunDir(t *testing.T) {
	dockertest.Require(t)
	lazyfstest.Require(t)
	run := runID(t)
	dir := startLayerHarness(t, run, true)
	killed := time.Now()
	require.Eventually(t, func() bool {
		_, err := os.Stat(dir)
		return errors.Is(err, os.ErrNotExist)
	}, 30*time.Second, 100*time.Millisecond, "the watchdog did not remove %s", dir)
	t.Logf("removed %.1fs after SIGKILL", time.Since(killed).Seconds())
}

// `fencecheck clean` removes the run directories whose dead layers it
// detached, even one whose owner file an earlier, failed removal took
// (before: it detached the mount and left the folder).
func TestCleanRemovesTheRunDirsOfTheLayersItDetaches(t *testing.T) {
	lazyfstest.Require(t)
	run := runID(t)
	dir := startLayerHarness(t, run, false)
	require.NoError(t, os.Remove(filepath.Join(dir, ".owner-pid")))
	var st syscall.Stat_t
	require.Eventually(t, func() bool {
		return errors.Is(syscall.Stat(filepath.Join(dir, "n1.mnt"), &st), syscall.ENOTCONN)
	}, 5*time.Second, 50*time.Millisecond, "a killed server leaves its mount dead")

	points, err := lazyfs.SweepDead()
	require.NoError(t, err)
	assert.Contains(t, points, filepath.Join(dir, "n1.mnt"))
	removed, err := docker.SweepRunDirsHolding(points)
	require.NoError(t, err)
	assert.Contains(t, fmt.Sprint(removed), dir)
	assert.NoDirExists(t, dir)
}
