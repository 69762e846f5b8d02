package nodes

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/fencecheck/fencecheck/fencing"
	"github.com/fencecheck/fencecheck/harness/ports"
	"github.com/fencecheck/fencecheck/harness/reaper"
	"github.com/fencecheck/fencecheck/nemesis/hostagent"
	"github.com/fencecheck/fencecheck/nemesis/timewarp"
)

// processes is the driver of process nodes: programs on this machine, each
// in its own process group (a pause or kill reaches every process it
// started), on loopback ports they keep across restarts, their output in
// <run>/logs/<node>.log. A reaper kills the groups if the harness dies
// without its teardown.
type processes struct {
	unreachable
	c      *Cluster
	reaper *reaper.Reaper
	// preload is the clock-skew library given to ClockProcesses nodes
	// ("" without gcc); tried once.
	preload      string
	preloadTried bool
}

// procState is a process node's own state.
type procState struct {
	logPath string
	logFile *os.File
	// clock patches the group's processes; preload is the library the
	// node starts with ("" for none).
	clock   *timewarp.Group
	preload string
}

func state(m *member) *procState {
	if s, ok := m.kind.(*procState); ok {
		return s
	}
	s := &procState{}
	m.kind = s
	return s
}

// prepare picks the node's loopback ports and, for a node whose clock the
// harness moves, the preload library and the group that patches it.
func (d *processes) prepare(ctx context.Context, m *member) error {
	if err := loopbackPorts(m); err != nil {
		return err
	}
	if m.Clock.Via != ClockProcesses {
		return nil
	}
	s := state(m)
	if !d.preloadTried {
		d.preloadTried = true
		lib, err := timewarp.Preload(ctx)
		if err != nil {
			d.c.logf("no clock-skew preload library (%v): process nodes' clocks are moved by the vDSO patch alone", err)
		}
		d.preload = lib
	}
	if d.preload != "" {
		if err := os.MkdirAll(m.clockDir(), 0o755); err != nil {
			return err
		}
		if err := fencing.WriteClockOffset(skewFile(m), 0); err != nil {
			return err
		}
		s.preload = d.preload
	}
	scope := func() ([]int, error) {
		d.c.mu.Lock()
		p := m.proc
		d.c.mu.Unlock()
		if p == nil || p.Exited() {
			return nil, nil // not running: its start applies the offset
		}
		return timewarp.ProcessGroup(p.PGID())()
	}
	also := func(off time.Duration) error {
		if s.preload == "" {
			return nil
		}
		return timewarp.SetPreloadOffset(skewFile(m), off)
	}
	s.clock = timewarp.NewGroup(scope, timewarp.GroupOptions{Also: also})
	return nil
}

// loopbackPorts gives a node on this machine a free loopback port per
// named port, kept across restarts (clients hold their endpoint for the
// run).
func loopbackPorts(m *member) error {
	m.host = "127.0.0.1"
	for _, p := range m.Ports {
		n, err := ports.Stable()
		if err != nil {
			return fmt.Errorf("finding a port for %s: %w", m.Name, err)
		}
		m.bound[p.Name] = n
	}
	return nil
}

// skewFile is the preload library's offset file of a process node.
func skewFile(m *member) string { return filepath.Join(m.clockDir(), "skew") }

func (d *processes) view(m *member) (string, string) {
	if m.Clock.Via == ClockFile {
		return m.workDir(), m.clockFile()
	}
	return m.workDir(), ""
}

// environ is the program's environment: this process's, the node's
// FENCECHECK_* variables, its clock file, its own, and the preload library.
func (d *processes) environ(m *member) []string {
	env := append(os.Environ(), nodeEnv(m)...)
	if m.Clock.Via == ClockFile {
		env = append(env, fencing.ClockFileEnv+"="+m.clockFile())
	}
	env = append(env, substituteEnv(m.Process.Env, m.vars)...)
	if p := state(m).preload; p != "" {
		env = timewarp.PreloadEnv(env, p, skewFile(m))
	}
	return env
}

