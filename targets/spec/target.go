package spec

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/fencing"
	"github.com/fencecheck/fencecheck/harness"
	"github.com/fencecheck/fencecheck/harness/docker"
	"github.com/fencecheck/fencecheck/harness/ports"
	"github.com/fencecheck/fencecheck/harness/reaper"
	"github.com/fencecheck/fencecheck/nemesis"
	"github.com/fencecheck/fencecheck/nemesis/lazyfs"
	"github.com/fencecheck/fencecheck/nemesis/timewarp"
	"github.com/fencecheck/fencecheck/targets/conform"
)

// Options configure a spec target.
type Options struct {
	// Log receives setup messages (nil: the run's log).
	Log io.Writer
	// NoPreflight skips the conformance preflight in Start (fencecheck
	// conform runs it itself and wants the report, not an error).
	NoPreflight bool
	// StrictContract makes every deviation the preflight finds stop the
	// start, as `fencecheck conform` judges; otherwise only unsafe ones
	// do (conform.Deviation.Unsafe) and the rest are reported.
	StrictContract bool
	// DeferPreflight leaves the preflight out of Start for the harness to
	// run through Preflight, once the history is open, so its requests are
	// recorded there (a run's own phase).
	DeferPreflight bool
	_              struct{}
}

// Target runs the system a spec describes. It implements harness.Target
// and the nemesis capabilities Cluster, Pauser, Restarter and ClockSkewer
// (the clock moves every started node's processes unless it reads the
// offset file itself or opts out; url nodes are outside every node fault). New adds Partitioner when two or more nodes run in
// containers, the only nodes whose links the harness can cut without
// touching this machine's firewall; links between clients and nodes are
// cut, stripped and delayed by the harness's proxies for every kind.
type Target struct {
	spec *Spec
	opts Options

	mu        sync.Mutex
	env       harness.Env
	log       io.Writer
	nodes     map[string]*node
	order     []string // command and image nodes, in spec order
	rt        *docker.Runtime
	reaper    *reaper.Reaper // kills the command nodes' groups if the harness dies
	eps       harness.Endpoints
	preflight *conform.Report
	preload   string // the clock-skew library for command nodes ("" without gcc)
	started   bool
	stopping  bool
}

// node is the live state of one command or image node.
type node struct {
	spec Node
	// dir is env.Dir/nodes/<name> (data/ and clock/ inside).
	dir string
	// url is where clients reach the node (host port for both kinds).
	url  string
	port int // command: the loopback port; image: the container port
	vars map[string]string
	// command nodes
	proc    *process
	logPath string
	logFile *os.File
	// image nodes
	ip string
	// clock moves a command node's processes (ClockWarped); clockWhy says
	// why this machine cannot move the node's clock ("" when it can).
	clock    *timewarp.Group
	clockWhy string
	preload  string // the library a command node is started with, or ""
	// disk is the lazyfs layer over data/ (Env.DiskLayer), mounted at mnt/;
	// diskWhy says why there is none when one was asked for.
	disk    *lazyfs.Mount
	diskWhy string
}

func (n *node) dataDir() string { return filepath.Join(n.dir, "data") }

// workDir is the folder the node's program works in: the layer over its
// data folder when there is one, else the data folder itself.
func (n *node) workDir() string {
	if n.disk != nil {
		return n.disk.Dir()
	}
	return n.dataDir()
}
func (n *node) clockDir() string  { return filepath.Join(n.dir, "clock") }
func (n *node) clockFile() string { return filepath.Join(n.clockDir(), "offset") }

// skewFile is the preload library's offset file of a warped command node.
func (n *node) skewFile() string { return filepath.Join(n.clockDir(), "skew") }

// Paths inside an image node's container.
const (
	clockDirInContainer  = "/fencecheck/clock"
	clockFileInContainer = clockDirInContainer + "/offset"
)

var (
	_ harness.Target         = (*Target)(nil)
	_ nemesis.Cluster        = (*Target)(nil)
	_ nemesis.Pauser         = (*Target)(nil)
	_ nemesis.Restarter      = (*Target)(nil)
	_ nemesis.ClockSkewer    = (*Target)(nil)
	_ nemesis.ClockExplainer = (*Target)(nil)
	_ nemesis.PowerCutter    = (*Target)(nil)
	_ nemesis.PowerExplainer = (*Target)(nil)
	_ nemesis.Partitioner    = partitionable{}
)

