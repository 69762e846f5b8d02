// Package procgroup runs a program in a process group of its own, so that a
// pause or a kill reaches every process the program started (a shell
// wrapper, a JVM's children, ...). It is the one implementation of a node's
// program for every place that runs one: the harness on this machine
// (harness/nodes' process nodes) and the host agent on a remote host
// (nemesis/hostagent).
package procgroup

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fencecheck/fencecheck/nemesis/timewarp"
)

// Group is one run of a program in its own process group.
type Group struct {
	cmd  *exec.Cmd
	pgid int
	done chan struct{} // closed when the program has exited
	err  error         // exit status, valid after done

	mu     sync.Mutex
	killed bool // the owner killed it (exit is expected)
}

// Start starts argv in dir with env (the whole environment), its output
// appended to logw. register, when set, is told the group before the
// program can do much (a reaper that kills it if its owner dies); an
// error there kills the group.
func Start(argv []string, dir string, env []string, logw io.Writer, register func(pgid int) error) (*Group, error) {
	if len(argv) == 0 {
		return nil, errors.New("procgroup: an empty command line")
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = logw, logw
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setpgid: true,
		// If the owner dies the program dies with it rather than holding
		// its port for the next run.
		Pdeathsig: syscall.SIGKILL,
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	g := &Group{cmd: cmd, pgid: cmd.Process.Pid, done: make(chan struct{})}
	if register != nil {
		if err := register(g.pgid); err != nil {
			_ = syscall.Kill(-g.pgid, syscall.SIGKILL)
			_ = timewarp.Wait(cmd)
			return nil, err
		}
	}
	go func() {
		// Not cmd.Wait: the clock nemesis may ptrace this child, and
		// cmd.Wait would take its ptrace stops for its exit.
		g.err = timewarp.Wait(cmd)
		close(g.done)
	}()
	return g, nil
}

// PGID is the group's id (the program's pid).
func (g *Group) PGID() int { return g.pgid }

// Done is closed once the program has exited.
func (g *Group) Done() <-chan struct{} { return g.done }

// Status says how the program ended, after Done: "exit status 0",
// "signal: killed", or the error that kept it from being waited for.
func (g *Group) Status() string {
	if ps := g.cmd.ProcessState; ps != nil {
		return ps.String()
	}
	if g.err != nil {
		return g.err.Error()
	}
	return "exit status unknown"
}

// Exited says whether the program has exited.
func (g *Group) Exited() bool {
	select {
	case <-g.done:
		return true
	default:
		return false
	}
}

// ExpectedExit says whether the owner killed or stopped it.
func (g *Group) ExpectedExit() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.killed
}

// Signal sends sig to the whole group.
func (g *Group) Signal(sig syscall.Signal) error {
	if g.Exited() {
		return fmt.Errorf("the program (pid %d) is not running: %s", g.pgid, g.Status())
	}
	err := syscall.Kill(-g.pgid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("the program (pid %d) is not running", g.pgid)
	}
	return err
}

// Kill is kill -9 of the group; it returns once the program has exited,
// so a restart never races the old process for the port or the data dir.
func (g *Group) Kill(wait time.Duration) error {
	g.mu.Lock()
	g.killed = true
	g.mu.Unlock()
	if !g.Exited() {
		_ = syscall.Kill(-g.pgid, syscall.SIGKILL)
	}
	select {
	case <-g.done:
	case <-time.After(wait):
		return fmt.Errorf("pid %d did not exit within %s of SIGKILL", g.pgid, wait)
	}
	// Children that left the group's leader behind die too.
	_ = syscall.Kill(-g.pgid, syscall.SIGKILL)
	return nil
}

// Terminate asks the group to stop (SIGCONT first: a paused program cannot
// act on SIGTERM), then kills it after grace.
func (g *Group) Terminate(grace time.Duration) error {
	g.mu.Lock()
	g.killed = true
	g.mu.Unlock()
	if g.Exited() {
		_ = syscall.Kill(-g.pgid, syscall.SIGKILL)
		return nil
	}
	_ = syscall.Kill(-g.pgid, syscall.SIGCONT)
	_ = syscall.Kill(-g.pgid, syscall.SIGTERM)
	select {
	case <-g.done:
		_ = syscall.Kill(-g.pgid, syscall.SIGKILL)
		return nil
	case <-time.After(grace):
	}
	return g.Kill(5 * time.Second)
}

// WaitState waits until the group's leader is stopped (stopped true: the
// kernel's state T, after SIGSTOP) or runs again (false), for at most
// within: a signal is delivered when its target next runs, so a pause is
// in force only once the kernel says so.
func (g *Group) WaitState(stopped bool, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		st, err := State(g.pgid)
		if err != nil {
			return err
		}
		if (st == "T") == stopped {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pid %d is in state %s %s after the signal", g.pgid, st, within)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// State is a process's one-letter state from /proc (R, S, D, T, Z, ...).
func State(pid int) (string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", fmt.Errorf("the program (pid %d) is gone", pid)
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	f := strings.Fields(s[i+1:])
	if i < 0 || len(f) == 0 {
		return "", fmt.Errorf("/proc/%d/stat cannot be read", pid)
	}
	return f[0], nil
}
