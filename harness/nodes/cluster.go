package nodes

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/harness"
	"github.com/fencecheck/fencecheck/harness/docker"
	"github.com/fencecheck/fencecheck/nemesis"
)

// Options configure a Cluster.
type Options struct {
	// Log receives setup messages (nil: the run's log).
	Log io.Writer
	// KeepData keeps the containers' folders (data, clock) in the run's
	// store folder, as evidence, instead of the engine's run directory,
	// which is removed with the containers. Nodes on this machine always
	// keep theirs in the store folder (<run>/nodes/<node>).
	KeepData bool
	_        struct{}
}

// Cluster runs a table of nodes: it is a harness.Target, and it carries out
// the nemesis capabilities on every kind of node (package doc). A system's
// package may wrap it to add hooks (Leader, a member's replacement on a
// wipe) or to override a capability.
type Cluster struct {
	name    string
	sem     checkers.Semantics
	opts    Options
	members []*member

	mu      sync.Mutex
	env     harness.Env
	log     io.Writer
	started bool
	stopped bool
	ready   bool // every node answered once: clock reach is known
	eps     harness.Endpoints

	ctr  *containers
	proc *processes
	srv  *servers
	ssh  *hosts
	// layers serve the power-loss layers of the nodes on this machine.
	layers *localLayers
}

// member is one node of a running cluster.
type member struct {
	Node
	drv driver
	// dir is the node's host folder: data/, mnt/ (the layer), clock/, files/.
	dir string
	// host is where the other nodes reach it; bound maps each port name to
	// the number the node listens on.
	host  string
	bound map[string]int
	// vars are its placeholders, as it sees them; files are its data
	// files with theirs filled (dataFiles).
	vars  map[string]string
	files map[string]string
	// disk is the lazyfs layer over its data (Env.DiskLayer); diskWhy says
	// why there is none.
	disk    disk
	diskWhy string
	// clockWhy says why its clock cannot be moved ("" when it can).
	clockWhy string

	// kind state
	proc *process // KindProcess: the running program (its group)
	run  Runner   // KindInProcess
	kind any      // per-driver extras
}

// A Cluster is a target that offers every node fault.
var _ interface {
	harness.Target
	nemesis.Pauser
	nemesis.Restarter
	nemesis.Partitioner
	nemesis.ClockSkewer
	nemesis.ClockExplainer
	nemesis.PowerCutter
	nemesis.PowerExplainer
	nemesis.DurabilityProber
	nemesis.FsyncCutter
} = (*Cluster)(nil)

// New checks the table and returns its cluster; nothing runs until Start.
func New(name string, sem checkers.Semantics, table []Node, opts Options) (*Cluster, error) {
	if err := validate(table); err != nil {
		return nil, fmt.Errorf("target %s: %w", name, err)
	}
	c := &Cluster{name: name, sem: sem, opts: opts}
	c.ctr, c.proc, c.srv, c.ssh = &containers{c: c}, &processes{c: c}, &servers{c: c}, &hosts{c: c}
	c.layers = &localLayers{c: c}
	for _, n := range table {
		m := &member{Node: n, bound: map[string]int{}}
		switch n.Kind() {
		case KindContainer:
			m.drv = c.ctr
		case KindProcess:
			m.drv = c.proc
		case KindInProcess:
			m.drv = c.srv
		case KindSSH:
			m.drv = c.ssh
		default:
			m.drv = unreachable{}
		}
		c.members = append(c.members, m)
	}
	return c, nil
}

// Must is New for a built-in table, which cannot be wrong but by a bug.
func Must(c *Cluster, err error) *Cluster {
	if err != nil {
		panic(err)
	}
	return c
}

// Name implements harness.Target.
func (c *Cluster) Name() string { return c.name }

// Semantics implements harness.Target.
func (c *Cluster) Semantics() checkers.Semantics { return c.sem }

// Table is the cluster's nodes as declared.
func (c *Cluster) Table() []Node {
	out := make([]Node, len(c.members))
	for i, m := range c.members {
		out[i] = m.Node
	}
	return out
}

// Env is the run environment Start was given (the zero Env before).
func (c *Cluster) Env() harness.Env {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.env
}

func (c *Cluster) logf(format string, args ...any) {
	c.mu.Lock()
	w := c.log
	c.mu.Unlock()
	if w != nil {
		fmt.Fprintf(w, c.name+": "+format+"\n", args...)
	}
}

