package spec

import (
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
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/fencecheck/fencecheck/fencing"
	"github.com/fencecheck/fencecheck/nemesis"
	"github.com/fencecheck/fencecheck/nemesis/timewarp"
)

// Clock faults on unmodified programs: a spec node that says nothing about
// clocks has its process's own wall clock moved (package timewarp), and the
// step is measured from inside the process while this machine's clock
// stays put.

var (
	goprobeOnce sync.Once
	goprobePath string
	goprobeErr  error
)

// goprobe is timewarp's clock probe, a static Go program: GET /now answers
// its own time.Now().
func goprobe(t *testing.T) string {
	t.Helper()
	goprobeOnce.Do(func() {
		dir, err := os.MkdirTemp("", "spec-goprobe-")
		if err != nil {
			goprobeErr = err
			return
		}
		goprobePath = filepath.Join(dir, "goprobe")
		cmd := exec.Command("go", "build", "-o", goprobePath, "../../nemesis/timewarp/testdata/goprobe")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			goprobeErr = fmt.Errorf("%w: %s", err, out)
		}
	})
	require.NoError(t, goprobeErr)
	return goprobePath
}

// skewOf is how far the node's wall clock is from this machine's. The probe
// (precise) answers GET /now with its wall clock and CLOCK_MONOTONIC read
// together, compared with this process's own pair (one monotonic clock for
// every process, so the answer's delay does not matter; the median of
// three, as either side may lose the CPU between its readings). Any other
// HTTP server is read from its Date header, to the second.
func skewOf(t *testing.T, url string, precise bool) time.Duration {
	t.Helper()
	if precise {
		var s []time.Duration
		for i := 0; i < 3; i++ {
			resp, err := http.Get(url)
			require.NoError(t, err)
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			f := strings.Fields(string(body))
			require.Len(t, f, 2, "%q", body)
			wall, err1 := strconv.ParseInt(f[0], 10, 64)
			mono, err2 := strconv.ParseInt(f[1], 10, 64)
			require.NoError(t, errors.Join(err1, err2), "%q", body)
			s = append(s, time.Duration(wall-mono)-wallMinusMono())
		}
		slices.Sort(s)
		return s[1]
	}
	before := time.Now()
	resp, err := http.Get(url)
	require.NoError(t, err)
	resp.Body.Close()
	date, err := http.ParseTime(resp.Header.Get("Date"))
	require.NoError(t, err)
	return date.Sub(before.Truncate(time.Second))
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

func hostClockSteady(t *testing.T) func() {
	wall0, mono0 := time.Now().Round(0), time.Now()
	return func() {
		drift := time.Now().Round(0).Sub(wall0) - time.Since(mono0)
		assert.Less(t, drift.Abs(), 5*time.Millisecond, "this machine's clock moved")
	}
}

func TestClockOfAnUnmodifiedGoProgram(t *testing.T) {
	s, err := Parse([]byte(`{"name":"go-probe","nodes":[{"name":"n1","roles":["issuer","resource"],
		"command":["` + goprobe(t) + `","-http","127.0.0.1:{port}","-busy","1"]}]}`))
	require.NoError(t, err)
	tg, _, _ := startTarget(t, s, Options{NoPreflight: true})
	cs := tg.(nemesis.ClockSkewer)
	assert.Equal(t, []string{"n1"}, cs.ClockNodes())
	url := tg.(*Target).Endpoints().Issuers[0].URL + "/now"
	steady := hostClockSteady(t)
	ctx := context.Background()

	assert.Less(t, skewOf(t, url, true).Abs(), 50*time.Millisecond)
	for _, off := range []time.Duration{90 * time.Second, -45 * time.Second, 0, 2 * time.Minute} {
		require.NoError(t, cs.SetClockOffset(ctx, "n1", off))
		assert.InDelta(t, off.Seconds(), skewOf(t, url, true).Seconds(), 0.05, "step to %v, seen at once", off)
	}
	// A strobe: every change is seen by the next read.
	for i := 0; i < 10; i++ {
		off := time.Duration(i%2) * -20 * time.Second
		require.NoError(t, cs.SetClockOffset(ctx, "n1", off))
		assert.InDelta(t, off.Seconds(), skewOf(t, url, true).Seconds(), 0.05)
	}

	// Timers and sleeps still work under the patch (the monotonic clock
	// is not shifted).
	require.NoError(t, cs.SetClockOffset(ctx, "n1", -time.Minute))
	resp, err := http.Get(strings.TrimSuffix(url, "/now") + "/sleep?ms=100")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	slept, err := strconv.ParseInt(strings.Fields(string(body))[0], 10, 64)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, time.Duration(slept), 300*time.Millisecond)
	assert.Less(t, time.Duration(slept), 5*time.Second)

	// A restart during the fault: the new process has the offset before it
	// is healthy.
	rs := tg.(nemesis.Restarter)
	require.NoError(t, rs.KillNode(ctx, "n1"))
	require.NoError(t, rs.StartNode(ctx, "n1", false))
	assert.InDelta(t, -60, skewOf(t, url, true).Seconds(), 0.05, "after the restart")

	require.NoError(t, cs.SetClockOffset(ctx, "n1", 0))
	assert.Less(t, skewOf(t, url, true).Abs(), 50*time.Millisecond, "healed")
	assert.NoError(t, tg.(*Target).CheckRunning(ctx), "still running")
	steady()
}