// New returns the target for s; nothing runs until Start.
func New(s *Spec, opts Options) harness.Target {
	t := &Target{spec: s, opts: opts}
	images, commands := 0, 0
	for _, n := range s.Nodes {
		switch n.Kind() {
		case KindImage:
			images++
		case KindCommand:
			commands++ // a host process cannot be cut from the others
		}
	}
	if images >= 2 && commands == 0 {
		return partitionable{t}
	}
	return t
}

// Open loads the spec at path and returns its target.
func Open(path string, opts Options) (harness.Target, error) {
	s, err := Load(path)
	if err != nil {
		return nil, err
	}
	return New(s, opts), nil
}

// Spec is the spec the target runs.
func (t *Target) Spec() *Spec { return t.spec }

// Name implements harness.Target.
func (t *Target) Name() string { return t.spec.Name }

// Semantics implements harness.Target.
func (t *Target) Semantics() checkers.Semantics { return t.spec.ModelSemantics() }

// Preflight implements harness.Preflighter: the conformance preflight with
// every request recorded through record. A deviation that keeps the
// harness from driving the system or classifying its answers is an error
// (the run cannot be carried out), and with StrictContract so is any; a bad
// token's write the system accepted is left to the checkers, which find it
// in the history; the others are returned in words, for the report.
func (t *Target) Preflight(ctx context.Context, record harness.OpRecorder) ([]string, error) {
	t.mu.Lock()
	eps, ns := t.eps, t.env.Namespace
	t.mu.Unlock()
	rep, err := conform.Check(ctx, eps, conform.Options{Semantics: t.Semantics(), Record: record, Namespace: ns})
	t.mu.Lock()
	t.preflight = rep
	t.mu.Unlock()
	if err != nil {
		return nil, err
	}
	var blocking []conform.Deviation
	var reported []string
	for _, d := range rep.Deviations {
		switch {
		case t.opts.StrictContract || d.Unsafe && !d.Accepted:
			blocking = append(blocking, d)
		case d.Accepted:
			reported = append(reported, d.String()+" (the write is in the history: the checkers judge it)")
		default:
			reported = append(reported, d.String())
		}
	}
	if len(blocking) > 0 {
		return reported, (&conform.Report{Checks: rep.Checks, Passed: rep.Passed, Deviations: blocking}).Err()
	}
	t.logf("conformance preflight: %d checks, %s reported", rep.Checks, conform.CountDeviations(len(reported)))
	return reported, nil
}

// PreflightReport is the conformance report of the last Start or Preflight (nil when skipped).
func (t *Target) PreflightReport() *conform.Report {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.preflight
}

func (t *Target) logf(format string, args ...any) {
	if t.log != nil {
		fmt.Fprintf(t.log, "spec %s: "+format+"\n", append([]any{t.spec.Name}, args...)...)
	}
}

