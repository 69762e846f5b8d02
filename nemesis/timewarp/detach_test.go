//go:build linux

package timewarp

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// A seized thread that is not in a stop cannot be detached: detach says
// so (its caller then lets its OS thread exit), and once that thread has
// exited the process is free: a kill -9 ends it and it is reaped.
func TestADetachThatFailsIsReportedAndTheTracerExitFreesTheProcess(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	require.NoError(t, cmd.Start())
	pid := cmd.Process.Pid
	clean := make(chan bool, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		s := &stopped{pid: pid, threads: map[int]*thread{}}
		if err := unix.PtraceSeize(pid); err != nil {
			clean <- true
			t.Errorf("seize: %v", err)
			return
		}
		s.threads[pid] = &thread{tid: pid}
		s.order = []int{pid}
		clean <- s.detach() // running, not stopped: PTRACE_DETACH fails
	}()
	assert.False(t, <-clean, "a live thread that is not stopped was not detached")
	assert.True(t, threadExists(pid, pid))
	assert.False(t, threadExists(pid, 1<<22), "no such thread")
	require.NoError(t, cmd.Process.Kill())
	exited := make(chan error, 1)
	go func() { exited <- Wait(cmd) }()
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatal("the killed process was not reaped: its tracer still holds it")
	}
}

// A process killed while its threads are seized dies as a zombie that only
// its tracer can let go: the detach must not hand the tracing OS thread
// back to Go (where it would hold the zombie for as long as it lives), or
// the process's real parent never reaps it. Seen on etcd under `all`: a
// crash timed by an acknowledgement killed a member while its clock was
// being patched, and Docker could neither kill nor remove the container
// ("PID ... is zombie and can not be killed"). The real parent here is a
// shell, as containerd's shim is for a container: a tracer in the parent's
// own process would hide the bug.
func TestAProcessKilledWhileSeizedIsReapedByItsParent(t *testing.T) {
	sh := exec.Command("sh", "-c", "sleep 30 & echo $!; wait")
	out, err := sh.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, sh.Start())
	defer sh.Process.Kill()
	var pid int
	_, err = fmt.Fscan(out, &pid)
	require.NoError(t, err)

	lp := &linuxProcess{pid: pid}
	require.NoError(t, lp.withStopped(func(s *stopped) error {
		if err := unix.Kill(pid, unix.SIGKILL); err != nil {
			return err
		}
		for deadline := time.Now().Add(5 * time.Second); threadExists(pid, pid); {
			if time.Now().After(deadline) {
				return fmt.Errorf("pid %d did not die", pid)
			}
			time.Sleep(time.Millisecond)
		}
		return nil
	}))
	exited := make(chan error, 1)
	go func() { exited <- sh.Wait() }()
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatal("the shell never reaped its killed child: the tracer still holds the zombie")
	}
}

// threadExists says whether thread tid of pid is still there (a zombie
// thread is gone for this purpose: there is nothing to detach).
func threadExists(pid, tid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/stat", pid, tid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && b[i+2] != 'Z' && b[i+2] != 'X'
}
