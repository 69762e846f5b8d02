// Package reaper kills a run's host process groups when its harness dies,
// however it dies. A command node runs in its own process group, and the
// kernel's parent-death signal reaches only the group's first process: a
// shell wrapper's server (a grandchild) would outlive a harness killed with
// kill -9 and hold its port. The reaper is a detached child of the harness
// that learns each group as it starts and, when the harness is gone, kills
// every group still there.
//
// As the Docker watchdog does, the reaper re-runs the harness's own
// executable with an environment variable set, so no separate program has
// to be found; the init below turns such a process into the reaper before
// anything else runs.
package reaper

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

const (
	fileEnv   = "FENCECHECK_REAPER_FILE"
	parentEnv = "FENCECHECK_REAPER_PARENT"
	// doneLine on the pipe says the harness stopped its groups itself: the
	// reaper exits without killing.
	doneLine = "done"
)

func init() {
	if path := os.Getenv(fileEnv); path != "" {
		parent, _ := strconv.Atoi(os.Getenv(parentEnv))
		watch(path, parent, os.Stdin)
		os.Exit(0)
	}
}

// Reaper is one run's reaper, seen from the harness.
type Reaper struct {
	mu   sync.Mutex
	path string
	file *os.File
	pipe io.WriteCloser
}

// Start starts the reaper of one run: the groups Add names are killed if
// this process dies before Close.
func Start() (*Reaper, error) {
	f, err := os.CreateTemp("", "fencecheck-reaper-*")
	if err != nil {
		return nil, err
	}
	exe, err := os.Executable()
	if err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, err
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), fileEnv+"="+f.Name(), parentEnv+"="+strconv.Itoa(os.Getpid()))
	cmd.Stdin = pr
	// Its own session: a Ctrl-C to the harness's group must not end it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		pr.Close()
		pw.Close()
		f.Close()
		os.Remove(f.Name())
		return nil, fmt.Errorf("starting the process reaper: %w", err)
	}
	pr.Close()
	go cmd.Wait() // no zombie
	return &Reaper{path: f.Name(), file: f, pipe: pw}, nil
}

// Add names the process group pgid (its leader's pid) as the run's.
func (r *Reaper) Add(pgid int) error {
	if r == nil {
		return nil
	}
	start, _ := StartTime(pgid)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.file == nil {
		return errors.New("reaper closed")
	}
	_, err := fmt.Fprintf(r.file, "%d %s\n", pgid, start)
	return err
}

// Close tells the reaper the harness stopped its groups itself, and lets
// it go.
func (r *Reaper) Close() error {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.file == nil {
		return nil
	}
	_, err := io.WriteString(r.pipe, doneLine+"\n")
	r.pipe.Close()
	r.file.Close()
	r.file = nil
	os.Remove(r.path)
	return err
}

// watch is the reaper's life: wait until the harness says it is done (then
// do nothing), or its pipe closes or it is gone (then kill every group
// named in path).
func watch(path string, parent int, stdin io.Reader) {
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(stdin)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	// An orphan is adopted by another process: the harness is gone.
	for orphan := time.Tick(200 * time.Millisecond); ; {
		select {
		case l, ok := <-lines:
			if l == doneLine {
				return
			}
			if !ok {
				killAll(path)
				return
			}
		case <-orphan:
			if parent > 0 && os.Getppid() != parent {
				killAll(path)
				return
			}
		}
	}
}

// killAll kills every group named in path, and removes the file.
func killAll(path string) {
	KillGroups(path)
	os.Remove(path)
}

// KillGroups kills (SIGKILL) every process group named in a reaper's file,
// except one whose leader's pid now belongs to another process (its start
// time differs). A group whose leader has exited is killed all the same:
// its pgid cannot be reused while any member is alive.
func KillGroups(path string) {
	b, err := os.ReadFile(path)
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		pgid, err := strconv.Atoi(f[0])
		if err != nil || pgid <= 1 {
			continue
		}
		if len(f) > 1 {
			if st, ok := StartTime(pgid); ok && st != f[1] {
				continue // the leader's pid was reused
			}
		}
		_ = syscall.Kill(-pgid, syscall.SIGCONT) // a paused group too
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}
}

// StartTime is field 22 of /proc/PID/stat: the process's start, in clock
// ticks since boot (with the pid, it names one process: a pid is reused).
func StartTime(pid int) (string, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return "", false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return "", false
	}
	return f[19], true
}