// Start implements harness.Target: it starts every command and image node,
// waits until every node answers GET /v1/health, and runs the conformance
// preflight (unless Options.NoPreflight): a system that breaks the contract
// fails to start, so a gate stops with "could not run" rather than report
// a verdict on answers it misread.
func (t *Target) Start(ctx context.Context, env harness.Env) (harness.Endpoints, error) {
	dir, err := filepath.Abs(env.Dir)
	if err != nil {
		return harness.Endpoints{}, err
	}
	env.Dir = dir
	t.mu.Lock()
	if t.started {
		t.mu.Unlock()
		return harness.Endpoints{}, errors.New("spec target started twice")
	}
	t.started = true
	t.env = env
	t.log = t.opts.Log
	if t.log == nil {
		t.log = env.Log
	}
	t.nodes = map[string]*node{}
	t.mu.Unlock()

	if err := t.prepare(ctx); err != nil {
		return harness.Endpoints{}, err
	}
	for _, name := range t.order {
		if t.nodes[name].spec.Kind() == KindCommand {
			rp, err := reaper.Start()
			if err != nil {
				return harness.Endpoints{}, err
			}
			t.mu.Lock()
			t.reaper = rp
			t.mu.Unlock()
			break
		}
	}
	for _, name := range t.order {
		n := t.nodes[name]
		var err error
		if n.spec.Kind() == KindCommand {
			err = t.startProcess(n)
		} else {
			err = t.startContainer(ctx, n)
		}
		if err != nil {
			return harness.Endpoints{}, fmt.Errorf("starting node %s: %w", name, err)
		}
	}
	var eps harness.Endpoints
	for _, sn := range t.spec.Nodes {
		url := sn.URL
		if n, ok := t.nodes[sn.Name]; ok {
			url = n.url
		}
		ep := harness.Endpoint{Node: sn.Name, URL: strings.TrimRight(url, "/")}
		if sn.HasRole(RoleIssuer) {
			eps.Issuers = append(eps.Issuers, ep)
		}
		if sn.HasRole(RoleResource) {
			eps.Resources = append(eps.Resources, ep)
		}
	}
	names := make([]string, len(t.spec.Nodes))
	for i, sn := range t.spec.Nodes {
		names[i] = sn.Name
	}
	if err := t.waitNodes(ctx, names...); err != nil {
		return harness.Endpoints{}, err
	}
	t.mu.Lock()
	t.eps = eps
	t.mu.Unlock()
	t.checkClocks(ctx)
	t.describeFaults()
	if t.opts.NoPreflight || t.opts.DeferPreflight {
		return eps, nil
	}
	rep, err := conform.Check(ctx, eps, conform.Options{Semantics: t.Semantics()})
	t.mu.Lock()
	t.preflight = rep
	t.mu.Unlock()
	if err != nil {
		return harness.Endpoints{}, err
	}
	if t.opts.StrictContract || len(rep.Unsafe()) > 0 {
		if err := rep.Err(); err != nil {
			return harness.Endpoints{}, fmt.Errorf("conformance preflight: %w", err)
		}
	}
	for _, d := range rep.Safe() {
		t.logf("contract deviation (the run goes on: it cannot let a bad token through; --strict-contract stops here): %s", d)
	}
	t.logf("conformance preflight passed (%d checks, %s that cannot let a bad token through)", rep.Checks, conform.CountDeviations(len(rep.Safe())))
	return eps, nil
}

// checkClocks finds, for every node whose process clock the harness moves,
// whether it can (ptrace permission; for a container, an engine whose
// processes are visible here or a helper container through its API),
// without touching the processes yet.
func (t *Target) checkClocks(ctx context.Context) {
	for _, name := range t.order {
		n := t.nodes[name]
		if !n.spec.ClockWarped() {
			continue
		}
		var why error
		if n.spec.Kind() == KindImage {
			why = t.rt.ClockReachable(ctx, name)
		} else {
			t.mu.Lock()
			p := n.proc
			t.mu.Unlock()
			why = timewarp.Reachable(p.pgid)
			if why != nil && n.preload != "" && timewarp.Preloaded(p.pgid, timewarp.PreloadName) {
				t.logf("node %s: the vDSO patch cannot reach it (%v); its libc calls are shifted by the preload library only", name, why)
				why = nil
			}
		}
		if why != nil {
			n.clockWhy = why.Error()
		}
	}
}

// describeFaults says up front which node faults can act, so a user who
// asks for the clock nemesis learns why it does not apply.
func (t *Target) describeFaults() {
	var urls, clocks []string
	for _, sn := range t.spec.Nodes {
		if sn.Kind() == KindURL {
			urls = append(urls, sn.Name)
			continue
		}
		n := t.nodes[sn.Name]
		switch {
		case sn.ClockOptIn():
			clocks = append(clocks, sn.Name+" (reads the offset file)")
		case !sn.ClockWarped():
			clocks = append(clocks, sn.Name+" (opted out: \"clock\": \"none\")")
		case n.clockWhy != "":
			clocks = append(clocks, sn.Name+" (cannot be reached: "+n.clockWhy+")")
		case sn.Kind() == KindImage:
			clocks = append(clocks, sn.Name+" (the container's processes: vDSO patch, preload library)")
		case n.preload != "":
			clocks = append(clocks, sn.Name+" (the process: vDSO patch, preload library)")
		default:
			clocks = append(clocks, sn.Name+" (the process: vDSO patch)")
		}
	}
	if len(urls) > 0 {
		t.logf("url nodes %s are not started by fencecheck: pause, restart and clock do not reach them; client-side faults (holder pause, partition, strip, delay) do", strings.Join(urls, ", "))
	}
	if len(clocks) > 0 {
		t.logf("clock faults: %s", strings.Join(clocks, ", "))
	}
	if len(t.ClockNodes()) == 0 {
		t.logf("no node's clock can be moved: the clock nemesis does not apply")
	}
}

