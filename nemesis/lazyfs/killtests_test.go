package lazyfs_test

import (
	"bufio"
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/nemesis/lazyfs/lazyfstest"
)

// killTestTag marks, in their environment, the processes a run of this
// test binary started for TestKilledTestBinaryLeavesNothing (children
// inherit it), so that they are found after the kill whoever their parent
// has become.
const killTestTag = "FENCECHECK_LAZYFS_KILLTEST"

// Issue 36: this package's tests killed with SIGKILL at random moments (as
// a cancelled CI job or a `go test` timeout kills them: the test binary's
// whole process group) leave no layer mounted, no process of theirs and
// none in D, and the next run passes. Their layers are served by children
// in sessions of their own (lazyfstest), which let the layer go when the
// test binary ends. Before, a kill left the layers of the tests under way
// mounted and dead, and one during a test's own fsync left the test binary
// in D (scripts/killtests.sh, docs/robustness.md).
func TestKilledTestBinaryLeavesNothing(t *testing.T) {
	if os.Getenv(killTestTag) != "" {
		t.Skip("a run under the kill test does not kill itself")
	}
	if testing.Short() {
		t.Skip("kills test runs for about 15 s")
	}
	lazyfstest.Require(t)
	exe, err := os.Executable()
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 36))
	for i := range 3 {
		tmp := t.TempDir()
		tag := fmt.Sprintf("%d-%d", os.Getpid(), i)
		// In a shuffled order, so that the kill finds any test under way.
		cmd := exec.Command(exe, "-test.count=1", "-test.v", "-test.shuffle="+strconv.FormatUint(rng.Uint64()>>1, 10))
		cmd.Env = append(os.Environ(), killTestTag+"="+tag, "TMPDIR="+tmp)
		// A group of its own, to be killed whole; killed with this test
		// binary should this one be killed first (scripts/killtests.sh).
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		require.NoError(t, cmd.Start())
		at := time.Duration(200+rng.IntN(4800)) * time.Millisecond
		time.Sleep(at)
		require.NoError(t, syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL))
		killed := time.Now()
		cmd.Wait()
		under := lastRun(out.String())

		var mounts []string
		var procs []string
		deadline := time.Now().Add(5 * time.Second)
		for {
			mounts, procs = fuseMountsUnder(t, tmp), tagged(killTestTag+"="+tag)
			if len(mounts)+len(procs) == 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Logf("kill %d at %s (in %s): clean %s after; mounts %v, processes %v", i+1, at, under, time.Since(killed).Round(10*time.Millisecond), mounts, procs)
		assert.Empty(t, mounts, "kill %d at %s, in %s: layers left mounted", i+1, at, under)
		assert.Empty(t, procs, "kill %d at %s, in %s: processes left (state in parentheses)", i+1, at, under)
	}

	// The next run passes.
	tmp := t.TempDir()
	cmd := exec.Command(exe, "-test.count=1", "-test.skip=^TestKilledTestBinaryLeavesNothing$")
	cmd.Env = append(os.Environ(), killTestTag+"=next", "TMPDIR="+tmp)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "the next run: %s", b)
	assert.Empty(t, fuseMountsUnder(t, tmp))
}

// lastRun is the last test a verbose run's output says it began.
func lastRun(out string) string {
	last := "(none yet)"
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if name, ok := strings.CutPrefix(sc.Text(), "=== RUN   "); ok {
			last = name
		}
	}
	return last
}

// fuseMountsUnder lists the FUSE mounts under dir.
func fuseMountsUnder(t *testing.T, dir string) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	require.NoError(t, err)
	var points []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		for i, x := range f {
			if x == "-" && i+1 < len(f) && i > 4 {
				if strings.HasPrefix(f[i+1], "fuse") && strings.HasPrefix(f[4], dir+"/") {
					points = append(points, f[4])
				}
				break
			}
		}
	}
	return points
}

// tagged lists the processes whose environment holds the entry kv, each
// with its state ("1234(D)").
func tagged(kv string) []string {
	entries, _ := os.ReadDir("/proc")
	var procs []string
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil || !bytes.Contains(append(append([]byte{0}, env...), 0), []byte("\x00"+kv+"\x00")) {
			continue
		}
		state := "?"
		if st, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat")); err == nil {
			if i := bytes.LastIndexByte(st, ')'); i >= 0 && i+2 < len(st) {
				state = string(st[i+2])
			}
		}
		procs = append(procs, fmt.Sprintf("%d(%s)", pid, state))
	}
	return procs
}
