package lazyfs

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// fsType is how the kernel lists this layer's mounts ("fuse." + the mount's
// Name option), so a sweep never touches another FUSE filesystem.
const fsType = "fuse.fencecheck"

// SweepDead detaches the layer's mounts whose server is gone (a process
// killed with kill -9 serves its mounts no more: every access to them fails
// with "transport endpoint is not connected", or hangs while the dying
// server keeps the connection) and returns their mount points. Mounts whose
// server is alive, another run's included, are left alone: their server
// takes them down. Nothing here accesses a mount (a stat of a dead one can
// hang for good): the server is known from the mount's source, its
// connection is aborted through the FUSE control filesystem, then the
// mount is detached. The server must be a process this one can see in
// /proc (the same pid namespace, as every fencecheck on one machine is); a
// mount whose source names no process (an older fencecheck's) is left
// alone.
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
	mounts, err := layerMounts()
	if err != nil {
		return nil, err
	}
	var swept []string
	var errs []error
	for _, m := range mounts {
		if under != "" && !strings.HasPrefix(m.point, under+string(filepath.Separator)) || !serverGone(m.source) {
			continue
		}
		// A server killed while one of its own threads waited in a request
		// to its mount (a process fsyncing on a layer it served itself)
		// never ends: that thread waits for an answer no thread is left to
		// give, the process stays (a zombie, or in D with SIGKILL pending)
		// and keeps the connection. Aborting it lets the thread go; a
		// forced unmount does the same where the control filesystem
		// cannot be had.
		if abortConnection(m.dev) != nil {
			syscall.Unmount(m.point, syscall.MNT_FORCE)
		}
		if err := syscall.Unmount(m.point, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) {
			errs = append(errs, err)
			continue
		}
		swept = append(swept, m.point)
	}
	return swept, errors.Join(errs...)
}

// layerMount is one of the layer's mounts in the mount table.
type layerMount struct{ point, source, dev string }

// layerMounts lists the layer's mounts from /proc/self/mountinfo.
func layerMounts() ([]layerMount, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var mounts []layerMount
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if p, src, ok := mountOf(sc.Text()); ok {
			dev := ""
			if fields := strings.Fields(sc.Text()); len(fields) > 2 {
				dev = fields[2]
			}
			mounts = append(mounts, layerMount{p, src, dev})
		}
	}
	return mounts, sc.Err()
}

// fusectlDir is the FUSE control filesystem: a folder per connection, named
// by the mount's device minor, whose abort file ends it.
const fusectlDir = "/sys/fs/fuse/connections"

// abortConnection ends the FUSE connection of the mount on device dev
// ("0:52"): every request waiting on it fails at once. The control
// filesystem is mounted first where it is not (a fresh machine).
func abortConnection(dev string) error {
	_, minor, ok := strings.Cut(dev, ":")
	if !ok {
		return fmt.Errorf("device %q is not maj:min", dev)
	}
	if entries, err := os.ReadDir(fusectlDir); err == nil && len(entries) == 0 {
		_ = syscall.Mount("fusectl", fusectlDir, "fusectl", 0, "")
	}
	return os.WriteFile(filepath.Join(fusectlDir, minor, "abort"), []byte("1"), 0)
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
