package timewarp

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A stopped process: every thread seized and in a ptrace stop. All ptrace
// requests must come from the one OS thread that seized the threads, so
// whoever holds a stopped keeps its goroutine locked to its thread.
//
// Threads are seized with PTRACE_SEIZE and stopped with PTRACE_INTERRUPT,
// not PTRACE_ATTACH: no SIGSTOP is sent, so a process that was running keeps
// running after the detach, and one that was stopped (a paused node) stays
// stopped.
type stopped struct {
	pid     int
	threads map[int]*thread
	order   []int // in seize order; the first is tried first for syscalls
	// running is set when a seized thread never stopped: it cannot be
	// detached (PTRACE_DETACH needs a stopped tracee), so the caller must
	// let its OS thread exit, which detaches every tracee it holds.
	running bool
}

// thread is one seized thread and what must be given back at detach.
type thread struct {
	tid int
	// pending is a signal the thread was about to take when it stopped
	// (a signal-delivery-stop); detach delivers it. extra are signals
	// dequeued while we single-stepped it, sent again after the detach.
	pending syscall.Signal
	extra   []syscall.Signal
	// group is set for a thread in group-stop (SIGSTOP'd, a paused node).
	group bool
}

// ptraceEventStop is PTRACE_EVENT_STOP: the stop of PTRACE_INTERRUPT or a
// group-stop of a seized thread.
const ptraceEventStop = 128

// stopAll seizes and stops every thread of pid, repeating until a listing of
// /proc/PID/task finds no thread it has not stopped (a stopped thread
// cannot start another).
func stopAll(pid int, timeout time.Duration) (*stopped, error) {
	s := &stopped{pid: pid, threads: map[int]*thread{}}
	deadline := time.Now().Add(timeout)
	for {
		tids, err := threadIDs(pid)
		if err != nil {
			if !s.detach() {
				s.running = true
				return s, fmt.Errorf("listing the threads of pid %d: %w", pid, err)
			}
			return nil, fmt.Errorf("listing the threads of pid %d: %w", pid, err)
		}
		var fresh []int
		for _, tid := range tids {
			if _, ok := s.threads[tid]; ok {
				continue
			}
			if err := unix.PtraceSeize(tid); err != nil {
				if errors.Is(err, unix.ESRCH) {
					continue // exited meanwhile
				}
				if !s.detach() {
					s.running = true
					return s, permissionError(pid, err)
				}
				return nil, permissionError(pid, err)
			}
			s.threads[tid] = &thread{tid: tid}
			s.order = append(s.order, tid)
			if err := unix.PtraceInterrupt(tid); err != nil && !errors.Is(err, unix.ESRCH) {
				s.running = true
				return s, fmt.Errorf("interrupting thread %d of pid %d: %w", tid, pid, err)
			}
			fresh = append(fresh, tid)
		}
		if len(fresh) == 0 {
			if len(s.threads) == 0 {
				return nil, fmt.Errorf("pid %d has no threads left (it exited)", pid)
			}
			return s, nil
		}
		for _, tid := range fresh {
			if err := s.awaitStop(s.threads[tid], deadline); err != nil {
				return s, err
			}
		}
	}
}

// awaitStop waits for a freshly interrupted thread's first stop. A frozen
// thread (freezer cgroup) never stops: past the deadline the caller must
// give up (s.running).
func (s *stopped) awaitStop(t *thread, deadline time.Time) error {
	ws, known, err := waitStop(t.tid, deadline)
	switch {
	case errors.Is(err, errGone):
		s.forget(t.tid)
		return nil
	case err != nil:
		s.running = true
		return fmt.Errorf("thread %d of pid %d: %w", t.tid, s.pid, err)
	case known:
		sig, event := stopKind(ws)
		if event == ptraceEventStop {
			t.group = sig != syscall.SIGTRAP
		} else {
			t.pending = sig
		}
	}
	return nil
}

var errGone = errors.New("the thread exited")

