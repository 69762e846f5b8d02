package nodes

import (
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/fencecheck/fencecheck/fencing"
	"github.com/fencecheck/fencecheck/harness/docker"
	"github.com/fencecheck/fencecheck/harness/remote"
	"github.com/fencecheck/fencecheck/nemesis/hostagent"
	"github.com/fencecheck/fencecheck/nemesis/lazyfs"
)

// SSH is a node on a host fencecheck reaches over SSH (KindSSH). Its
// program runs there under the run's host agent (nemesis/hostagent), which
// fencecheck copies to the host by SFTP: every fault has the meaning it has
// on this machine. Argv and Env take placeholders; its ports are the
// numbers it listens on at the host.
type SSH struct {
	remote.Target
	// Address is where the other nodes and this machine reach the node
	// (default: the host as dialled).
	Address string
	Argv    []string
	Env     []string
	// Dir is where the program runs on the host (default: the node's folder
	// there, <workdir>/fencecheck-<run>/nodes/<node>, never the layer).
	Dir string
	// Workdir is the folder on the host that the run's own folder goes in
	// (default /tmp): <workdir>/fencecheck-<run> holds the agent, the
	// nodes' data and logs, and is removed at the end.
	Workdir string
}

// HostHelperEnv names the host agent to copy (a static linux program,
// cmd/fencehost); without it fencecheck takes the fencehost beside its own
// executable, or builds one from its sources.
const HostHelperEnv = "FENCECHECK_HOST_HELPER"

// hosts is the driver of ssh nodes: one connection and one host agent per
// host (user@host:port), shared by the nodes on it.
type hosts struct {
	unreachable
	c *Cluster

	mu     sync.Mutex
	agents map[string]*hostAgent
	order  []*hostAgent
}

// hostAgent is the run's agent on one host.
type hostAgent struct {
	key    string
	conn   *remote.Conn
	sess   *remote.Session
	client *hostagent.Client
	hello  *hostagent.Hello
	dir    string // the run's folder on the host
}

// sshState is an ssh node's own state.
type sshState struct {
	agent     *hostAgent
	data      string // its data folder on the host (the layer when there is one)
	clockFile string
}

func sshOf(m *member) *sshState {
	if s, ok := m.kind.(*sshState); ok {
		return s
	}
	s := &sshState{}
	m.kind = s
	return s
}

// callTimeout bounds one request to an agent (a kill waits up to 10 s for
// the program to die).
const callTimeout = 30 * time.Second

func (a *hostAgent) call(ctx context.Context, req hostagent.Request) (hostagent.Response, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := a.client.Call(ctx, req)
	if err != nil {
		return resp, fmt.Errorf("%s on %s: %w", req.Op, a.key, err)
	}
	return resp, nil
}

