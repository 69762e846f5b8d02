package docker_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/fencecheck/fencecheck/harness/docker"
	"github.com/fencecheck/fencecheck/harness/docker/dockertest"
	"github.com/fencecheck/fencecheck/nemesis/timewarp"
)

// probeImage is a scratch image with timewarp's clock probe twice: static
// (/goprobe) and built with cgo (/goprobe-cgo, with the libraries and the
// loader it needs), both answering GET /now with their own wall clock.
func probeImage(t testing.TB) string {
	t.Helper()
	dockertest.Require(t)
	dir := t.TempDir()
	src := filepath.Join("..", "..", "nemesis", "timewarp", "testdata", "goprobe")
	for _, b := range []struct{ out, cgo string }{{"goprobe", "0"}, {"goprobe-cgo", "1"}} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, b.out), src)
		cmd.Env = append(os.Environ(), "CGO_ENABLED="+b.cgo)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
	}
	files := []docker.File{{Name: "rootfs/tmp", Dir: true, Mode: 0o1777}}
	add := func(name, path string) {
		data, err := os.ReadFile(path)
		require.NoError(t, err)
		files = append(files, docker.File{Name: "rootfs" + name, Mode: 0o755, Data: data})
	}
	add("/goprobe", filepath.Join(dir, "goprobe"))
	add("/goprobe-cgo", filepath.Join(dir, "goprobe-cgo"))
	ldd, err := exec.Command("ldd", filepath.Join(dir, "goprobe-cgo")).Output()
	require.NoError(t, err)
	dirs := map[string]bool{}
	for _, m := range regexp.MustCompile(`(/\S+)`).FindAllString(string(ldd), -1) {
		real, err := filepath.EvalSymlinks(m)
		require.NoError(t, err)
		add(m, real)
		for d := filepath.Dir(m); d != "/"; d = filepath.Dir(d) {
			dirs[d] = true
		}
	}
	for d := range dirs {
		files = append(files, docker.File{Name: "rootfs" + d, Dir: true, Mode: 0o755})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cli, err := docker.Connect(ctx)
	require.NoError(t, err)
	defer cli.Close()
	tag, _, err := docker.BuildImage(ctx, cli, docker.ImageSpec{Repository: "fencecheck/test-clockprobe",
		Dockerfile: "FROM scratch\nCOPY rootfs/ /\n", Files: sortedDirsFirst(files)}, nil)
	require.NoError(t, err)
	docker.PruneSuperseded(ctx, cli, "fencecheck/test-clockprobe", tag, time.Hour)
	return tag
}

func sortedDirsFirst(files []docker.File) []docker.File {
	var dirs, rest []docker.File
	for _, f := range files {
		if f.Dir {
			dirs = append(dirs, f)
		} else {
			rest = append(rest, f)
		}
	}
	return append(dirs, rest...)
}

// probeSkew is how far a probe's wall clock is from this machine's: GET
// url answers its wall clock and CLOCK_MONOTONIC read together, and this
// machine's monotonic clock is one for every process and container, so the
// two pairs compare however long the answer took. The median of three
// (either side may lose the CPU between its two readings).
func probeSkew(url string) (time.Duration, error) {
	var s []time.Duration
	for i := 0; i < 3; i++ {
		resp, err := http.Get(url)
		if err != nil {
			return 0, err
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return 0, err
		}
		f := strings.Fields(string(body))
		if len(f) != 2 {
			return 0, fmt.Errorf("probe said %q", body)
		}
		wall, err1 := strconv.ParseInt(f[0], 10, 64)
		mono, err2 := strconv.ParseInt(f[1], 10, 64)
		if err1 != nil || err2 != nil {
			return 0, fmt.Errorf("probe said %q", body)
		}
		s = append(s, time.Duration(wall-mono)-wallMinusMono())
	}
	slices.Sort(s)
	return s[1], nil
}

