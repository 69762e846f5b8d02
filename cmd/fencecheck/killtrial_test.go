package main

import (
	"bufio"
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

	"github.com/fencecheck/fencecheck/analysis"
	"github.com/fencecheck/fencecheck/nemesis/lazyfs/lazyfstest"
)

// kill -9 of fencecheck at random moments of a power-loss run (setup, main
// phase with layers busy and fsyncs in flight, final phase, check) leaves
// no mount, no process of the run's and nothing in D, without `fencecheck
// clean`; the next run on the same machine is valid.
func TestTrialKillsAtRandomMomentsLeaveNothing(t *testing.T) {
	lazyfstest.Require(t) // a failure in CI, a skip only on a machine without FUSE
	seed := uint64(time.Now().UnixNano())
	t.Logf("kill moments drawn from seed %d", seed)
	rnd := rand.New(rand.NewPCG(seed, 0))
	store := t.TempDir()
	for i := range 4 {
		// The main phase lasts 8 s: the kill comes in setup or the main
		// phase, with power losses and fsyncs in flight.
		at := time.Duration(300+rnd.IntN(7600)) * time.Millisecond
		c := startCLI(t, "test", "--target", "memory", "--time", "8s", "--nemesis", "power-loss,crash-on-ack",
			"--seed", strconv.Itoa(i+1), "--quiet", "--store", store)
		pid := c.cmd.Process.Pid
		seen := map[int]string{} // every descendant seen: pid -> start time
		for deadline := time.Now().Add(at); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			for p, st := range descendants(pid) {
				seen[p] = st
			}
		}
		select {
		case <-c.done:
			t.Fatalf("run %d ended before its kill at %s (exit %d): the trial needs a longer run", i+1, at, c.code)
		default:
		}
		require.NoError(t, c.cmd.Process.Kill())
		// A fencecheck that served its own layers stayed a zombie with a
		// thread in D here, and this wait never returned.
		c.wait(t, 15*time.Second)
		waitFor(t, 15*time.Second, "every process of the killed run to end", func() bool {
			for p, st := range seen {
				if now, ok := processStart(p); ok && now == st {
					return false
				}
			}
			return true
		})
		assert.Empty(t, layerMountsUnder(store), "kill %d at %s left mounts", i+1, at)
		t.Logf("kill %d at %s: %d helper processes seen, all gone, no mount left", i+1, at, len(seen))
	}
	c := startCLI(t, "test", "--target", "memory", "--time", "5s", "--nemesis", "power-loss,crash-on-ack",
		"--seed", "11", "--quiet", "--store", store)
	assert.Equal(t, analysis.ExitValid, c.wait(t, 2*time.Minute), "stderr:\n%s", c.stderr.String())
	assert.Empty(t, layerMountsUnder(store))
}

// descendants are the processes below pid (children of children: the
// agents run in sessions of their own, but keep their parent), with their
// start times.
func descendants(pid int) map[int]string {
	parent := map[int]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) > 1 {
			parent[p], _ = strconv.Atoi(f[1])
		}
	}
	out := map[int]string{}
	for p := range parent {
		for q := parent[p]; q > 1; q = parent[q] {
			if q == pid {
				if st, ok := processStart(p); ok {
					out[p] = st
				}
				break
			}
		}
	}
	return out
}

// processStart is a process's start time (field 22 of its stat).
func processStart(pid int) (string, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", false
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 20 || f[0] == "Z" {
		return "", false
	}
	return f[19], true
}

// layerMountsUnder lists the layer mounts under dir, from the mount table
// only (never an access to a mount: a dead one would hang it).
func layerMountsUnder(dir string) []string { return layerMountsIn("/proc/self/mountinfo", dir) }

// layerMountsIn lists the layer mounts under dir in the mount table at
// mountinfo (one process's view: /proc/PID/mountinfo).
func layerMountsIn(mountinfo, dir string) []string {
	abs, _ := filepath.Abs(dir)
	f, err := os.Open(mountinfo)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		for i, x := range fields {
			if x == "-" && i+1 < len(fields) && strings.HasPrefix(fields[i+1], "fuse") && strings.HasPrefix(fields[4], abs+"/") {
				out = append(out, fields[4])
			}
		}
	}
	return out
}