// agentFor connects to the node's host and starts the run's agent there,
// once per host.
func (d *hosts) agentFor(ctx context.Context, m *member) (*hostAgent, error) {
	t := m.SSH.Target
	r, err := remote.Resolve(t)
	if err != nil {
		return nil, err
	}
	key := r.Key()
	d.mu.Lock()
	defer d.mu.Unlock()
	if a, ok := d.agents[key]; ok {
		return a, nil
	}
	if d.agents == nil {
		d.agents = map[string]*hostAgent{}
	}
	env := d.c.Env()
	conn, err := remote.Dial(ctx, t)
	if err != nil {
		return nil, err
	}
	if conn.Insecure {
		d.c.logf("WARNING: the key of host %s is NOT verified (insecure_ignore_host_key): anyone in the middle can pose as it; use this only for a throw-away lab", conn.Addr)
		fmt.Fprintf(os.Stderr, "fencecheck: WARNING: the key of host %s is NOT verified (insecure_ignore_host_key)\n", conn.Addr)
	}
	fail := func(err error) (*hostAgent, error) {
		conn.Close()
		return nil, fmt.Errorf("host %s: %w", conn.Addr, err)
	}
	arch, err := conn.Arch()
	if err != nil {
		return fail(err)
	}
	bin, err := helperBinary(ctx, env.Log, arch)
	if err != nil {
		return fail(err)
	}
	workdir := m.SSH.Workdir
	if workdir == "" {
		workdir = "/tmp"
	}
	dir := path.Join(workdir, "fencecheck-"+env.RunID)
	agentPath := path.Join(dir, "fencehost")
	if err := conn.Upload(bin, agentPath, 0o755); err != nil {
		return fail(fmt.Errorf("copying the host agent: %w", err))
	}
	// The agent's own words go to the run's log, and the last of them into
	// an error when it does not answer (a workdir on a noexec mount, a
	// host that is not Linux).
	said := &lastBytes{max: 2048}
	stderr := io.MultiWriter(d.c.logWriter("host "+conn.Addr), said)
	sess, err := conn.Start([]string{"exec", agentPath, "serve", "--run", env.RunID, "--dir", dir, "--lease", hostagent.DefaultLease.String()}, stderr)
	if err != nil {
		return fail(fmt.Errorf("starting the host agent: %w", err))
	}
	a := &hostAgent{key: conn.Addr, conn: conn, sess: sess, client: hostagent.NewClient(sess.Stdout, sess.Stdin), dir: dir}
	resp, err := a.call(ctx, hostagent.Request{Op: hostagent.OpHello})
	if err == nil && (resp.Hello == nil || resp.Hello.Version != hostagent.Version) {
		err = fmt.Errorf("the host agent speaks %+v, not %s", resp.Hello, hostagent.Version)
	}
	if err != nil {
		a.client.Close()
		waitAWhile(sess)
		if w := said.String(); w != "" {
			err = fmt.Errorf("%w; the agent said: %s", err, w)
		}
		return fail(err)
	}
	a.hello = resp.Hello
	d.c.logf("host %s: agent %s (pid %d, uid %d) in %s; power loss: %s; partition: %s; clock: %s", conn.Addr, a.hello.Version,
		a.hello.PID, a.hello.UID, dir, orYes(a.hello.FUSEWhy), orYes(a.hello.NetfilterWhy), orYes(a.hello.ClockWhy))
	d.agents[key] = a
	d.order = append(d.order, a)
	return a, nil
}

func orYes(why string) string {
	if why == "" {
		return "yes"
	}
	return "no (" + why + ")"
}

// helperBinary is the host agent to copy for arch.
func helperBinary(ctx context.Context, progress io.Writer, arch string) (string, error) {
	if p := os.Getenv(HostHelperEnv); p != "" {
		if got, err := elfArch(p); err != nil || got != arch {
			return "", fmt.Errorf("$%s=%s is not a linux program for the host's %s (%s %v)", HostHelperEnv, p, arch, got, err)
		}
		return p, nil
	}
	if exe, err := os.Executable(); err == nil {
		beside := filepath.Join(filepath.Dir(exe), "fencehost")
		if got, err := elfArch(beside); err == nil && got == arch {
			return beside, nil
		}
	}
	bin, err := docker.StaticCommand(ctx, progress, "fencehost", "./cmd/fencehost", arch)
	if err != nil {
		return "", fmt.Errorf("no host agent for %s: set %s to a fencehost built for it (make build puts one beside fencecheck), or run from the sources: %w", arch, HostHelperEnv, err)
	}
	return bin, nil
}

// waitAWhile gives an agent that ended its last words (its stderr is
// copied on its own) for up to two seconds.
func waitAWhile(sess *remote.Session) {
	done := make(chan struct{})
	go func() { sess.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
	}
}

// lastBytes keeps the last max bytes written to it.
type lastBytes struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (l *lastBytes) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b = append(l.b, p...)
	if len(l.b) > l.max {
		l.b = l.b[len(l.b)-l.max:]
	}
	return len(p), nil
}

func (l *lastBytes) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.TrimSpace(string(l.b))
}

// elfArch is the machine a linux program is built for.
func elfArch(path string) (string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	switch {
	case f.OSABI != elf.ELFOSABI_NONE && f.OSABI != elf.ELFOSABI_LINUX:
		return "", fmt.Errorf("not a linux program")
	case f.Machine == elf.EM_X86_64:
		return "amd64", nil
	case f.Machine == elf.EM_AARCH64:
		return "arm64", nil
	}
	return f.Machine.String(), nil
}

