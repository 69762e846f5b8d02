package nodes

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

	"github.com/fencecheck/fencecheck/harness/reaper"
	"github.com/fencecheck/fencecheck/nemesis/timewarp"
)

// process is one run of a command node's program, in its own process group
// so that a pause or kill reaches every process the program started (a
// shell wrapper, a JVM's children, ...).
type process struct {
	cmd  *exec.Cmd
	pgid int
	done chan struct{} // closed when the program has exited
	err  error         // exit status, valid after done

	mu     sync.Mutex
	killed bool // the harness killed it (exit is expected)
}

// startProcess starts argv in dir with env, output appended to logw.
// The group is named to the run's reaper (nil: none), which kills it if the
// harness dies before Stop.
func startProcess(argv []string, dir string, env []string, logw io.Writer, rp *reaper.Reaper) (*process, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = logw, logw
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setpgid: true,
		// If the harness dies the program dies with it rather than holding
		// its port for the next run.
		Pdeathsig: syscall.SIGKILL,
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &process{cmd: cmd, pgid: cmd.Process.Pid, done: make(chan struct{})}
	if err := rp.Add(p.pgid); err != nil {
		_ = syscall.Kill(-p.pgid, syscall.SIGKILL)
		_ = timewarp.Wait(cmd)
		return nil, fmt.Errorf("naming the program to the process reaper: %w", err)
	}
	go func() {
		// Not cmd.Wait: the clock nemesis may ptrace this child, and
		// cmd.Wait would take its ptrace stops for its exit.
		p.err = timewarp.Wait(cmd)
		close(p.done)
	}()
	return p, nil
}

// status says how the program ended, after done: "exit status 0",
// "signal: killed", or the error that kept it from being waited for.
func (p *process) status() string {
	if ps := p.cmd.ProcessState; ps != nil {
		return ps.String()
	}
	if p.err != nil {
		return p.err.Error()
	}
	return "exit status unknown"
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *process) expectedExit() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.killed
}

// signal sends sig to the whole group.
func (p *process) signal(sig syscall.Signal) error {
	if p.exited() {
		return fmt.Errorf("the program (pid %d) is not running: %s", p.pgid, p.status())
	}
	err := syscall.Kill(-p.pgid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("the program (pid %d) is not running", p.pgid)
	}
	return err
}

// kill is kill -9 of the group; it returns once the program has exited,
// so a restart never races the old process for the port or the data dir.
func (p *process) kill(wait time.Duration) error {
	p.mu.Lock()
	p.killed = true
	p.mu.Unlock()
	if !p.exited() {
		_ = syscall.Kill(-p.pgid, syscall.SIGKILL)
	}
	select {
	case <-p.done:
	case <-time.After(wait):
		return fmt.Errorf("pid %d did not exit within %s of SIGKILL", p.pgid, wait)
	}
	// Children that left the group's leader behind die too.
	_ = syscall.Kill(-p.pgid, syscall.SIGKILL)
	return nil
}

// terminate asks the group to stop (SIGCONT first: a paused program cannot
// act on SIGTERM), then kills it after grace.
func (p *process) terminate(grace time.Duration) error {
	p.mu.Lock()
	p.killed = true
	p.mu.Unlock()
	if p.exited() {
		_ = syscall.Kill(-p.pgid, syscall.SIGKILL)
		return nil
	}
	_ = syscall.Kill(-p.pgid, syscall.SIGCONT)
	_ = syscall.Kill(-p.pgid, syscall.SIGTERM)
	select {
	case <-p.done:
		_ = syscall.Kill(-p.pgid, syscall.SIGKILL)
		return nil
	case <-time.After(grace):
	}
	return p.kill(5 * time.Second)
}

// tail returns the last n lines of a log file, for errors that should show
// why a node did not come up.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// stopAll asks every program to stop (SIGTERM, then SIGKILL after 3 s), all
// at once.
func (d *processes) stopAll(ms []*member) error {
	var errs []error
	var wg sync.WaitGroup
	var emu sync.Mutex
	for _, m := range ms {
		p := d.proc(m)
		if p == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := p.terminate(3 * time.Second); err != nil {
				emu.Lock()
				errs = append(errs, fmt.Errorf("%s: %w", m.Name, err))
				emu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