// prepare makes each node's folders, picks ports and addresses, and fills
// the placeholders.
func (t *Target) prepare(ctx context.Context) error {
	vars := map[string]string{}
	for _, sn := range t.spec.Nodes {
		if sn.Kind() == KindURL {
			continue
		}
		n := &node{spec: sn, dir: filepath.Join(t.env.Dir, "nodes", sn.Name)}
		if err := os.MkdirAll(n.dataDir(), 0o755); err != nil {
			return err
		}
		if sn.Kind() == KindImage {
			// The image's own user, whichever it is, must be able to write
			// its data path (the harness does not impose a uid).
			if err := os.Chmod(n.dataDir(), 0o777); err != nil {
				return err
			}
		}
		if sn.ClockOptIn() || sn.ClockWarped() {
			if err := os.MkdirAll(n.clockDir(), 0o755); err != nil {
				return err
			}
		}
		if sn.ClockOptIn() {
			if err := writeClockOffset(n.clockFile(), 0); err != nil {
				return err
			}
		}
		if sn.ClockWarped() && sn.Kind() == KindCommand {
			if err := t.prepareProcessClock(ctx, n); err != nil {
				return err
			}
		}
		t.nodes[sn.Name] = n
		t.order = append(t.order, sn.Name)
	}
	imageIndex := 0
	for _, sn := range t.spec.Nodes {
		switch sn.Kind() {
		case KindURL:
			if u, err := parseHost(sn.URL); err == nil {
				vars["addr:"+sn.Name] = u
			}
		case KindCommand:
			n := t.nodes[sn.Name]
			port, err := ports.Stable() // kept across restarts: clients hold their endpoint for the run
			if err != nil {
				return fmt.Errorf("finding a port for %s: %w", sn.Name, err)
			}
			n.port = port
			n.url = "http://127.0.0.1:" + strconv.Itoa(port)
			vars["addr:"+sn.Name] = "127.0.0.1:" + strconv.Itoa(port)
		case KindImage:
			n := t.nodes[sn.Name]
			if t.rt == nil {
				rt, err := docker.New(ctx, t.env.RunID, docker.Options{Log: t.log})
				if err != nil {
					return err
				}
				t.mu.Lock()
				t.rt = rt
				t.mu.Unlock()
			}
			nw, err := t.rt.Network(ctx)
			if err != nil {
				return err
			}
			n.ip = nw.HostIP(imageIndex)
			imageIndex++
			n.port = sn.Port
			vars["addr:"+sn.Name] = n.ip + ":" + strconv.Itoa(sn.Port)
		}
	}
	if t.env.DiskLayer {
		if err := t.mountDisks(); err != nil {
			return err
		}
	}
	for _, name := range t.order {
		n := t.nodes[name]
		v := map[string]string{"name": name}
		for k, val := range vars {
			v[k] = val
		}
		if n.spec.Kind() == KindCommand {
			v["port"] = portString(n.port)
			v["data"] = n.workDir()
			if n.spec.ClockOptIn() {
				v["clock_file"] = n.clockFile()
			}
		} else {
			v["port"] = portString(n.spec.Port)
			v["data"] = n.spec.Data
			if n.spec.ClockOptIn() {
				v["clock_file"] = clockFileInContainer
			}
		}
		n.vars = v
	}
	return nil
}

// mountDisks puts each node's data folder on the lazyfs layer where it can
// be, for the power-loss nemesis, and notes why not elsewhere.
func (t *Target) mountDisks() error {
	fuseErr := lazyfs.Supported()
	for _, name := range t.order {
		n := t.nodes[name]
		switch {
		case n.spec.Kind() == KindImage && n.spec.Data == "":
			n.diskWhy = "the node declares no data path"
		case fuseErr != nil:
			n.diskWhy = fuseErr.Error()
		case n.spec.Kind() == KindImage && t.rt.HostBinds() != nil:
			n.diskWhy = t.rt.HostBinds().Error()
		default:
			m, err := lazyfs.New(n.dataDir(), filepath.Join(n.dir, "mnt"), lazyfs.Options{})
			if err != nil {
				return fmt.Errorf("node %s: %w", name, err)
			}
			n.disk = m
		}
	}
	return nil
}

