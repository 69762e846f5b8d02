package timewarp

import (
	"bufio"
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// readMem reads n bytes of process pid's memory at addr.
func readMem(pid int, addr uint64, n int) ([]byte, error) {
	b := make([]byte, n)
	local := unix.Iovec{Base: &b[0]}
	local.SetLen(n)
	got, err := unix.ProcessVMReadv(pid, []unix.Iovec{local}, []unix.RemoteIovec{{Base: uintptr(addr), Len: n}}, 0)
	if err == nil && got != n {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		return nil, fmt.Errorf("reading pid %d at %#x: %w", pid, addr, err)
	}
	return b, nil
}

// mapping is one line of /proc/PID/maps.
type mapping struct {
	start, end uint64
	perms      string
	path       string
}

func readMaps(pid int) ([]mapping, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return nil, err
	}
	var out []mapping
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		// start-end perms offset dev inode [path]
		f := strings.Fields(sc.Text())
		if len(f) < 5 {
			continue
		}
		lo, hi, ok := strings.Cut(f[0], "-")
		if !ok {
			continue
		}
		s, err1 := strconv.ParseUint(lo, 16, 64)
		e, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		m := mapping{start: s, end: e, perms: f[1]}
		if len(f) >= 6 {
			m.path = strings.Join(f[5:], " ")
		}
		out = append(out, m)
	}
	return out, sc.Err()
}

// startTime is field 22 of /proc/PID/stat: when the process started, in
// clock ticks since boot. A pid with another start time is another process.
func startTime(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces
	// or parentheses itself: count fields after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); field 22 is f[19].
	if len(f) < 20 {
		return 0, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	return strconv.ParseUint(f[19], 10, 64)
}

// statFields returns fields 3.. of /proc/PID/stat (state first).
func statFields(pid int) ([]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	return strings.Fields(string(b[i+1:])), nil
}

// threadIDs lists the threads of process pid.
func threadIDs(pid int) ([]int, error) {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return nil, err
	}
	out := make([]int, 0, len(ents))
	for _, e := range ents {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, tid)
		}
	}
	return out, nil
}

// Dynamic reports whether process pid runs a dynamically linked program
// (its executable names an interpreter, PT_INTERP): the preload library can
// reach its libc calls. A static program (Go without cgo, etcd) is reached
// by the vDSO patch alone.
func Dynamic(pid int) (bool, error) {
	f, err := elf.Open(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		return false, err
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return true, nil
		}
	}
	return false, nil
}

// Preloaded reports whether a library whose file name is base (e.g.
// "fcskew.so") is mapped into process pid.
func Preloaded(pid int, base string) bool {
	maps, err := readMaps(pid)
	if err != nil {
		return false
	}
	for _, m := range maps {
		if strings.HasSuffix(m.path, "/"+base) {
			return true
		}
	}
	return false
}

// Reachable says why Inject cannot patch process pid, or nil when it can
// (as far as can be told without stopping it): this platform is supported,
// the process has a vDSO, and its memory may be read with
// process_vm_readv, which takes the same permission as ptrace.
func Reachable(pid int) error {
	if !supported {
		return ErrUnsupported
	}
	maps, err := readMaps(pid)
	if err != nil {
		return err
	}
	for _, m := range maps {
		if m.path == "[vdso]" {
			if _, err := readMem(pid, m.start, 1); err != nil {
				if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
					return permissionError(pid, unix.EPERM)
				}
				return err
			}
			return nil
		}
	}
	return fmt.Errorf("pid %d has no vDSO: %w", pid, ErrUnsupported)
}