// Start implements harness.Target: it builds the images it needs, makes
// every node's folders, ports and addresses, starts the nodes in table order
// (each after the nodes it waits for answer), and returns once every node
// answers its health. A failed start stops what it started.
func (c *Cluster) Start(ctx context.Context, env harness.Env) (harness.Endpoints, error) {
	if env.Log == nil {
		env.Log = io.Discard
	}
	dir, err := filepath.Abs(env.Dir)
	if err != nil {
		return harness.Endpoints{}, err
	}
	env.Dir = dir
	c.mu.Lock()
	if c.started {
		c.mu.Unlock()
		return harness.Endpoints{}, fmt.Errorf("target %s started twice", c.name)
	}
	c.started, c.env, c.log = true, env, c.opts.Log
	if c.log == nil {
		c.log = env.Log
	}
	c.mu.Unlock()
	fail := func(err error) (harness.Endpoints, error) {
		c.Stop(context.WithoutCancel(ctx))
		return harness.Endpoints{}, err
	}
	if err := c.prepare(ctx); err != nil {
		return fail(err)
	}
	begin := time.Now()
	healthy := map[string]bool{}
	for _, m := range c.members {
		if m.Kind() == KindURL {
			continue
		}
		if err := c.waitFor(ctx, m, healthy); err != nil {
			return fail(err)
		}
		if err := m.drv.start(ctx, m); err != nil {
			return fail(fmt.Errorf("starting node %s: %w", m.Name, err))
		}
	}
	if err := c.waitHealthy(ctx, c.members, 0); err != nil {
		return fail(err)
	}
	c.checkClocks(ctx)
	eps := c.endpoints()
	c.mu.Lock()
	c.eps, c.ready = eps, true
	c.mu.Unlock()
	c.logf("ready in %.1fs (%s)", time.Since(begin).Seconds(), c.summary())
	return eps, nil
}

// waitFor waits for the nodes m waits for, each once.
func (c *Cluster) waitFor(ctx context.Context, m *member, healthy map[string]bool) error {
	var ms []*member
	for _, name := range m.WaitFor {
		if !healthy[name] {
			o, _ := c.lookup(name)
			ms = append(ms, o)
		}
	}
	if len(ms) == 0 {
		return nil
	}
	if err := c.waitHealthy(ctx, ms, 0); err != nil {
		return err
	}
	for _, o := range ms {
		healthy[o.Name] = true
	}
	return nil
}

// summary names the nodes by role: "etcd-1, etcd-2 (etcd); adapter-1 (adapter)".
func (c *Cluster) summary() string {
	var order []string
	by := map[string][]string{}
	for _, m := range c.members {
		r := m.RoleLabel()
		if by[r] == nil {
			order = append(order, r)
		}
		by[r] = append(by[r], m.Name)
	}
	parts := make([]string, len(order))
	for i, r := range order {
		parts[i] = fmt.Sprintf("%s: %s", r, strings.Join(by[r], ", "))
	}
	return strings.Join(parts, "; ")
}

// endpoints are where clients reach the issuers and the resources.
func (c *Cluster) endpoints() harness.Endpoints {
	var eps harness.Endpoints
	for _, m := range c.members {
		if !m.Serves() {
			continue
		}
		u := strings.TrimRight(m.URL, "/")
		if m.Kind() != KindURL {
			addr, _ := m.drv.hostAddr(m, "")
			u = "http://" + addr
		}
		ep := harness.Endpoint{Node: m.Name, URL: u}
		if m.Issuer {
			eps.Issuers = append(eps.Issuers, ep)
		}
		if m.Resource {
			eps.Resources = append(eps.Resources, ep)
		}
	}
	return eps
}

// Endpoints are where clients reach the nodes (once started).
func (c *Cluster) Endpoints() harness.Endpoints {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.eps
}

