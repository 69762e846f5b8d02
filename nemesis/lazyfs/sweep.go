package lazyfs

import (
	"bufio"
	"errors"
	"os"
	"path/filepath"
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
// them answers.
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
	var points []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if p, ok := mountPoint(sc.Text()); ok && (under == "" || strings.HasPrefix(p, under+string(filepath.Separator))) {
			points = append(points, p)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	var swept []string
	var errs []error
	for _, p := range points {
		var st syscall.Stat_t
		if err := syscall.Stat(p, &st); !errors.Is(err, syscall.ENOTCONN) {
			continue
		}
		if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil {
			errs = append(errs, err)
			continue
		}
		swept = append(swept, p)
	}
	return swept, errors.Join(errs...)
}

// mountPoint reads one line of /proc/self/mountinfo ("id parent maj:min root
// point options [optional...] - type source superoptions") and gives its
// mount point when it is one of this layer's.
func mountPoint(line string) (string, bool) {
	fields := strings.Fields(line)
	for i, f := range fields {
		if f == "-" && i+1 < len(fields) && i >= 5 {
			if fields[i+1] != fsType {
				return "", false
			}
			return unescapeMountinfo(fields[4]), true
		}
	}
	return "", false
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