// logWriter is a writer whose lines go to the run's log, prefixed.
func (c *Cluster) logWriter(prefix string) io.Writer {
	pr, pw := io.Pipe()
	go func() {
		b := make([]byte, 4096)
		var line []byte
		for {
			n, err := pr.Read(b)
			line = append(line, b[:n]...)
			for {
				i := strings.IndexByte(string(line), '\n')
				if i < 0 {
					break
				}
				c.logf("%s: %s", prefix, line[:i])
				line = line[i+1:]
			}
			if err != nil {
				return
			}
		}
	}()
	return pw
}

// prepare connects to the node's host, makes its folders there and takes
// its ports as declared.
func (d *hosts) prepare(ctx context.Context, m *member) error {
	a, err := d.agentFor(ctx, m)
	if err != nil {
		return err
	}
	s := sshOf(m)
	s.agent = a
	m.host = m.SSH.Address
	if m.host == "" {
		m.host, _, _ = net.SplitHostPort(a.conn.Addr)
	}
	for _, p := range m.Ports {
		m.bound[p.Name] = p.Number
	}
	resp, err := a.call(ctx, hostagent.Request{Op: hostagent.OpPrepare, Node: m.Name, Files: m.Data.Files, ClockFile: m.Clock.Via == ClockFile})
	if err != nil {
		return err
	}
	s.data, s.clockFile = resp.Data, resp.ClockFile
	return nil
}

func (d *hosts) view(m *member) (string, string) {
	s := sshOf(m)
	return s.data, s.clockFile
}

// layerWhy: the host must be able to mount the layer.
func (d *hosts) layerWhy(m *member) string {
	if a := sshOf(m).agent; a != nil && a.hello.FUSEWhy != "" {
		return "its host cannot mount the layer: " + a.hello.FUSEWhy
	}
	return ""
}

// newLayer mounts the layer on the host, under the node's data.
func (d *hosts) newLayer(m *member) (disk, error) {
	s := sshOf(m)
	resp, err := s.agent.call(context.Background(), hostagent.Request{Op: hostagent.OpLayer, Node: m.Name})
	if err != nil {
		return nil, err
	}
	s.data = resp.Data
	return &hostDisk{a: s.agent, node: m.Name, dir: resp.Data}, nil
}

// hostDisk is the layer on a node's host.
type hostDisk struct {
	a         *hostAgent
	node, dir string
}

func (h *hostDisk) Dir() string { return h.dir }
func (h *hostDisk) PowerLoss() (lazyfs.Loss, error) {
	resp, err := h.a.call(context.Background(), hostagent.Request{Op: hostagent.OpPowerLoss, Node: h.node})
	return resp.Loss, err
}
func (h *hostDisk) ArmCut(window time.Duration) error {
	_, err := h.a.call(context.Background(), hostagent.Request{Op: hostagent.OpArmCut, Node: h.node, Window: window})
	return err
}
func (h *hostDisk) Pending() (lazyfs.Loss, error) {
	resp, err := h.a.call(context.Background(), hostagent.Request{Op: hostagent.OpPending, Node: h.node})
	return resp.Loss, err
}
func (h *hostDisk) Unmount() error {
	_, err := h.a.call(context.Background(), hostagent.Request{Op: hostagent.OpUnmount, Node: h.node})
	return err
}

// environ is the program's environment on the host: the node's FENCECHECK_*
// variables, its clock file, its own.
func (d *hosts) environ(m *member) []string {
	env := nodeEnv(m)
	if f := sshOf(m).clockFile; f != "" {
		env = append(env, fencing.ClockFileEnv+"="+f)
	}
	return append(env, substituteEnv(m.SSH.Env, m.vars)...)
}

func (d *hosts) start(ctx context.Context, m *member) error {
	_, err := sshOf(m).agent.call(ctx, hostagent.Request{Op: hostagent.OpStart, Node: m.Name,
		Argv: substituteAll(m.SSH.Argv, m.vars), Env: d.environ(m), Dir: m.SSH.Dir})
	return err
}