// Stop implements harness.Target: programs get SIGTERM (then SIGKILL),
// in-process servers stop, containers' logs are saved into env.Dir/logs and
// the containers removed with the engine's run directory; layers are
// unmounted. Folders in the store folder stay as evidence. Idempotent.
func (c *Cluster) Stop(ctx context.Context) error {
	c.mu.Lock()
	if !c.started || c.stopped {
		c.mu.Unlock()
		return nil
	}
	c.stopped = true
	c.mu.Unlock()
	errs := []error{c.proc.stopAll(c.members), c.srv.stopAll(c.members), c.ssh.stopAll(ctx, c.members)}
	if _, err := os.Stat(c.env.Dir); err == nil {
		// (A folder removed meanwhile is a run that needs no logs.)
		errs = append(errs, c.ctr.saveLogs(ctx, filepath.Join(c.env.Dir, "logs")))
	}
	for _, m := range c.members {
		if m.disk == nil {
			continue
		}
		if m.Kind() == KindContainer {
			// The container's copy of the mount holds the layer up.
			c.ctr.rt.Kill(ctx, m.Name)
		}
		errs = append(errs, m.disk.Unmount())
	}
	errs = append(errs, c.layers.close(), c.ctr.close(ctx), c.proc.close(c.members), c.ssh.close(ctx))
	return errors.Join(errs...)
}

// SaveLogs writes the containers' logs so far into dir (Stop does this
// into the run's own folder; nodes on this machine log there directly).
func (c *Cluster) SaveLogs(ctx context.Context, dir string) error {
	if _, err := c.running(); err != nil {
		return err
	}
	return c.ctr.saveLogs(ctx, dir)
}

// running returns an error unless the cluster was started and not stopped
// (a nemesis's final heal may come after Stop).
func (c *Cluster) running() (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.started || c.stopped {
		return false, fmt.Errorf("target %s is not running", c.name)
	}
	return true, nil
}

// lookup finds a node by name.
func (c *Cluster) lookup(name string) (*member, error) {
	for _, m := range c.members {
		if m.Name == name {
			return m, nil
		}
	}
	return nil, fmt.Errorf("%s has no node %q", c.name, name)
}

// started finds a node that fencecheck started, in a running cluster.
func (c *Cluster) startedNode(name string) (*member, error) {
	if _, err := c.running(); err != nil {
		return nil, err
	}
	m, err := c.lookup(name)
	if err != nil {
		return nil, err
	}
	if m.Kind() == KindURL {
		return nil, fmt.Errorf("%s has no node %q that fencecheck started", c.name, name)
	}
	return m, nil
}

// Nodes implements nemesis.Cluster: the nodes fencecheck started (url
// nodes are not its to pause or restart), in table order.
func (c *Cluster) Nodes() []nemesis.Node {
	var out []nemesis.Node
	for _, m := range c.members {
		if m.Kind() != KindURL {
			out = append(out, nemesis.Node{Name: m.Name, Role: m.RoleLabel(), Stateless: m.Stateless})
		}
	}
	return out
}

// HostAddr is where this machine reaches one of a node's ports
// (127.0.0.1:<published port> for a container).
func (c *Cluster) HostAddr(node, port string) (string, error) {
	m, err := c.startedNode(node)
	if err != nil {
		return "", err
	}
	return m.drv.hostAddr(m, port)
}

// NetAddr is where the other nodes reach one of a node's ports (its
// address on the run network for a container).
func (c *Cluster) NetAddr(node, port string) (string, error) {
	m, err := c.startedNode(node)
	if err != nil {
		return "", err
	}
	a, ok := netAddr(m, port)
	if !ok {
		return "", fmt.Errorf("node %s has no port %q", node, port)
	}
	return a, nil
}

// Runtime is the run's container runtime (nil without container nodes or
// before Start).
func (c *Cluster) Runtime() *docker.Runtime {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ctr.rt
}

// Folder is a node's host folder (data/, clock/, ... inside).
func (c *Cluster) Folder(node string) string {
	m, err := c.lookup(node)
	if err != nil {
		return ""
	}
	return m.dir
}

// CheckRunning returns an error naming every started node that does not
// run.
func (c *Cluster) CheckRunning(ctx context.Context) error {
	var errs []error
	for _, m := range c.members {
		if m.Kind() == KindURL {
			continue
		}
		ok, err := m.drv.running(ctx, m)
		switch {
		case err != nil:
			errs = append(errs, err)
		case !ok:
			errs = append(errs, fmt.Errorf("node %s is not running", m.Name))
		}
	}
	return errors.Join(errs...)
}

// urlHost is the host:port of a base URL ("" when it has none).
func urlHost(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return u.Host
}
