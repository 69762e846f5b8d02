// Command sshprobe finds out, from inside an SSH lab host, which of
// fencecheck's faults the host can carry out itself: it runs the project's
// own code for each (package nemesis/lazyfs, nemesis/timewarp,
// nemesis/netcut), as an ssh node would on a real machine. The lab's test
// builds it static and bind-mounts it into the hosts.
//
// Usage:
//
//	sshprobe sleep
//	    print "ready", then wait until stdin closes (a process to find)
//	sshprobe hang
//	    print "ready", then never read stdin and never exit (a process that
//	    outlives its session unless something kills it)
//	sshprobe fuse DIR [-hold]
//	    mount the power-loss layer at DIR/mnt over DIR/backing, write a file
//	    that is fsynced and one that is not, take a power loss, check that
//	    exactly the unsynced one is gone; with -hold keep the mount until
//	    stdin closes; then unmount and remove DIR
//	sshprobe ptrace
//	    start a child, move its wall clock by an hour with the vDSO patch
//	    (ptrace), check the child reads the moved clock
//	sshprobe cut [IP...]
//	    make this namespace drop packets from and to the IPs (none: heal)
//	sshprobe dial ADDR
//	    open a TCP connection to ADDR within 2 s
//
// Each prints one line "ok ..." on success, or "error ..." and exits 1.
package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/google/nftables"

	"github.com/fencecheck/fencecheck/nemesis/lazyfs"
	"github.com/fencecheck/fencecheck/nemesis/netcut"
	"github.com/fencecheck/fencecheck/nemesis/timewarp"
)

func main() {
	if len(os.Args) < 2 {
		fail(errors.New("usage: sshprobe sleep | hang | fuse DIR [-hold] | ptrace | cut [IP...] | dial ADDR"))
	}
	var err error
	var said string
	switch args := os.Args[2:]; os.Args[1] {
	case "sleep":
		fmt.Println("ready")
		io.Copy(io.Discard, os.Stdin)
		said = "stdin closed"
	case "hang":
		fmt.Println("ready")
		for { // not select{}: Go's runtime would call that a deadlock and exit
			time.Sleep(time.Hour)
		}
	case "fuse":
		if len(args) < 1 {
			err = errors.New("fuse: give a folder")
			break
		}
		said, err = fuse(args[0], len(args) > 1 && args[1] == "-hold")
	case "ptrace":
		said, err = ptrace()
	case "clock": // the child of ptrace: the wall clock, once per line asked
		in := bufio.NewScanner(os.Stdin)
		for in.Scan() {
			fmt.Println(time.Now().UnixNano())
		}
		return
	case "cut":
		ps, perr := netcut.ParsePeers(args)
		if perr != nil {
			err = perr
			break
		}
		if err = netcut.Set(&nftables.Conn{}, ps); err == nil {
			said = fmt.Sprintf("dropping %d peers (table %s)", len(ps), netcut.Table)
		}
	case "dial":
		if len(args) != 1 {
			err = errors.New("dial: give an address")
			break
		}
		var c net.Conn
		if c, err = net.DialTimeout("tcp", args[0], 2*time.Second); err == nil {
			c.Close()
			said = "connected to " + args[0]
		}
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fail(err)
	}
	fmt.Println("ok", said)
}

func fail(err error) {
	fmt.Println("error", strings.ReplaceAll(err.Error(), "\n", " "))
	os.Exit(1)
}

// fuse mounts the power-loss layer and shows it keeps what was fsynced and
// drops what was not.
func fuse(dir string, hold bool) (string, error) {
	if err := lazyfs.Supported(); err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	m, err := lazyfs.New(filepath.Join(dir, "backing"), filepath.Join(dir, "mnt"), lazyfs.Options{})
	if err != nil {
		return "", err
	}
	defer m.Unmount()
	synced, lost := filepath.Join(m.Dir(), "synced"), filepath.Join(m.Dir(), "lost")
	f, err := os.Create(synced)
	if err != nil {
		return "", err
	}
	_, err = f.WriteString("kept")
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(lost, []byte("never synced"), 0o644); err != nil {
		return "", err
	}
	fstype, err := fstypeOf(m.Dir())
	if err != nil {
		return "", err
	}
	loss, err := m.PowerLoss()
	if err != nil {
		return "", err
	}
	if b, err := os.ReadFile(synced); err != nil || string(b) != "kept" {
		return "", fmt.Errorf("after the power loss the fsynced file reads %q, %v", b, err)
	}
	if _, err := os.Stat(lost); !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("after the power loss the unsynced file is still there (%v)", err)
	}
	if hold {
		fmt.Println("mounted", m.Dir())
		io.Copy(io.Discard, os.Stdin)
	}
	if err := m.Unmount(); err != nil {
		return "", err
	}
	return fmt.Sprintf("mounted %s (%s), a power loss dropped %d files and %d entries, kept the fsynced one", m.Dir(), fstype, loss.Files, loss.Entries), nil
}

// fstypeOf is the filesystem type of the mount at point.
func fstypeOf(point string) (string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		before, after, ok := strings.Cut(line, " - ")
		if f, g := strings.Fields(before), strings.Fields(after); ok && len(f) > 4 && len(g) > 0 && f[4] == point {
			return g[0], nil
		}
	}
	return "", fmt.Errorf("%s is not a mount point", point)
}

// ptrace patches a child's clock an hour ahead and reads it back.
func ptrace() (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	child := exec.Command(self, "clock")
	in, err := child.StdinPipe()
	if err != nil {
		return "", err
	}
	outPipe, err := child.StdoutPipe()
	if err != nil {
		return "", err
	}
	if err := child.Start(); err != nil {
		return "", err
	}
	defer child.Wait()
	defer in.Close()
	out := bufio.NewScanner(outPipe)
	ask := func() (time.Duration, error) {
		fmt.Fprintln(in)
		if !out.Scan() {
			return 0, fmt.Errorf("the child did not answer: %v", out.Err())
		}
		ns, err := strconv.ParseInt(out.Text(), 10, 64)
		return time.Duration(ns - time.Now().UnixNano()), err
	}
	if _, err := ask(); err != nil { // the child runs
		return "", err
	}
	p, err := timewarp.Inject(child.Process.Pid, timewarp.Options{})
	if err != nil {
		return "", fmt.Errorf("patching pid %d: %w", child.Process.Pid, err)
	}
	defer p.Close()
	if err := p.SetOffset(time.Hour); err != nil {
		return "", err
	}
	ahead, err := ask()
	if err != nil {
		return "", err
	}
	if ahead < 59*time.Minute || ahead > 61*time.Minute {
		return "", fmt.Errorf("the child's clock is %s ahead, not an hour", ahead)
	}
	if err := p.Restore(); err != nil {
		return "", err
	}
	return fmt.Sprintf("the child's wall clock read %s ahead after the vDSO patch (%s, %s)", ahead.Round(time.Millisecond), p.Real, strings.Join(p.Patched, ",")), nil
}