func (d *hosts) running(ctx context.Context, m *member) (bool, error) {
	resp, err := sshOf(m).agent.call(ctx, hostagent.Request{Op: hostagent.OpRunning, Node: m.Name})
	return resp.Running, err
}

func (d *hosts) signal(ctx context.Context, m *member, sig string) error {
	_, err := sshOf(m).agent.call(ctx, hostagent.Request{Op: hostagent.OpSignal, Node: m.Name, Signal: sig})
	return err
}

// pause stops the node's process group on its host; resume continues it.
func (d *hosts) pause(ctx context.Context, m *member) error  { return d.signal(ctx, m, "STOP") }
func (d *hosts) resume(ctx context.Context, m *member) error { return d.signal(ctx, m, "CONT") }

// kill is kill -9 of the group on its host, waited for.
func (d *hosts) kill(ctx context.Context, m *member) error {
	_, err := sshOf(m).agent.call(ctx, hostagent.Request{Op: hostagent.OpKill, Node: m.Name})
	return err
}

func (d *hosts) wipe(ctx context.Context, m *member) error {
	_, err := sshOf(m).agent.call(ctx, hostagent.Request{Op: hostagent.OpWipe, Node: m.Name})
	return err
}

// gone says why an ssh node can no longer come up: its program exited on
// its host (with the last lines of its log there).
func (d *hosts) gone(m *member) error {
	a := sshOf(m).agent
	if a == nil {
		return nil
	}
	resp, err := a.call(context.Background(), hostagent.Request{Op: hostagent.OpRunning, Node: m.Name})
	if err != nil || resp.Running || resp.Status == "" || strings.Contains(resp.Status, "never started") {
		return nil
	}
	err = fmt.Errorf("node %s exited on %s before it answered %s (%s)", m.Name, a.key, healthWhat(m), resp.Status)
	if tl, terr := a.call(context.Background(), hostagent.Request{Op: hostagent.OpTail, Node: m.Name, Lines: 10}); terr == nil && tl.Text != "" {
		err = fmt.Errorf("%w; last lines of its log on the host:\n%s", err, tl.Text)
	}
	return exitedError{err}
}

func (d *hosts) hostAddr(m *member, port string) (string, error) {
	a, ok := netAddr(m, port)
	if !ok {
		return "", fmt.Errorf("node %s has no port %q", m.Name, port)
	}
	return a, nil
}

// moveClock moves the wall clock of the node's processes on its host (the
// vDSO patch), or writes its offset file there.
func (d *hosts) moveClock(ctx context.Context, m *member, offset time.Duration) error {
	op := hostagent.OpClock
	if m.Clock.Via == ClockFile {
		op = hostagent.OpClockFile
	}
	_, err := sshOf(m).agent.call(ctx, hostagent.Request{Op: op, Node: m.Name, Offset: offset})
	return err
}

func (d *hosts) clockReach(ctx context.Context, m *member) string {
	a := sshOf(m).agent
	if a.hello.ClockWhy != "" {
		return "its host: " + a.hello.ClockWhy
	}
	resp, err := a.call(ctx, hostagent.Request{Op: hostagent.OpClockReach, Node: m.Name})
	if err != nil {
		return err.Error()
	}
	return resp.Why
}

func (d *hosts) afterStart(m *member) error {
	if m.Clock.Via != ClockProcesses {
		return nil
	}
	if _, err := sshOf(m).agent.call(context.Background(), hostagent.Request{Op: hostagent.OpClockSync, Node: m.Name}); err != nil {
		return fmt.Errorf("node %s started, but its clock offset could not be re-applied: %w", m.Name, err)
	}
	return nil
}