// start (re)starts the node's program, its output appended to its log.
func (d *processes) start(_ context.Context, m *member) error {
	s := state(m)
	env := d.c.Env()
	if s.logFile == nil {
		if err := os.MkdirAll(filepath.Join(env.Dir, "logs"), 0o755); err != nil {
			return err
		}
		s.logPath = filepath.Join(env.Dir, "logs", m.Name+".log")
		f, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		s.logFile = f
	}
	d.c.mu.Lock()
	if d.reaper == nil {
		rp, err := reaper.Start()
		if err != nil {
			d.c.mu.Unlock()
			return err
		}
		d.reaper = rp
	}
	rp := d.reaper
	d.c.mu.Unlock()
	argv := substituteAll(m.Process.Argv, m.vars)
	fmt.Fprintf(s.logFile, "=== fencecheck %s: starting %s: %s\n", time.Now().UTC().Format(time.RFC3339Nano), m.Name, strings.Join(argv, " "))
	p, err := startProcess(argv, m.Process.Dir, d.environ(m), s.logFile, rp)
	if err != nil {
		return err
	}
	d.c.mu.Lock()
	m.proc = p
	d.c.mu.Unlock()
	go d.watch(m, p)
	// The new program gets the offset in force at once. This try is best
	// effort: a launcher still exec'ing the real program (a pyenv shim, a
	// shell's exec) replaces what was patched; the try once the node
	// answers (afterStart) is the one that counts.
	if s.clock != nil {
		s.clock.Sync()
	}
	return nil
}

// watch notes a program that exits on its own: the run goes on (its
// requests now fail), but the log says why.
func (d *processes) watch(m *member, p *process) {
	<-p.Done()
	how := "killed by fencecheck"
	if !p.ExpectedExit() {
		how = "exited on its own"
		d.c.mu.Lock()
		stopping := d.c.stopped
		d.c.mu.Unlock()
		if !stopping {
			d.c.logf("node %s exited on its own (%s); see %s", m.Name, p.Status(), state(m).logPath)
		}
	}
	fmt.Fprintf(state(m).logFile, "=== fencecheck %s: %s %s: %s\n", time.Now().UTC().Format(time.RFC3339Nano), m.Name, how, p.Status())
}

func (d *processes) proc(m *member) *process {
	d.c.mu.Lock()
	defer d.c.mu.Unlock()
	return m.proc
}

func (d *processes) running(_ context.Context, m *member) (bool, error) {
	p := d.proc(m)
	return p != nil && !p.Exited(), nil
}

// pause stops the whole group (SIGSTOP); resume continues it.
func (d *processes) pause(_ context.Context, m *member) error {
	p, err := d.started(m)
	if err != nil {
		return err
	}
	return p.Signal(syscall.SIGSTOP)
}

func (d *processes) resume(_ context.Context, m *member) error {
	p, err := d.started(m)
	if err != nil {
		return err
	}
	return p.Signal(syscall.SIGCONT)
}

// kill is kill -9 of the group: the program gets no chance to flush
// anything it has not made durable.
func (d *processes) kill(_ context.Context, m *member) error {
	p, err := d.started(m)
	if err != nil {
		return err
	}
	return p.Kill(10 * time.Second)
}

func (d *processes) started(m *member) (*process, error) {
	if p := d.proc(m); p != nil {
		return p, nil
	}
	return nil, fmt.Errorf("node %s was never started", m.Name)
}

func (d *processes) hostAddr(m *member, port string) (string, error) { return loopbackAddr(m, port) }

// loopbackAddr is one of a node's loopback ports.
func loopbackAddr(m *member, port string) (string, error) {
	n, ok := m.bound[port]
	if !ok {
		return "", fmt.Errorf("node %s has no port %q", m.Name, port)
	}
	return fmt.Sprintf("127.0.0.1:%d", n), nil
}

func (d *processes) moveClock(_ context.Context, m *member, offset time.Duration) error {
	_, err := state(m).clock.SetOffset(offset)
	return err
}