// prepareProcessClock gives a command node its clock: the preload
// library in its environment (when gcc can build it) and the group that
// patches its processes, started at real time.
func (t *Target) prepareProcessClock(ctx context.Context, n *node) error {
	if t.preload == "" {
		lib, err := timewarp.Preload(ctx)
		if err != nil {
			t.logf("no clock-skew preload library (%v): command nodes' clocks are moved by the vDSO patch alone", err)
		}
		t.preload = lib
	}
	if t.preload != "" {
		if err := writeClockOffset(n.skewFile(), 0); err != nil {
			return err
		}
		n.preload = t.preload
	}
	scope := func() ([]int, error) {
		t.mu.Lock()
		p := n.proc
		t.mu.Unlock()
		if p == nil || p.exited() {
			return nil, nil // not running: StartNode applies the offset
		}
		return timewarp.ProcessGroup(p.pgid)()
	}
	also := func(d time.Duration) error {
		if n.preload == "" {
			return nil
		}
		return timewarp.SetPreloadOffset(n.skewFile(), d)
	}
	n.clock = timewarp.NewGroup(scope, timewarp.GroupOptions{Also: also})
	return nil
}

func parseHost(raw string) (string, error) {
	u, err := http.NewRequest(http.MethodGet, raw, nil)
	if err != nil {
		return "", err
	}
	return u.URL.Host, nil
}

// env is the node's environment: the harness's, the spec's, and the
// FENCECHECK_* variables that tell the program where things are.
func (n *node) environ(base []string) []string {
	env := append([]string{}, base...)
	env = append(env, "FENCECHECK_NODE="+n.spec.Name, "FENCECHECK_PORT="+n.vars["port"], "FENCECHECK_DATA="+n.vars["data"])
	if n.spec.ClockOptIn() {
		env = append(env, ClockFileEnv+"="+n.vars["clock_file"])
	}
	for k, v := range n.spec.Env {
		env = append(env, k+"="+substitute(v, n.vars))
	}
	if n.preload != "" {
		env = timewarp.PreloadEnv(env, n.preload, n.skewFile())
	}
	return env
}

func (n *node) argv() []string {
	out := make([]string, len(n.spec.Command))
	for i, a := range n.spec.Command {
		out[i] = substitute(a, n.vars)
	}
	return out
}