func httpSkew(t *testing.T, url string) time.Duration {
	t.Helper()
	d, err := probeSkew(url)
	require.NoError(t, err)
	return d
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

// firstAnswer is the skew the probe at url answers first, once it
// answers at all (a restarted container takes a moment to listen).
func firstAnswer(t *testing.T, url string) time.Duration {
	t.Helper()
	var got time.Duration
	var err error
	require.Eventually(t, func() bool {
		got, err = probeSkew(url)
		return err == nil
	}, 10*time.Second, 5*time.Millisecond, "%s never answered (%v)", url, err)
	return got
}

// eventually waits until the probe at url answers want off this machine's
// clock.
func eventually(t testing.TB, url string, want time.Duration) {
	t.Helper()
	var got time.Duration
	var err error
	require.Eventually(t, func() bool {
		got, err = probeSkew(url)
		return err == nil && (got-want).Abs() < 100*time.Millisecond
	}, 10*time.Second, 10*time.Millisecond, "%s: want %v off, last saw %v (%v)", url, want, got, err)
}

func TestContainerClockOffset(t *testing.T) {
	tag := probeImage(t)
	ctx := context.Background()
	run := fmt.Sprintf("clocktest-%d", time.Now().UnixNano())
	rt, err := docker.New(ctx, run, docker.Options{NoWatchdog: true})
	require.NoError(t, err)
	defer func() {
		require.NoError(t, rt.Close(context.Background()))
		c, n := dockertest.Leftovers(t, run)
		assert.Zero(t, c+n, "leftovers")
	}()
	nw, err := rt.Network(ctx)
	require.NoError(t, err)

	static, err := rt.Run(ctx, docker.ContainerSpec{Node: "static", Image: tag, IP: nw.HostIP(0),
		Cmd: []string{"/goprobe", "-http", "0.0.0.0:8080", "-busy", "1"}, Ports: []int{8080}})
	require.NoError(t, err)
	cgo, err := rt.Run(ctx, docker.ContainerSpec{Node: "cgo", Image: tag, IP: nw.HostIP(1),
		Cmd: []string{"/goprobe-cgo", "-http", "0.0.0.0:8080"}, Ports: []int{8080}, ClockPreload: true})
	require.NoError(t, err)
	staticURL, cgoURL := "http://"+static.Addr(8080), "http://"+cgo.Addr(8080)
	eventually(t, staticURL+"/now", 0)
	eventually(t, cgoURL+"/now", 0)
	require.NoError(t, rt.ClockReachable(ctx, "static"))

	wall0, mono0 := time.Now().Round(0), time.Now()

	// A static Go program: the vDSO patch alone.
	require.NoError(t, rt.SetClockOffset(ctx, "static", 90*time.Second))
	assert.InDelta(t, 90, httpSkew(t, staticURL+"/now").Seconds(), 0.1, "seen at once")
	for _, off := range []time.Duration{-40 * time.Second, 0, 2 * time.Minute, 0} {
		require.NoError(t, rt.SetClockOffset(ctx, "static", off))
		assert.InDelta(t, off.Seconds(), httpSkew(t, staticURL+"/now").Seconds(), 0.1)
	}

	// A cgo program with the preload mounted: Go's own reads through the
	// patch, libc's through the library; each is shifted once.
	pid, err := rt.PID(ctx, "cgo")
	require.NoError(t, err)
	assert.True(t, timewarp.Preloaded(pid, timewarp.PreloadName), "the preload library is loaded in the container")
	require.NoError(t, rt.SetClockOffset(ctx, "cgo", -time.Hour))
	assert.InDelta(t, -3600, httpSkew(t, cgoURL+"/now").Seconds(), 0.1)
	eventually(t, cgoURL+"/libc", -time.Hour)

	// A restart during the fault: the new process gets the offset in force
	// before it answers.
	require.NoError(t, rt.SetClockOffset(ctx, "static", 30*time.Second))
	require.NoError(t, rt.Kill(ctx, "static"))
	require.NoError(t, rt.Start(ctx, "static"))
	assert.InDelta(t, 30, firstAnswer(t, staticURL+"/now").Seconds(), 0.1, "the restarted process's first answer")

	// A program that becomes itself a moment after its process started
	// (as runc's init execs it, later on a loaded machine): the patch made
	// at the start is lost with the exec, and given again after it.
	late, err := rt.Run(ctx, docker.ContainerSpec{Node: "late", Image: tag, IP: nw.HostIP(2),
		Cmd: []string{"/goprobe", "-exec-after=700ms", "-http", "0.0.0.0:8080"}, Ports: []int{8080}})
	require.NoError(t, err)
	lateURL := "http://" + late.Addr(8080)
	eventually(t, lateURL+"/now", 0)
	require.NoError(t, rt.SetClockOffset(ctx, "late", 45*time.Second))
	require.NoError(t, rt.Kill(ctx, "late"))
	require.NoError(t, rt.Start(ctx, "late"))
	eventually(t, lateURL+"/now", 45*time.Second)
	require.NoError(t, rt.SetClockOffset(ctx, "late", 0))
	eventually(t, lateURL+"/now", 0)

	// Timers keep working under the patch, and the heal brings both back.
	resp, err := http.Get(staticURL + "/sleep?ms=100")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	slept, err := strconv.ParseInt(strings.Fields(string(body))[0], 10, 64)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, time.Duration(slept), 300*time.Millisecond)
	assert.Less(t, time.Duration(slept), 5*time.Second)
	require.NoError(t, rt.SetClockOffset(ctx, "static", 0))
	require.NoError(t, rt.SetClockOffset(ctx, "cgo", 0))
	assert.Less(t, httpSkew(t, staticURL+"/now").Abs(), 100*time.Millisecond)
	eventually(t, cgoURL+"/libc", 0)

	drift := time.Now().Round(0).Sub(wall0) - time.Since(mono0)
	assert.Less(t, drift.Abs(), 5*time.Millisecond, "this machine's clock moved")
	for _, node := range []string{"static", "cgo"} {
		st, err := rt.State(ctx, node)
		require.NoError(t, err)
		assert.True(t, st.Running, "%s still runs", node)
	}
}