// mountNamespace is a mount namespace of the test's own, held by a process
// that sleeps in it: runs started in it mount their layers where no other
// process sees them. Other packages' tests run beside this one, and each
// of their runs sweeps this machine's dead layers at its start; a dead
// layer in the shared namespace could be theirs to sweep before the run
// under test gets to it.
type mountNamespace struct{ holder int }

// privateMounts starts the holder of a mount namespace of the test's own
// (mounts private, so nothing mounted in it shows outside), ended with the
// test.
func privateMounts(t *testing.T) mountNamespace {
	t.Helper()
	holder := exec.Command("sleep", "infinity")
	holder.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	require.NoError(t, holder.Start(), "a mount namespace of the test's own")
	ns := mountNamespace{holder.Process.Pid}
	t.Cleanup(func() {
		// What a failed test left dead in it is swept before it ends: a
		// layer whose server hangs in a request to itself outlives it.
		ns.startCLI(t, "clean").wait(t, time.Minute)
		holder.Process.Kill()
		holder.Wait()
	})
	return ns
}

// startCLI starts a fencecheck command in the namespace: nsenter joins it
// and execs the command in place, so the pid started is fencecheck's.
func (ns mountNamespace) startCLI(t *testing.T, args ...string) *cliRun {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	nsenter := append([]string{"--target", strconv.Itoa(ns.holder), "--mount", "--", exe}, args...)
	return startCommand(t, exec.Command("nsenter", nsenter...))
}

// layerMountsUnder lists the layer mounts under dir as the namespace sees
// them.
func (ns mountNamespace) layerMountsUnder(dir string) []string {
	return layerMountsIn("/proc/"+strconv.Itoa(ns.holder)+"/mountinfo", dir)
}

// When the layer agent dies with fencecheck (both killed: the OOM killer,
// a CI runner's kill of the whole tree), nothing is left to take its layers
// down: the next run sweeps them at its start, without `fencecheck clean`
// and without touching the dead mount.
func TestTrialNextRunSweepsWhatAKilledTreeLeft(t *testing.T) {
	lazyfstest.Require(t) // a failure in CI, a skip only on a machine without FUSE
	store := t.TempDir()
	ns := privateMounts(t)
	c := ns.startCLI(t, "test", "--target", "memory", "--time", "1m", "--nemesis", "power-loss", "--seed", "5", "--quiet", "--store", store)
	waitFor(t, 60*time.Second, "the main phase", func() bool { return inMainPhase(store) })
	// A power cut takes the layer down until the node starts again: kill
	// while it is mounted.
	waitFor(t, 20*time.Second, "the layer mounted", func() bool { return len(ns.layerMountsUnder(store)) > 0 })
	tree := descendants(c.cmd.Process.Pid)
	require.NotEmpty(t, tree, "the layer agent runs")
	for p := range tree {
		syscall.Kill(p, syscall.SIGKILL)
	}
	require.NoError(t, c.cmd.Process.Kill())
	c.wait(t, 15*time.Second)
	dead := runDir(store)
	waitFor(t, 10*time.Second, "the killed tree to end", func() bool { return len(descendants(c.cmd.Process.Pid)) == 0 })
	require.NotEmpty(t, ns.layerMountsUnder(store), "a killed agent leaves its layer mounted, dead")

	next := ns.startCLI(t, "test", "--target", "memory", "--time", "3s", "--nemesis", "none", "--seed", "6", "--store", store)
	assert.Equal(t, analysis.ExitValid, next.wait(t, time.Minute), "stderr:\n%s", next.stderr.String())
	assert.Empty(t, ns.layerMountsUnder(store))
	assert.Contains(t, next.stderr.String(), "sweep: detached dead power-loss layer "+filepath.Join(dead, "nodes"))
	assert.NoDirExists(t, filepath.Join(dead, "nodes", "reference", "mnt"), "stderr:\n%s", next.stderr.String())
	assert.NoDirExists(t, filepath.Join(dead, "layer-agent"))
	assert.FileExists(t, filepath.Join(dead, "history.jsonl"), "the dead run's evidence stays")
}
