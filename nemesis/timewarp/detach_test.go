//go:build linux

package timewarp

import (
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
