//go:build linux && amd64

package timewarp

import (
	"bufio"
	"io"
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

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// probe is a test program that reports its own clocks over a pipe (see
// testdata): what a process sees is read from inside it.
type probe struct {
	t      testing.TB
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Scanner
	exited chan struct{}
}

func startProbe(t testing.TB, argv ...string) *probe {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return startCmd(t, cmd)
}

func (p *probe) pid() int { return p.cmd.Process.Pid }

func (p *probe) ask(cmd string) []int64 {
	p.t.Helper()
	_, err := io.WriteString(p.in, cmd+"\n")
	require.NoError(p.t, err)
	require.True(p.t, p.out.Scan(), "probe stopped answering")
	var out []int64
	for _, f := range strings.Fields(p.out.Text()) {
		v, err := strconv.ParseInt(f, 10, 64)
		require.NoError(p.t, err, "probe said %q", p.out.Text())
		out = append(out, v)
	}
	return out
}

// skew is how far the probe's wall clock is from this process's, which is
// never skewed. The probe answers cmd with its wall clock (in units of
// unit) and CLOCK_MONOTONIC (ns), read together; this machine's monotonic
// clock is one for every process, so comparing the two pairs measures the
// skew however long the answer took to come back. On a loaded machine
// either process may lose the CPU between its two readings: the median of
// three asks is what counts.
func (p *probe) skew(cmd string, unit time.Duration) time.Duration {
	p.t.Helper()
	var s []time.Duration
	for i := 0; i < 3; i++ {
		got := p.ask(cmd)
		require.Len(p.t, got, 2, "the probe's answer to %q", cmd)
		s = append(s, time.Duration(got[0])*unit-time.Duration(got[1])-wallMinusMono())
	}
	slices.Sort(s)
	return s[1]
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

func (p *probe) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

var (
	buildOnce sync.Once
	builtDir  string
	buildErr  error
)

// builds compiles the test programs once per test binary.
func builds(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		builtDir, buildErr = os.MkdirTemp("", "timewarp-probes-")
		if buildErr != nil {
			return
		}
		for _, b := range []struct {
			out  string
			cmd  []string
			env  string
			desc string
		}{
			{"goprobe-static", []string{"go", "build", "-o", "OUT", "./testdata/goprobe"}, "CGO_ENABLED=0", "static Go"},
			{"goprobe-cgo", []string{"go", "build", "-o", "OUT", "./testdata/goprobe"}, "CGO_ENABLED=1", "cgo Go"},
			{"cprobe", []string{"gcc", "-O2", "-o", "OUT", "testdata/cprobe.c"}, "", "C"},
		} {
			argv := append([]string(nil), b.cmd...)
			for i, a := range argv {
				if a == "OUT" {
					argv[i] = filepath.Join(builtDir, b.out)
				}
			}
			cmd := exec.Command(argv[0], argv[1:]...)
			cmd.Env = os.Environ()
			if b.env != "" {
				cmd.Env = append(cmd.Env, b.env)
			}
			if out, err := cmd.CombinedOutput(); err != nil {
				buildErr = &buildError{b.desc, err, string(out)}
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return builtDir
}

type buildError struct {
	what string
	err  error
	out  string
}

func (e *buildError) Error() string {
	return "building the " + e.what + " probe: " + e.err.Error() + "\n" + e.out
}

const tolerance = 50 * time.Millisecond

// hostClockSteady measures this process's wall clock against its monotonic
// clock while fn runs: the machine's clock must not move.
func hostClockSteady(t *testing.T, fn func()) {
	t.Helper()
	wall0, mono0 := time.Now().Round(0), time.Now()
	fn()
	wall1, mono1 := time.Now().Round(0), time.Now()
	drift := wall1.Sub(wall0) - mono1.Sub(mono0)
	assert.Less(t, drift.Abs(), 5*time.Millisecond, "the host's wall clock moved against its monotonic clock")
}

// exercise steps, strobes and heals a probe's clock through p and checks
// each from inside the probe.
func exercise(t *testing.T, pr *probe, p *Process, cmd string, unit time.Duration) {
	t.Helper()
	assert.Less(t, pr.skew(cmd, unit).Abs(), tolerance, "before any offset")
	for _, off := range []time.Duration{90 * time.Second, -45 * time.Second, 1500 * time.Millisecond, -2*time.Minute - 250*time.Millisecond} {
		require.NoError(t, p.SetOffset(off))
		got := pr.skew(cmd, unit)
		assert.InDelta(t, off.Seconds(), got.Seconds(), tolerance.Seconds(), "offset %s: the process saw %s", off, got)
		back, err := p.Offset()
		require.NoError(t, err)
		assert.Equal(t, off, back)
	}
	// A strobe: every read sees the offset written just before it.
	for i := 0; i < 20; i++ {
		off := time.Duration(i%2) * 30 * time.Second
		require.NoError(t, p.SetOffset(off))
		assert.InDelta(t, off.Seconds(), pr.skew(cmd, unit).Seconds(), tolerance.Seconds(), "strobe %d", i)
	}
	require.NoError(t, p.SetOffset(0))
	assert.Less(t, pr.skew(cmd, unit).Abs(), tolerance, "after the heal")
	reads, err := p.Reads()
	require.NoError(t, err)
	assert.Positive(t, reads, "the process counted no shifted read")
}

func TestStaticGoProgram(t *testing.T) {
	for _, mode := range []struct {
		name string
		opts Options
		real string
	}{{"vdso", Options{}, RealVDSO}, {"syscall", Options{Syscall: true}, RealSyscall}} {
		t.Run(mode.name, func(t *testing.T) {
			pr := startProbe(t, filepath.Join(builds(t), "goprobe-static"), "-busy", "2")
			dyn, err := Dynamic(pr.pid())
			require.NoError(t, err)
			require.False(t, dyn, "the probe should be a static binary")
			hostClockSteady(t, func() {
				p, err := Inject(pr.pid(), mode.opts)
				require.NoError(t, err)
				defer p.Close()
				assert.Equal(t, mode.real, p.Real)
				assert.Equal(t, []string{"clock_gettime", "gettimeofday", "time"}, p.Patched)
				exercise(t, pr, p, "now", time.Nanosecond)

				// Go's sleeps and timers run on the monotonic clock: under a
				// -1 min offset, three 200 ms waits (Sleep, After, NewTimer)
				// take 600 ms at least and nowhere near the minute a shifted
				// monotonic clock would make them (or nothing, the other
				// way); the wall clock, not stepped meanwhile, agrees.
				require.NoError(t, p.SetOffset(-time.Minute))
				got := pr.ask("sleep 200")
				mono, wall := time.Duration(got[0]), time.Duration(got[1])
				assert.GreaterOrEqual(t, mono, 600*time.Millisecond, "monotonic time slept")
				assert.Less(t, mono, 10*time.Second, "monotonic time slept")
				assert.InDelta(t, mono.Seconds(), wall.Seconds(), 0.05, "wall time slept")
				require.NoError(t, p.SetOffset(0))
			})
			assert.True(t, pr.running(), "the probe exited")
		})
	}
}

func TestRestoreAndInjectAgain(t *testing.T) {
	pr := startProbe(t, filepath.Join(builds(t), "goprobe-static"), "-busy", "2")
	p, err := Inject(pr.pid(), Options{})
	require.NoError(t, err)
	require.NoError(t, p.SetOffset(time.Minute))
	require.NoError(t, p.Restore())
	assert.Less(t, pr.skew("now", time.Nanosecond).Abs(), tolerance, "restored")
	require.NoError(t, p.Close())

	// Injecting again takes the restored trampoline (no new pages), and a
	// second injector finds the first one's patch.
	again, err := Inject(pr.pid(), Options{})
	require.NoError(t, err)
	defer again.Close()
	assert.True(t, again.Reused)
	second, err := Inject(pr.pid(), Options{})
	require.NoError(t, err)
	defer second.Close()
	assert.True(t, second.Reused)
	require.NoError(t, second.SetOffset(-30*time.Second))
	assert.InDelta(t, -30, pr.skew("now", time.Nanosecond).Seconds(), tolerance.Seconds())
	off, err := again.Offset()
	require.NoError(t, err)
	assert.Equal(t, -30*time.Second, off, "both handles see one offset")
	assert.True(t, pr.running())
}

func TestCgoProgram(t *testing.T) {
	pr := startProbe(t, filepath.Join(builds(t), "goprobe-cgo"))
	dyn, err := Dynamic(pr.pid())
	require.NoError(t, err)
	require.True(t, dyn, "a cgo build is dynamically linked")
	p, err := Inject(pr.pid(), Options{})
	require.NoError(t, err)
	defer p.Close()
	// Go's runtime reads the vDSO itself, C code through libc, which
	// calls the vDSO too: the patch shifts both.
	exercise(t, pr, p, "now", time.Nanosecond)
	exercise(t, pr, p, "libc", time.Nanosecond)
}

func TestCProgram(t *testing.T) {
	pr := startProbe(t, filepath.Join(builds(t), "cprobe"))
	p, err := Inject(pr.pid(), Options{})
	require.NoError(t, err)
	defer p.Close()
	exercise(t, pr, p, "now", time.Nanosecond)

	// Every wall-clock function: clock_gettime for CLOCK_REALTIME and its
	// coarse variant, gettimeofday, time; CLOCK_MONOTONIC stays put.
	require.NoError(t, p.SetOffset(3*time.Hour))
	before := time.Now()
	got := pr.ask("all")
	host := before.UnixNano()
	assert.InDelta(t, 3*3600, float64(got[0]-host)/1e9, 0.05, "CLOCK_REALTIME")
	assert.InDelta(t, 3*3600, float64(got[1]-host)/1e9, 0.05, "CLOCK_REALTIME_COARSE")
	assert.InDelta(t, 3*3600, float64(got[2]*1000-host)/1e9, 0.05, "gettimeofday")
	assert.InDelta(t, 3*3600, float64(got[3])-float64(host)/1e9, 1.05, "time")
	var mono unix.Timespec
	require.NoError(t, unix.ClockGettime(unix.CLOCK_MONOTONIC, &mono))
	assert.InDelta(t, 0, float64(got[4]-mono.Nano())/1e9, 0.05, "CLOCK_MONOTONIC is not shifted")
	require.NoError(t, p.SetOffset(0))
}

func TestPythonProgram(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		if os.Getenv("CI") == "true" || os.Getenv("FENCECHECK_REQUIRE_DOCKER") == "1" {
			t.Fatal("python3 is not installed: CI must have it (the Python example and this test run it)")
		}
		t.Skip("python3 is not installed")
	}
	pr := startProbe(t, python, "testdata/pyprobe.py")
	p, err := Inject(pr.pid(), Options{})
	require.NoError(t, err)
	defer p.Close()
	exercise(t, pr, p, "now", time.Nanosecond)
}

// A stopped process (a paused node) is patched and stays stopped.
func TestStoppedProcess(t *testing.T) {
	pr := startProbe(t, filepath.Join(builds(t), "goprobe-static"))
	require.NoError(t, pr.cmd.Process.Signal(syscall.SIGSTOP))
	waitState(t, pr.pid(), "T")
	p, err := Inject(pr.pid(), Options{})
	require.NoError(t, err)
	defer p.Close()
	require.NoError(t, p.SetOffset(time.Hour))
	time.Sleep(50 * time.Millisecond)
	st, err := statFields(pr.pid())
	require.NoError(t, err)
	assert.Equal(t, "T", st[0], "the process must stay stopped")
	require.NoError(t, pr.cmd.Process.Signal(syscall.SIGCONT))
	assert.InDelta(t, 3600, pr.skew("now", time.Nanosecond).Seconds(), tolerance.Seconds())
}

// Patching over and over while threads read the clock in tight loops: no
// crash, no wrong time.
func TestPatchUnderLoad(t *testing.T) {
	pr := startProbe(t, filepath.Join(builds(t), "goprobe-static"), "-busy", "4")
	for i := 0; i < 10; i++ {
		p, err := Inject(pr.pid(), Options{})
		require.NoError(t, err)
		require.NoError(t, p.SetOffset(time.Duration(i+1)*time.Second))
		assert.InDelta(t, float64(i+1), pr.skew("now", time.Nanosecond).Seconds(), tolerance.Seconds())
		require.NoError(t, p.Restore())
		require.NoError(t, p.Close())
	}
	assert.True(t, pr.running())
}

func waitState(t *testing.T, pid int, state string) {
	t.Helper()
	for i := 0; i < 200; i++ {
		if st, err := statFields(pid); err == nil && st[0] == state {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("pid %d never reached state %s", pid, state)
}