// startProcess (re)starts a command node's program, its output appended to
// env.Dir/logs/<node>.log.
func (t *Target) startProcess(n *node) error {
	if n.logFile == nil {
		if err := os.MkdirAll(filepath.Join(t.env.Dir, "logs"), 0o755); err != nil {
			return err
		}
		n.logPath = filepath.Join(t.env.Dir, "logs", n.spec.Name+".log")
		f, err := os.OpenFile(n.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		n.logFile = f
	}
	argv := n.argv()
	fmt.Fprintf(n.logFile, "=== fencecheck %s: starting %s: %s\n", time.Now().UTC().Format(time.RFC3339Nano), n.spec.Name, strings.Join(argv, " "))
	t.mu.Lock()
	rp := t.reaper
	t.mu.Unlock()
	p, err := startProcess(argv, t.spec.Dir, n.environ(os.Environ()), n.logFile, rp)
	if err != nil {
		return err
	}
	t.mu.Lock()
	n.proc = p
	t.mu.Unlock()
	go t.watch(n, p)
	return nil
}

// watch notes a program that exits on its own: the run goes on (its
// requests now fail), but the log says why.
func (t *Target) watch(n *node, p *process) {
	<-p.done
	how := "killed by fencecheck"
	if !p.expectedExit() {
		how = "exited on its own"
		t.mu.Lock()
		stopping := t.stopping
		t.mu.Unlock()
		if !stopping {
			t.logf("node %s exited on its own (%s); see %s", n.spec.Name, p.status(), n.logPath)
		}
	}
	fmt.Fprintf(n.logFile, "=== fencecheck %s: %s %s: %s\n", time.Now().UTC().Format(time.RFC3339Nano), n.spec.Name, how, p.status())
}

// startContainer runs an image node on the run network, its data path and
// clock folder bind-mounted from the node's host folder.
func (t *Target) startContainer(ctx context.Context, n *node) error {
	var binds []docker.Bind
	if n.spec.Data != "" {
		binds = append(binds, docker.Bind{Host: n.workDir(), Container: n.spec.Data})
	}
	if n.spec.ClockOptIn() {
		// The folder, not the file: the offset file is replaced by rename.
		binds = append(binds, docker.Bind{Host: n.clockDir(), Container: clockDirInContainer, ReadOnly: true})
	}
	var cmd []string
	if len(n.spec.Command) > 0 {
		cmd = n.argv()
	}
	c, err := t.rt.Run(ctx, docker.ContainerSpec{Node: n.spec.Name, Image: n.spec.Image, Cmd: cmd,
		Env: n.environ(nil), IP: n.ip, Ports: []int{n.spec.Port}, Binds: binds,
		ClockPreload: n.spec.ClockWarped()})
	if err != nil {
		return err
	}
	n.url = "http://" + c.Addr(n.spec.Port)
	return nil
}

// waitNodes waits until every named node answers GET /v1/health with 200
// (harness.HealthWait), failing early when a command node's program exits
// or a url node refuses every connection for a while.
func (t *Target) waitNodes(ctx context.Context, names ...string) error {
	var eps []harness.Endpoint
	procs := map[string]*process{}
	urls := map[string]bool{}
	var logs []string
	t.mu.Lock()
	for _, name := range names {
		if n, ok := t.nodes[name]; ok {
			eps = append(eps, harness.Endpoint{Node: name, URL: n.url})
			procs[name] = n.proc
			if n.logPath != "" {
				logs = append(logs, n.logPath)
			}
			continue
		}
		for _, sn := range t.spec.Nodes {
			if sn.Name == name {
				eps = append(eps, harness.Endpoint{Node: name, URL: sn.URL})
				urls[name] = true
			}
		}
	}
	t.mu.Unlock()
	var exited error
	gone := func(node string) error {
		n, _ := t.node(node)
		if p := procs[node]; p != nil && p.exited() {
			exited = fmt.Errorf("node %s exited before it answered GET /v1/health (%s)", node, p.status())
			if n != nil {
				if tl := tail(n.logPath, 10); tl != "" {
					exited = fmt.Errorf("%w; last lines of %s:\n%s", exited, n.logPath, tl)
				}
			}
			return exited
		}
		return nil
	}
	err := harness.HealthWait{Nodes: eps, Limit: t.spec.Timeout(), Gone: gone, Running: urls}.Run(ctx)
	if err != nil && exited == nil && len(logs) > 0 {
		err = fmt.Errorf("%w; see %s", err, strings.Join(logs, ", "))
	}
	return err
}

// Stop implements harness.Target: programs get SIGTERM (then SIGKILL),
// containers' logs are saved and the containers removed. Data folders stay
// in the run folder as evidence.
func (t *Target) Stop(ctx context.Context) error {
	t.mu.Lock()
	if !t.started || t.stopping {
		t.mu.Unlock()
		return nil
	}
	t.stopping = true
	nodes := make([]*node, 0, len(t.order))
	for _, name := range t.order {
		nodes = append(nodes, t.nodes[name])
	}
	rt := t.rt
	t.mu.Unlock()
	var errs []error
	var wg sync.WaitGroup
	var emu sync.Mutex
	for _, n := range nodes {
		if n.proc == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := n.proc.terminate(3 * time.Second); err != nil {
				emu.Lock()
				errs = append(errs, fmt.Errorf("%s: %w", n.spec.Name, err))
				emu.Unlock()
			}
		}()
	}
	wg.Wait()
	t.mu.Lock()
	rp := t.reaper
	t.reaper = nil
	t.mu.Unlock()
	errs = append(errs, rp.Close())
	for _, n := range nodes {
		if n.logFile != nil {
			n.logFile.Close()
		}
		if n.clock != nil {
			n.clock.Close()
		}
	}
	if rt != nil {
		errs = append(errs, rt.SaveLogs(ctx, filepath.Join(t.env.Dir, "logs")))
	}
	for _, n := range nodes {
		if n.disk == nil {
			continue
		}
		if n.spec.Kind() == KindImage && rt != nil {
			// The container's copy of the mount holds the layer up.
			rt.Kill(ctx, n.spec.Name)
		}
		errs = append(errs, n.disk.Unmount())
	}
	if rt != nil {
		errs = append(errs, rt.Close(ctx))
	}
	return errors.Join(errs...)
}

// Nodes implements nemesis.Cluster: the nodes fencecheck started (url nodes
// are not its to pause or restart).
func (t *Target) Nodes() []nemesis.Node {
	var out []nemesis.Node
	for _, sn := range t.spec.Nodes {
		if sn.Kind() != KindURL {
			out = append(out, nemesis.Node{Name: sn.Name, Role: strings.Join(sn.Roles, "+")})
		}
	}
	return out
}