// cutWhy: the host must be able to set nftables rules, and the node must
// be the one that stands for its host (a cut is by address: the nodes of
// one host are on one side).
func (d *hosts) cutWhy(m *member) string {
	a := sshOf(m).agent
	if a == nil {
		return "not started"
	}
	if a.hello.NetfilterWhy != "" {
		return fmt.Sprintf("node %s's host cannot set rules: %s", m.Name, a.hello.NetfilterWhy)
	}
	for _, o := range d.c.members {
		if o == m {
			break
		}
		if o.Kind() == KindSSH && sshOf(o).agent == a {
			return fmt.Sprintf("node %s shares host %s with %s, which stands for the host in partitions (a cut is by address)", m.Name, a.key, o.Name)
		}
	}
	return ""
}

// cut drops the host's traffic with the peers' hosts, in the run's own
// nftables table there.
func (d *hosts) cut(ctx context.Context, m *member, both, to []*member) error {
	addrs := func(peers []*member) ([]string, error) {
		var out []string
		for _, p := range peers {
			ip, err := resolveIPv4(ctx, p.host)
			if err != nil {
				return nil, fmt.Errorf("cutting %s from %s: %w", m.Name, p.Name, err)
			}
			if p.host == m.host {
				return nil, fmt.Errorf("nodes %s and %s share the address %s: a cut cannot separate them", m.Name, p.Name, m.host)
			}
			out = append(out, ip)
		}
		return out, nil
	}
	b, err := addrs(both)
	if err != nil {
		return err
	}
	t, err := addrs(to)
	if err != nil {
		return err
	}
	_, err = sshOf(m).agent.call(ctx, hostagent.Request{Op: hostagent.OpCut, Peers: b, To: t})
	return err
}

func resolveIPv4(ctx context.Context, host string) (string, error) {
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip4", host)
	if err != nil || len(ips) == 0 {
		return "", fmt.Errorf("no IPv4 address for %s: %v", host, err)
	}
	return ips[0].Unmap().String(), nil
}

// healCuts lifts every host's cut.
func (d *hosts) healCuts(ctx context.Context) error {
	var errs []error
	for _, a := range d.agentsNow() {
		if a.hello.NetfilterWhy != "" {
			continue
		}
		_, err := a.call(ctx, hostagent.Request{Op: hostagent.OpCut})
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (d *hosts) agentsNow() []*hostAgent {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]*hostAgent(nil), d.order...)
}

// stopAll stops every ssh node's program (SIGTERM, then SIGKILL after 3 s),
// all at once, then copies each one's log from its host into the run's
// logs/, one at a time (an sshd allows a few sessions per connection).
func (d *hosts) stopAll(ctx context.Context, ms []*member) error {
	var started []*member
	for _, m := range ms {
		if m.Kind() == KindSSH && sshOf(m).agent != nil {
			started = append(started, m)
		}
	}
	errs := make([]error, len(started))
	var wg sync.WaitGroup
	for i, m := range started {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = sshOf(m).agent.call(ctx, hostagent.Request{Op: hostagent.OpTerminate, Node: m.Name, Grace: 3 * time.Second})
		}()
	}
	wg.Wait()
	logs := filepath.Join(d.c.Env().Dir, "logs")
	for _, m := range started {
		if err := os.MkdirAll(logs, 0o755); err != nil {
			errs = append(errs, err)
			break
		}
		a := sshOf(m).agent
		err := a.conn.Fetch(path.Join(a.dir, "logs", m.Name+".log"), filepath.Join(logs, m.Name+".log"))
		if err != nil && !errors.Is(err, os.ErrNotExist) { // never started: no log
			errs = append(errs, fmt.Errorf("%s: copying its log: %w", m.Name, err))
		}
	}
	return errors.Join(errs...)
}

// close tells every agent bye (it heals, unmounts and removes its folder
// and itself) and closes the connections. An agent that cannot be told
// heals on its own when its connection ends.
func (d *hosts) close(ctx context.Context) error {
	var errs []error
	for _, a := range d.agentsNow() {
		bctx, cancel := context.WithTimeout(ctx, callTimeout)
		if err := a.client.Bye(bctx); err != nil {
			errs = append(errs, fmt.Errorf("host %s: %w", a.key, err))
		}
		cancel()
		a.client.Close()
		a.sess.Close()
		a.conn.Close()
	}
	return errors.Join(errs...)
}
