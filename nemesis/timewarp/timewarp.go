// Package timewarp moves the wall clock of running, unmodified processes
// without touching the machine's clock: the clock nemesis's way into a
// user's server, an etcd member or any Go program, none of which read a
// clock that fencecheck could otherwise reach.
//
// Two mechanisms, one offset:
//
//   - The vDSO patch (Inject) reaches every program, static or dynamic. Go
//     reads the time straight from the vDSO (no libc, so LD_PRELOAD never
//     sees it), and libc's own clock_gettime, gettimeofday and time call the
//     vDSO too. Inject stops every thread of the process with ptrace, maps
//     two pages into it (a trampoline and the offset), and overwrites the
//     vDSO's clock_gettime, gettimeofday and time entry points with a jump
//     to the trampoline. The trampoline calls the real clock_gettime (the
//     vDSO's own code, through a copy of its first instructions, or the
//     system call where that copy cannot be proven safe) and adds the offset
//     to CLOCK_REALTIME and CLOCK_REALTIME_COARSE only: monotonic and boot
//     clocks, which Go's timers and sleeps run on, are never shifted. Once a
//     process is patched, moving its clock is one 8-byte write into its
//     memory (SetOffset); no thread stops again.
//   - The preload library (PreloadSource) is loaded into dynamically linked
//     programs through LD_PRELOAD from their first instruction; it shifts
//     libc's wrappers by the offset in a file. It covers what ptrace cannot
//     reach (no permission) and the moments between exec and the patch.
//
// Which applies: every process of a node gets the vDSO patch; a dynamically
// linked one (an ELF with PT_INTERP) also has the preload when it was started
// with it. A process whose patch fails counts as reached only if the preload
// is mapped into it (its libc calls are shifted; a Go runtime in it would
// not be). Group keeps one node's processes at one offset and patches the
// processes that appear later (a restart, a child).
//
// The same code runs in two places: in fencecheck itself for processes it
// can see (command nodes, containers on this machine by their host PID),
// and in a helper (cmd/timewarp) inside a container that joins the target
// container's PID namespace with only CAP_SYS_PTRACE (Serve).
//
// Only linux/amd64 is implemented; elsewhere Inject reports ErrUnsupported.
package timewarp

import (
	"errors"
	"time"
)

// ErrUnsupported is returned where the vDSO patch is not implemented (any
// platform but linux/amd64) or the process has no vDSO.
var ErrUnsupported = errors.New("the vDSO clock patch is implemented for linux/amd64 only")

// Options tune Inject.
type Options struct {
	// StopTimeout bounds how long Inject waits for the process's threads
	// to stop (default 1 s). A frozen process (docker pause) never stops:
	// Inject then fails and leaves it untouched.
	StopTimeout time.Duration
	// Syscall makes the trampoline read the real clock with the system
	// call even where the vDSO's own code could be reused (slower: about
	// 250 ns instead of 20 ns per read of any clock); for tests.
	Syscall bool
	_       struct{}
}

func (o Options) stopTimeout() time.Duration {
	if o.StopTimeout <= 0 {
		return time.Second
	}
	return o.StopTimeout
}

// How the trampoline reaches the real clock.
const (
	RealVDSO    = "vdso"    // the vDSO's own clock_gettime, entered past the patch
	RealSyscall = "syscall" // the clock_gettime system call
)

// Process is one process whose wall-clock reads go through the trampoline.
// Its methods are safe for concurrent use.
type Process struct {
	PID int
	// Real says how the trampoline reads the real clock (RealVDSO or
	// RealSyscall).
	Real string
	// Patched lists the vDSO functions that were redirected.
	Patched []string
	// Reused is true when Inject found an earlier injection (by this or
	// another injector) and only took it over.
	Reused bool

	start uint64 // start time in clock ticks since boot: tells pid reuse apart
	impl  processImpl
}

// SetOffset makes the process's wall clock run offset ahead of real time
// (negative: behind; 0: real time). It is a write into the process's
// memory: every thread's next read sees it.
func (p *Process) SetOffset(offset time.Duration) error { return p.impl.setOffset(offset) }

// Offset reads the offset back from the process.
func (p *Process) Offset() (time.Duration, error) { return p.impl.offset() }

// Reads counts the process's shifted clock reads so far (reads while the
// offset was not 0), approximately: the count is not atomic across threads.
// It is how a fault is shown to have reached the process.
func (p *Process) Reads() (uint64, error) { return p.impl.reads() }

// Restore puts the vDSO's original code back (after setting the offset to
// 0); the trampoline stays mapped, unused, and a later Inject reuses it.
func (p *Process) Restore() error { return p.impl.restore() }

// Close releases the handle (the process keeps its patch and offset).
func (p *Process) Close() error { return p.impl.close() }

// Alive reports whether the process this handle patched still runs (and is
// not another process that got the same pid).
func (p *Process) Alive() bool {
	st, err := startTime(p.PID)
	return err == nil && st == p.start
}

type processImpl interface {
	setOffset(time.Duration) error
	offset() (time.Duration, error)
	reads() (uint64, error)
	restore() error
	close() error
}

// Inject patches process pid's vDSO clock functions (or takes over an
// earlier patch) and returns its handle with the offset unchanged (0 for a
// new patch). Every thread of the process is stopped while its code is
// changed, for about a millisecond.
func Inject(pid int, opts Options) (*Process, error) { return inject(pid, opts) }

// Supported says whether the vDSO patch is implemented on this platform.
func Supported() bool { return supported }