// waitStop waits for a thread's next ptrace stop. Its notification may be
// taken by another waiter of the same process (a tracee that is also our
// child is reported to every thread that waits for children, such as
// os/exec's Wait): after a few quiet milliseconds a register read, which
// only a stopped tracee answers, tells a stop whose kind is then unknown.
func waitStop(tid int, deadline time.Time) (ws unix.WaitStatus, known bool, err error) {
	quiet := time.Now().Add(20 * time.Millisecond)
	// A stop usually comes within microseconds: look again at once a few
	// hundred times (giving the CPU away), then back off to sleeps.
	for tries, sleep := 0, 10*time.Microsecond; ; tries++ {
		got, err := unix.Wait4(tid, &ws, unix.WALL|unix.WNOHANG, nil)
		switch {
		case errors.Is(err, unix.EINTR):
		case errors.Is(err, unix.ECHILD):
			// Reaped by someone else, or its stop taken: which one?
			if alive(tid) {
				return 0, false, nil
			}
			return 0, false, errGone
		case err != nil:
			return 0, false, fmt.Errorf("waiting for the thread: %w", err)
		case got == tid && (ws.Exited() || ws.Signaled()):
			return ws, true, errGone
		case got == tid && ws.Stopped():
			return ws, true, nil
		}
		now := time.Now()
		if now.After(quiet) && alive(tid) {
			return 0, false, nil
		}
		if now.After(deadline) {
			return 0, false, errors.New("did not stop within the timeout (is the process frozen, e.g. by docker pause?)")
		}
		if tries < 300 {
			unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
			continue
		}
		time.Sleep(sleep)
		if sleep < time.Millisecond {
			sleep *= 2
		}
	}
}

// alive reports whether tid is a stopped tracee of this thread.
func alive(tid int) bool {
	var regs unix.PtraceRegs
	return unix.PtraceGetRegs(tid, &regs) == nil
}

func (s *stopped) forget(tid int) {
	delete(s.threads, tid)
	for i, t := range s.order {
		if t == tid {
			s.order = append(s.order[:i], s.order[i+1:]...)
			break
		}
	}
}

// stopKind splits a ptrace stop status into the signal and the event.
func stopKind(ws unix.WaitStatus) (syscall.Signal, int) {
	raw := uint32(ws)
	return syscall.Signal((raw >> 8) & 0xff), int(raw>>16) & 0xff
}

// step executes exactly one instruction of a stopped thread. A stop that
// comes first (a late interrupt, a group-stop, a signal) is taken and the
// step retried; a signal dequeued that way is kept to be sent again. A stop
// of unknown kind counts as the step: callers check where the thread is.
func (s *stopped) step(t *thread) error {
	for tries := 0; tries < 16; tries++ {
		if err := unix.PtraceSingleStep(t.tid); err != nil {
			return fmt.Errorf("single-stepping thread %d: %w", t.tid, err)
		}
		ws, known, err := waitStop(t.tid, time.Now().Add(2*time.Second))
		if errors.Is(err, errGone) {
			s.forget(t.tid)
			return fmt.Errorf("thread %d exited while stepped", t.tid)
		}
		if err != nil {
			s.running = true
			return fmt.Errorf("thread %d, single-stepped: %w", t.tid, err)
		}
		if !known {
			return nil
		}
		sig, event := stopKind(ws)
		switch {
		case event == 0 && sig == syscall.SIGTRAP:
			return nil // the single-step trap
		case event == ptraceEventStop:
			continue // stopped before the instruction ran
		default:
			t.extra = append(t.extra, sig)
		}
	}
	return fmt.Errorf("thread %d would not single-step", t.tid)
}

// detach lets every thread go, with the signal it was about to take.
//
// It reports false when a thread could not be detached: the caller's OS
// thread must then exit instead of going back to Go, since a tracer's exit
// is what lets its tracees go for sure. A thread that still runs (PTRACE_DETACH
// needs the tracee in a stop) would stay stopped, and a later kill -9 leave
// it unreaped (seen once: a reference node that no SIGKILL ended). A thread
// killed while seized is a zombie only its tracer can release to its real
// parent: kept by a thread returned to Go, it stays one for as long as that
// thread lives (seen on etcd: a member killed while its clock was patched,
// which Docker could then neither kill nor remove).
func (s *stopped) detach() bool {
	if s == nil {
		return true
	}
	clean := true
	for _, tid := range s.order {
		t := s.threads[tid]
		_, _, errno := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_DETACH, uintptr(tid), 0, uintptr(t.pending), 0, 0)
		if errno != 0 {
			clean = false
		}
		for _, sig := range t.extra {
			_ = unix.Tgkill(s.pid, tid, sig)
		}
	}
	s.threads, s.order = map[int]*thread{}, nil
	return clean
}

// permissionError explains a failed PTRACE_SEIZE.
func permissionError(pid int, err error) error {
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
		why := "ptrace is not permitted"
		if b, rerr := os.ReadFile("/proc/sys/kernel/yama/ptrace_scope"); rerr == nil {
			why += fmt.Sprintf(" (kernel.yama.ptrace_scope=%s; 0 or CAP_SYS_PTRACE allows it)", string(b[:len(b)-1]))
		} else {
			why += " (needs the same user and no dumpable restriction, or CAP_SYS_PTRACE)"
		}
		return fmt.Errorf("attaching to pid %d: %s: %w", pid, why, err)
	}
	return fmt.Errorf("attaching to pid %d: %w", pid, err)
}