func (t *Target) node(name string) (*node, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n, ok := t.nodes[name]
	if !ok {
		return nil, fmt.Errorf("%s has no node %q that fencecheck started", t.spec.Name, name)
	}
	return n, nil
}

// PauseNode implements nemesis.Pauser: SIGSTOP to a program's process
// group, the freezer cgroup for a container.
func (t *Target) PauseNode(ctx context.Context, name string) error {
	n, err := t.node(name)
	if err != nil {
		return err
	}
	if n.spec.Kind() == KindImage {
		return t.rt.Pause(ctx, name)
	}
	t.mu.Lock()
	p := n.proc
	t.mu.Unlock()
	return p.signal(syscall.SIGSTOP)
}

// ResumeNode implements nemesis.Pauser.
func (t *Target) ResumeNode(ctx context.Context, name string) error {
	n, err := t.node(name)
	if err != nil {
		return err
	}
	if n.spec.Kind() == KindImage {
		return t.rt.Unpause(ctx, name)
	}
	t.mu.Lock()
	p := n.proc
	t.mu.Unlock()
	return p.signal(syscall.SIGCONT)
}

// KillNode implements nemesis.Restarter: SIGKILL (the program gets no
// chance to flush anything it has not made durable).
func (t *Target) KillNode(ctx context.Context, name string) error {
	n, err := t.node(name)
	if err != nil {
		return err
	}
	if n.spec.Kind() == KindImage {
		return t.rt.Kill(ctx, name)
	}
	t.mu.Lock()
	p := n.proc
	t.mu.Unlock()
	return p.kill(10 * time.Second)
}

// StartNode implements nemesis.Restarter: the same command line, port and
// data folder, or an emptied data folder when wipe is set. It returns once
// the node answers GET /v1/health (a node that already runs is only waited
// for).
func (t *Target) StartNode(ctx context.Context, name string, wipe bool) error {
	n, err := t.node(name)
	if err != nil {
		return err
	}
	running, err := t.running(ctx, n)
	if err != nil {
		return err
	}
	// A node that runs was got running by an earlier start that then
	// failed (a retry): it is only waited for, never wiped or restarted.
	if !running {
		if err := t.startStopped(ctx, n, wipe); err != nil {
			return err
		}
	}
	if err := t.waitNodes(ctx, name); err != nil {
		return err
	}
	// Image nodes: the runtime's start hook gives the new processes the
	// offset.
	if n.clock != nil && n.spec.Kind() != KindImage {
		if _, err := n.clock.Sync(); err != nil {
			return fmt.Errorf("node %s started, but its clock offset could not be re-applied: %w", name, err)
		}
	}
	return nil
}

// startStopped starts a node that does not run, wiping its data folder
// first when asked.
func (t *Target) startStopped(ctx context.Context, n *node, wipe bool) error {
	if wipe {
		if err := emptyDir(n.workDir()); err != nil {
			return fmt.Errorf("wiping %s: %w", n.spec.Name, err)
		}
		if n.disk != nil {
			// A wipe is meant to last: made durable on the layer.
			if err := syncDir(n.workDir()); err != nil {
				return fmt.Errorf("wiping %s: %w", n.spec.Name, err)
			}
		}
	}
	if n.spec.Kind() == KindImage {
		return t.rt.Start(ctx, n.spec.Name)
	}
	if err := t.startProcess(n); err != nil {
		return err
	}
	// The new program gets the offset in force at once. This try is best
	// effort: a launcher still exec'ing the real program (a pyenv shim, a
	// shell's exec) replaces what was patched; the try once the node
	// answers (StartNode) is the one that counts.
	if n.clock != nil {
		n.clock.Sync()
	}
	return nil
}

// running says whether the node's process or container runs.
func (t *Target) running(ctx context.Context, n *node) (bool, error) {
	if n.spec.Kind() == KindImage {
		st, err := t.rt.State(ctx, n.spec.Name)
		if err != nil {
			return false, err
		}
		return st.Running, nil
	}
	t.mu.Lock()
	p := n.proc
	t.mu.Unlock()
	return p != nil && !p.exited(), nil
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// PowerNodes implements nemesis.PowerCutter: the nodes whose data folder
// is on the lazyfs layer.
func (t *Target) PowerNodes() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []string
	for _, name := range t.order {
		if t.nodes[name].disk != nil {
			out = append(out, name)
		}
	}
	return out
}

