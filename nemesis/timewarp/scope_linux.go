package timewarp

import (
	"fmt"
	"os"
	"strconv"
)

// allPIDs lists every process in /proc (of this process's PID namespace,
// or of the host's when fencecheck runs there).
func allPIDs() ([]int, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	out := make([]int, 0, len(ents))
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil && pid > 0 {
			out = append(out, pid)
		}
	}
	return out, nil
}

// live reports whether pid is a process that can run code: not a zombie,
// not a kernel thread (which has no memory map of its own).
func live(pid int) bool {
	f, err := statFields(pid)
	if err != nil || len(f) < 7 || f[0] == "Z" || f[0] == "X" {
		return false
	}
	const pfKthread = 0x00200000
	flags, err := strconv.ParseUint(f[6], 10, 64) // field 9
	return err == nil && flags&pfKthread == 0
}

// ProcessGroup is the scope of a host process and what it started: the
// processes in process group pgid (a command node runs in a group of its
// own).
func ProcessGroup(pgid int) Scope {
	return func() ([]int, error) {
		pids, err := allPIDs()
		if err != nil {
			return nil, err
		}
		var out []int
		for _, pid := range pids {
			f, err := statFields(pid)
			if err != nil || len(f) < 3 {
				continue
			}
			// f[2] is field 5, the process group.
			if g, err := strconv.Atoi(f[2]); err == nil && g == pgid && live(pid) {
				out = append(out, pid)
			}
		}
		return out, nil
	}
}

// PIDNamespace is the scope of a container seen from the host (or from a
// helper that shares its PID namespace): every process in the PID
// namespace of pid, except the caller itself.
func PIDNamespace(pid int) Scope {
	return func() ([]int, error) {
		ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid))
		if err != nil {
			return nil, nil // not running: nothing in scope now
		}
		pids, err := allPIDs()
		if err != nil {
			return nil, err
		}
		self := os.Getpid()
		var out []int
		for _, p := range pids {
			if p == self {
				continue
			}
			if l, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", p)); err == nil && l == ns && live(p) {
				out = append(out, p)
			}
		}
		return out, nil
	}
}