// The Python example, unmodified and not opted in: its libc clock reads
// are shifted (preload library and vDSO patch), its HTTP Date header says
// so, and its leases expire by the shifted clock.
func TestClockOfAnUnmodifiedPythonServer(t *testing.T) {
	s := pythonSpec(t, false)
	s.Nodes[0].Clock = ""
	tg, _, _ := startTarget(t, s, Options{NoPreflight: true})
	cs := tg.(nemesis.ClockSkewer)
	assert.Equal(t, []string{"n1"}, cs.ClockNodes())
	n := tg.(*Target)
	pgid, url := n.PID("n1"), n.Endpoints().Issuers[0].URL
	env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pgid))
	require.NoError(t, err)
	assert.Contains(t, string(env), timewarp.PreloadFileEnv+"=")
	assert.NotContains(t, string(env), ClockFileEnv+"=", "the program is not asked to read an offset file")
	assert.True(t, timewarp.Preloaded(pgid, timewarp.PreloadName))
	steady := hostClockSteady(t)
	ctx := context.Background()
	health := url + "/v1/health"

	assert.Less(t, skewOf(t, health, false).Abs(), 1100*time.Millisecond)
	require.NoError(t, cs.SetClockOffset(ctx, "n1", 90*time.Second))
	assert.InDelta(t, 90, skewOf(t, health, false).Seconds(), 1.1)

	// The example's leases follow its wall clock: a one-minute lease is
	// over when its clock jumps two minutes ahead. Each step is in force
	// when SetClockOffset returns: the lease acquired right after the step
	// back to true time is taken at true time, not at +90 s.
	require.NoError(t, cs.SetClockOffset(ctx, "n1", 0))
	c := fencing.NewClient(url, nil)
	require.Equal(t, fencing.Ok, c.Acquire(opCtx(t, 2*time.Second), "lease", "a", time.Minute).Outcome)
	require.Equal(t, fencing.Fail, c.Acquire(opCtx(t, 2*time.Second), "lease", "b", time.Minute).Outcome)
	require.NoError(t, cs.SetClockOffset(ctx, "n1", 2*time.Minute))
	assert.Equal(t, fencing.Ok, c.Acquire(opCtx(t, 2*time.Second), "lease", "b", time.Minute).Outcome)

	rs := tg.(nemesis.Restarter)
	require.NoError(t, rs.KillNode(ctx, "n1"))
	require.NoError(t, rs.StartNode(ctx, "n1", false))
	assert.InDelta(t, 120, skewOf(t, health, false).Seconds(), 1.1, "after the restart")
	require.NoError(t, cs.SetClockOffset(ctx, "n1", 0))
	assert.Less(t, skewOf(t, health, false).Abs(), 1100*time.Millisecond, "healed")
	assert.NoError(t, n.CheckRunning(ctx), "still running")
	steady()
}