// PowerUnreachable implements nemesis.PowerExplainer.
func (t *Target) PowerUnreachable() map[string]string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := map[string]string{}
	for _, name := range t.order {
		n := t.nodes[name]
		switch {
		case n.disk != nil:
		case n.diskWhy != "":
			out[name] = n.diskWhy
		default:
			out[name] = "its data is not on the lazyfs layer (the run did not name power-loss)"
		}
	}
	for _, sn := range t.spec.Nodes {
		if sn.Kind() == KindURL {
			out[sn.Name] = "a url node is not started by fencecheck"
		}
	}
	return out
}

// CutPower implements nemesis.PowerCutter: the node is killed (SIGKILL to
// its program, or its container), then what it never made durable is
// dropped.
func (t *Target) CutPower(ctx context.Context, name string) (lazyfs.Loss, error) {
	n, err := t.node(name)
	if err != nil {
		return lazyfs.Loss{}, err
	}
	if n.disk == nil {
		return lazyfs.Loss{}, fmt.Errorf("node %s's data is not on the lazyfs layer", name)
	}
	if err := t.KillNode(ctx, name); err != nil {
		return lazyfs.Loss{}, err
	}
	return n.disk.PowerLoss()
}

func emptyDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

// ClockNodes implements nemesis.ClockSkewer: every started node, unless
// it opted out or this machine cannot reach its processes.
func (t *Target) ClockNodes() []string {
	var out []string
	for _, sn := range t.spec.Nodes {
		if sn.ClockOptIn() {
			out = append(out, sn.Name)
		} else if n, ok := t.nodes[sn.Name]; ok && sn.ClockWarped() && n.clockWhy == "" {
			out = append(out, sn.Name)
		}
	}
	return out
}

// ClockUnreachable implements nemesis.ClockExplainer.
func (t *Target) ClockUnreachable() map[string]string {
	out := map[string]string{}
	for _, sn := range t.spec.Nodes {
		n, ok := t.nodes[sn.Name]
		switch {
		case !ok:
			out[sn.Name] = "a url node, not started by fencecheck"
		case sn.Clock == ClockNone:
			out[sn.Name] = `opted out ("clock": "none")`
		case n.clockWhy != "":
			out[sn.Name] = n.clockWhy
		}
	}
	return out
}

// SetClockOffset implements nemesis.ClockSkewer: the offset file of a node
// that reads it, the processes of any other.
func (t *Target) SetClockOffset(ctx context.Context, name string, offset time.Duration) error {
	n, err := t.node(name)
	if err != nil {
		return err
	}
	switch {
	case n.spec.ClockOptIn():
		return writeClockOffset(n.clockFile(), offset)
	case !n.spec.ClockWarped():
		return fmt.Errorf("node %s opted out of clock faults", name)
	case n.spec.Kind() == KindImage:
		return t.rt.SetClockOffset(ctx, name, offset)
	}
	_, err = n.clock.SetOffset(offset)
	return err
}

// writeClockOffset replaces the offset file by rename: a reader sees the
// old number or the new one, never half of one.
func writeClockOffset(path string, offset time.Duration) error {
	return fencing.WriteClockOffset(path, offset)
}

// partitionable is a target whose started nodes all run in containers, so
// the harness can cut links between them (rules in each container's own
// network namespace, set from this machine or by a helper container).
type partitionable struct{ *Target }

// Partition implements nemesis.Partitioner.
func (p partitionable) Partition(ctx context.Context, groups [][]string) error {
	group := map[string]int{}
	for i, g := range groups {
		for _, name := range g {
			n, err := p.node(name)
			if err != nil {
				return err
			}
			if n.spec.Kind() != KindImage {
				return fmt.Errorf("node %s is not a container; only containers can be partitioned", name)
			}
			if j, dup := group[name]; dup && j != i {
				return fmt.Errorf("node %s is in two partition groups", name)
			}
			group[name] = i
		}
	}
	if err := p.rt.HealAll(ctx); err != nil {
		return err
	}
	for name, gi := range group {
		var peers []string
		for other, gj := range group {
			if gj != gi {
				peers = append(peers, p.nodes[other].ip)
			}
		}
		if len(peers) > 0 {
			if err := p.rt.Partition(ctx, name, peers); err != nil {
				return err
			}
		}
	}
	return nil
}

// HealPartition implements nemesis.Partitioner.
func (p partitionable) HealPartition(ctx context.Context) error {
	if p.rt == nil {
		return nil
	}
	return p.rt.HealAll(ctx)
}