// clockReach says whether this machine may patch the group's processes
// (ptrace); a program the patch cannot reach whose libc calls the preload
// library shifts is reached by that alone.
func (d *processes) clockReach(_ context.Context, m *member) string {
	p := d.proc(m)
	if p == nil {
		return "not running"
	}
	err := timewarp.Reachable(p.PGID())
	if err != nil && state(m).preload != "" && timewarp.Preloaded(p.PGID(), timewarp.PreloadName) {
		d.c.logf("node %s: the vDSO patch cannot reach it (%v); its libc calls are shifted by the preload library only", m.Name, err)
		return ""
	}
	if err != nil {
		return err.Error()
	}
	return ""
}

// afterStart patches the clock of the node's new programs once it answers.
func (d *processes) afterStart(m *member) error {
	if c := state(m).clock; c != nil {
		if _, err := c.Sync(); err != nil {
			return fmt.Errorf("node %s started, but its clock offset could not be re-applied: %w", m.Name, err)
		}
	}
	return nil
}

func (d *processes) cutWhy(m *member) string {
	return fmt.Sprintf("node %s is a process on this machine; only containers and ssh hosts can be partitioned (a host process is cut by the harness's proxies, never by this machine's firewall)", m.Name)
}

func (d *processes) layerWhy(*member) string { return "" }

func (d *processes) newLayer(m *member) (disk, error) { return d.c.layers.mount(m) }

// gone says why a process node can no longer come up: its program exited
// (with the last lines of its log).
func (d *processes) gone(node string) error {
	m, err := d.c.lookup(node)
	if err != nil || m.Kind() != KindProcess {
		return nil
	}
	p := d.proc(m)
	if p == nil || !p.Exited() {
		return nil
	}
	err = fmt.Errorf("node %s exited before it answered %s (%s)", node, healthWhat(m), p.Status())
	if tl := hostagent.Tail(state(m).logPath, 10); tl != "" {
		err = fmt.Errorf("%w; last lines of %s:\n%s", err, state(m).logPath, tl)
	}
	return exitedError{err}
}

// healthWhat names the node's health check in words.
func healthWhat(m *member) string {
	switch h := m.Health.Probe; {
	case h.HTTP != "":
		return "GET " + h.HTTP
	case !h.set() && m.Serves():
		return "GET /v1/health"
	}
	return "its health check"
}

// gone says why a node can no longer come up: a process node's or an ssh
// node's program exited (nil for the other kinds, or while it runs).
func (c *Cluster) gone(node string) error {
	m, err := c.lookup(node)
	if err != nil {
		return nil
	}
	switch m.Kind() {
	case KindProcess:
		return c.proc.gone(node)
	case KindSSH:
		return c.ssh.gone(m)
	}
	return nil
}

// exitedError is a wait ended by a program that exited (its log's tail
// already said).
type exitedError struct{ error }

func (e exitedError) Unwrap() error { return e.error }

// logsOf are the logs of the process nodes among ms, for an error that
// should say where to look.
func logsOf(ms []*member) []string {
	var out []string
	for _, m := range ms {
		if s, ok := m.kind.(*procState); ok && s.logPath != "" {
			out = append(out, s.logPath)
		}
	}
	return out
}

// close lets the reaper go and closes the logs and the clock groups.
func (d *processes) close(ms []*member) error {
	d.c.mu.Lock()
	rp := d.reaper
	d.reaper = nil
	d.c.mu.Unlock()
	err := rp.Close()
	for _, m := range ms {
		s, ok := m.kind.(*procState)
		if !ok {
			continue
		}
		if s.logFile != nil {
			s.logFile.Close()
		}
		if s.clock != nil {
			s.clock.Close()
		}
	}
	return err
}

// PID is the process group of a process node's running program (0 when it
// runs none).
func (c *Cluster) PID(node string) int {
	m, err := c.lookup(node)
	if err != nil {
		return 0
	}
	if p := c.proc.proc(m); p != nil {
		return p.PGID()
	}
	return 0
}
