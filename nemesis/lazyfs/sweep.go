package lazyfs

import (
	"bufio"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// fsType is how the kernel lists this layer's mounts ("fuse." + the mount's
// Name option), so a sweep never touches another FUSE filesystem.
const fsType = "fuse.fencecheck"

// SweepDead detaches the layer's mounts whose server is gone (a fencecheck
// killed with kill -9 serves its mounts no more: every access to them fails
// with "transport endpoint is not connected") and returns their mount
// points. Live mounts, another run's included, are left alone: an access to
// them answers. A mount whose server (named by its source) has ended or is
// dying is detached without an access (one would hang: see sweepDead); the
// server must be a process this one can see in /proc (the same pid
// namespace, as every fencecheck on one machine is).
func SweepDead() ([]string, error) { return sweepDead("") }

// SweepDeadUnder is SweepDead for the mounts under the folder dir only (a
// run's folder, before it is removed: a dead mount in it makes the removal
// fail, and the folder stays).
func SweepDeadUnder(dir string) ([]string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	return sweepDead(abs)
}

func sweepDead(under string) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	type mount struct{ point, source string }
	var mounts []mount
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if p, src, ok := mountOf(sc.Text()); ok && (under == "" || strings.HasPrefix(p, under+string(filepath.Separator))) {
			mounts = append(mounts, mount{p, src})
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	var swept []string
	var errs []error
	for _, m := range mounts {
		if serverGone(m.source) {
			// A server killed while one of its own threads waited in a
			// request to its mount (the embedded reference fsyncing its
			// data) never ends: that thread waits for an answer no thread
			// is left to give, the process stays (a zombie, or in D with
			// SIGKILL pending), the mount stays connected, and every
			// access to it (a stat included) hangs. A forced unmount aborts the connection: the thread
			// is let go and the process ends. Nothing here may stat it.
			syscall.Unmount(m.point, syscall.MNT_FORCE)
		} else {
			var st syscall.Stat_t
			if err := syscall.Stat(m.point, &st); !errors.Is(err, syscall.ENOTCONN) {
				continue
			}
		}
		if err := syscall.Unmount(m.point, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) {
			errs = append(errs, err)
			continue
		}
		swept = append(swept, m.point)
	}
	return swept, errors.Join(errs...)
}

// sourcePrefix starts the source of a layer's mount, followed by the
// serving process's pid and start time ("lazyfs:1234:5678").
const sourcePrefix = "lazyfs:"

// serverSource is the source of a mount this process serves.
func serverSource() string {
	start, _ := startTime(os.Getpid())
	return sourcePrefix + strconv.Itoa(os.Getpid()) + ":" + start
}

// serverGone says the process that served a mount of this source has ended
// or is ending (killed: a zombie, or SIGKILL pending on threads stuck as
// above), or its pid was reused. A source that names no process (a mount
// of an older fencecheck) says nothing: false.
func serverGone(source string) bool {
	rest, ok := strings.CutPrefix(source, sourcePrefix)
	if !ok {
		return false
	}
	pidText, start, _ := strings.Cut(rest, ":")
	pid, err := strconv.Atoi(pidText)
	if err != nil || pid <= 0 {
		return false
	}
	if pid == os.Getpid() {
		return false
	}
	now, state := startTime(pid)
	return state == "" || state == "Z" || state == "X" || start != "" && now != start || killed(pid)
}

// killed says SIGKILL is pending on a process: it is dying, and its threads
// that wait in a request to a mount it serves never will.
func killed(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		name, value, ok := strings.Cut(line, ":")
		if !ok || name != "SigPnd" && name != "ShdPnd" {
			continue
		}
		if mask, err := strconv.ParseUint(strings.TrimSpace(value), 16, 64); err == nil && mask&(1<<(syscall.SIGKILL-1)) != 0 {
			return true
		}
	}
	return false
}

// startTime reads a process's start time (in clock ticks since boot) and
// state from /proc/PID/stat; state is "" when there is no such process.
func startTime(pid int) (start, state string) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", ""
	}
	// "pid (comm) state ppid ...": comm may hold spaces and parentheses.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return "", ""
	}
	fields := strings.Fields(string(b[i+1:]))
	if len(fields) < 20 {
		return "", ""
	}
	return fields[19], fields[0] // field 22 (starttime) and field 3 (state)
}

// mountOf reads one line of /proc/self/mountinfo ("id parent maj:min root
// point options [optional...] - type source superoptions") and gives its
// mount point and source when it is one of this layer's.
func mountOf(line string) (point, source string, ok bool) {
	fields := strings.Fields(line)
	for i, f := range fields {
		if f == "-" && i+1 < len(fields) && i >= 5 {
			if fields[i+1] != fsType {
				return "", "", false
			}
			if i+2 < len(fields) {
				source = unescapeMountinfo(fields[i+2])
			}
			return unescapeMountinfo(fields[4]), source, true
		}
	}
	return "", "", false
}

// unescapeMountinfo undoes the kernel's octal escapes (\040 for a space).
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			n := 0
			ok := true
			for _, c := range s[i+1 : i+4] {
				if c < '0' || c > '7' {
					ok = false
					break
				}
				n = n*8 + int(c-'0')
			}
			if ok {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
