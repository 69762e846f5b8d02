package zookeeper

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/harness"
	"github.com/fencecheck/fencecheck/harness/docker"
	"github.com/fencecheck/fencecheck/nemesis"
)

// Ports inside the containers.
const (
	clientPort   = 2181
	quorumPort   = 2888
	electionPort = 3888
	adapterPort  = 7000
)

// TickTime is the ensemble's tick (ms). ZooKeeper grants session timeouts
// between 2 and 20 ticks, so with 500 ms the harness's 1 s leases are
// granted as asked, and every fault that outlasts a lease outlasts the
// session (with the default 2000 ms tick a 1 s request becomes 4 s).
const TickTime = 500

// Roles of the target's nodes.
const (
	roleServer  = "zookeeper"
	roleAdapter = "adapter"
)

// Paths inside a server's container.
const (
	dataInContainer = "/data"
	confInContainer = "/conf"
)

// Options configure the zookeeper target.
type Options struct {
	// Servers is the ensemble's size (default 3).
	Servers int
	// Adapters is the number of adapter replicas (default 2); clients are
	// spread over them.
	Adapters int
	// Log receives setup messages (default: the run's log).
	Log io.Writer
	_   struct{}
}

// Target is a ZooKeeper ensemble and adapters (the fenced server with the
// zookeeper backend) in containers on the run's own network. The adapters
// hold no fencing state: any of them can serve any resource request, and a
// lock lives in the session of the adapter that took it.
type Target struct {
	opts Options

	mu    sync.Mutex
	rt    *docker.Runtime
	env   harness.Env
	root  string // the run directory holding every node's folder
	nodes []node
	// clockWhy says, per server, why its clock cannot be moved from this
	// machine (found once the ensemble is up, so that ClockNodes never
	// changes during a run: the final heal must reach every node).
	clockWhy map[string]string
}

// node is one container of the target.
type node struct {
	name string
	role string
	id   int // the server's myid (servers only)
	ip   string
	dir  string // host folder in the run directory: data/, conf/ (servers)
}

var (
	_ harness.Target         = (*Target)(nil)
	_ nemesis.Cluster        = (*Target)(nil)
	_ nemesis.Leaderer       = (*Target)(nil)
	_ nemesis.Pauser         = (*Target)(nil)
	_ nemesis.Restarter      = (*Target)(nil)
	_ nemesis.Partitioner    = (*Target)(nil)
	_ nemesis.ClockSkewer    = (*Target)(nil)
	_ nemesis.ClockExplainer = (*Target)(nil)
)

// New returns the zookeeper target; nothing runs until Start.
func New(opts Options) *Target {
	if opts.Servers <= 0 {
		opts.Servers = 3
	}
	if opts.Adapters <= 0 {
		opts.Adapters = 2
	}
	t := &Target{opts: opts}
	for i := 1; i <= opts.Servers; i++ {
		t.nodes = append(t.nodes, node{name: fmt.Sprintf("zk-%d", i), role: roleServer, id: i})
	}
	for i := 1; i <= opts.Adapters; i++ {
		t.nodes = append(t.nodes, node{name: fmt.Sprintf("adapter-%d", i), role: roleAdapter})
	}
	return t
}

func (t *Target) Name() string                  { return "zookeeper" }
func (t *Target) Semantics() checkers.Semantics { return Semantics }

func (t *Target) logf(format string, args ...any) {
	w := t.opts.Log
	if w == nil {
		w = t.env.Log
	}
	if w != nil {
		fmt.Fprintf(w, "zookeeper: "+format+"\n", args...)
	}
}

// Start builds the images if needed, starts the servers and the adapters,
// and returns once every server serves (it is in a quorum) and every
// adapter answers GET /v1/health. A failed start stops what it started,
// saving the logs first.
func (t *Target) Start(ctx context.Context, env harness.Env) (harness.Endpoints, error) {
	t.env = env
	progress := t.opts.Log
	if progress == nil {
		progress = env.Log
	}
	zkTag, err := EnsureImage(ctx, progress)
	if err != nil {
		return harness.Endpoints{}, err
	}
	tags, err := docker.EnsureImages(ctx, progress, docker.ImageFenced)
	if err != nil {
		return harness.Endpoints{}, err
	}
	rt, err := docker.New(ctx, env.RunID, docker.Options{Log: progress})
	if err != nil {
		return harness.Endpoints{}, err
	}
	t.mu.Lock()
	t.rt = rt
	t.mu.Unlock()
	fail := func(err error) (harness.Endpoints, error) {
		t.Stop(context.WithoutCancel(ctx))
		return harness.Endpoints{}, err
	}
	nw, err := rt.Network(ctx)
	if err != nil {
		return fail(err)
	}
	// Folders live in the run's own directory, which the runtime removes
	// with the containers (and the watchdog, if we die).
	if t.root, err = rt.RunDir(); err != nil {
		return fail(err)
	}
	for i := range t.nodes {
		n := &t.nodes[i]
		n.ip = nw.HostIP(i)
		n.dir = filepath.Join(t.root, n.name)
	}
	for _, n := range t.nodes {
		if err := t.prepare(n); err != nil {
			return fail(err)
		}
	}

	start := time.Now()
	for _, n := range t.servers() {
		if _, err := rt.Run(ctx, t.serverSpec(n, zkTag)); err != nil {
			return fail(err)
		}
	}
	var eps harness.Endpoints
	for _, n := range t.adapters() {
		c, err := rt.Run(ctx, t.adapterSpec(n, tags[docker.ImageFenced]))
		if err != nil {
			return fail(err)
		}
		ep := harness.Endpoint{Node: n.name, URL: "http://" + c.Addr(adapterPort)}
		eps.Issuers = append(eps.Issuers, ep)
		eps.Resources = append(eps.Resources, ep)
	}
	for _, n := range t.servers() {
		if err := t.waitServing(ctx, n.name, 90*time.Second); err != nil {
			return fail(fmt.Errorf("server %s: %w", n.name, err))
		}
	}
	if err := harness.WaitHealthy(ctx, eps, 30*time.Second); err != nil {
		return fail(fmt.Errorf("adapters: %w", err))
	}
	t.logf("ensemble ready in %.1fs (%d servers, %d adapters)", time.Since(start).Seconds(), len(t.servers()), len(t.adapters()))
	why := map[string]string{}
	for _, n := range t.servers() {
		if err := rt.ClockReachable(ctx, n.name); err != nil {
			why[n.name] = err.Error()
			t.logf("clock faults cannot reach %s: %v", n.name, err)
		}
	}
	t.mu.Lock()
	t.clockWhy = why
	t.mu.Unlock()
	return eps, nil
}

// prepare writes a server's host folders: its data folder with its myid,
// and its zoo.cfg. Adapters keep nothing on the host.
func (t *Target) prepare(n node) error {
	if n.role != roleServer {
		return nil
	}
	for _, sub := range []string{"data", "conf"} {
		if err := os.MkdirAll(filepath.Join(n.dir, sub), 0o755); err != nil {
			return err
		}
	}
	if err := t.writeMyID(n); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(n.dir, "conf", "zoo.cfg"), []byte(t.zooCfg()), 0o644)
}

func (t *Target) writeMyID(n node) error {
	return os.WriteFile(filepath.Join(n.dir, "data", "myid"), []byte(strconv.Itoa(n.id)+"\n"), 0o644)
}

// zooCfg is the servers' configuration: ZooKeeper's defaults but for the
// tick (see TickTime), no admin web server, no per-address connection cap
// (every adapter opens a session per lock holder), and small preallocated
// log files. Transaction logs are fsynced before an answer (forceSync, the
// default).
func (t *Target) zooCfg() string {
	var b strings.Builder
	fmt.Fprintf(&b, "tickTime=%d\ninitLimit=10\nsyncLimit=5\n", TickTime)
	fmt.Fprintf(&b, "dataDir=%s\nclientPort=%d\nmaxClientCnxns=0\n", dataInContainer, clientPort)
	b.WriteString("admin.enableServer=false\n4lw.commands.whitelist=srvr,ruok,mntr\npreAllocSize=4096\n")
	for _, n := range t.servers() {
		fmt.Fprintf(&b, "server.%d=%s:%d:%d\n", n.id, n.ip, quorumPort, electionPort)
	}
	return b.String()
}

// jvmArgs keep the JVM small and quick to start on two cores: a 128 MB
// heap, the serial collector, the C1 compiler only, no perf-data file.
var jvmArgs = []string{
	"-Xms32m", "-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:-UsePerfData",
	"-Djava.net.preferIPv4Stack=true",
	// Values up to the Fencing API's 1 MiB, plus the mark, fit in a znode.
	"-Djute.maxbuffer=4194304",
	"-Dorg.slf4j.simpleLogger.showDateTime=true",
	"-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
}

func (t *Target) serverSpec(n node, image string) docker.ContainerSpec {
	cmd := append([]string{Java}, jvmArgs...)
	cmd = append(cmd, "-cp", LibDir+"/*", "org.apache.zookeeper.server.quorum.QuorumPeerMain", confInContainer+"/zoo.cfg")
	return docker.ContainerSpec{
		Node:  n.name,
		Image: image,
		IP:    n.ip,
		Cmd:   cmd,
		User:  docker.HostUser(),
		Ports: []int{clientPort},
		Binds: []docker.Bind{
			{Host: filepath.Join(n.dir, "data"), Container: dataInContainer},
			{Host: filepath.Join(n.dir, "conf"), Container: confInContainer, ReadOnly: true},
		},
		// The JVM reads the wall clock through libc: the preload library
		// shifts it from the first instruction (the runtime's vDSO patch
		// reaches it too); session expiry runs on the monotonic clock.
		ClockPreload: true,
	}
}

func (t *Target) serverList() string {
	var parts []string
	for _, n := range t.servers() {
		parts = append(parts, n.ip+":"+strconv.Itoa(clientPort))
	}
	return strings.Join(parts, ",")
}

func (t *Target) adapterSpec(n node, image string) docker.ContainerSpec {
	return docker.ContainerSpec{
		Node:  n.name,
		Image: image,
		IP:    n.ip,
		Cmd: []string{"/usr/local/bin/fenced",
			"--addr", "0.0.0.0:" + strconv.Itoa(adapterPort),
			"--backend", "zookeeper",
			"--zk-servers", t.serverList(),
		},
		User:  docker.HostUser(),
		Ports: []int{adapterPort},
	}
}

func (t *Target) servers() []node  { return t.byRole(roleServer) }
func (t *Target) adapters() []node { return t.byRole(roleAdapter) }

func (t *Target) byRole(role string) []node {
	var out []node
	for _, n := range t.nodes {
		if n.role == role {
			out = append(out, n)
		}
	}
	return out
}

func (t *Target) node(name string) (node, error) {
	for _, n := range t.nodes {
		if n.name == name {
			return n, nil
		}
	}
	return node{}, fmt.Errorf("zookeeper target has no node %q", name)
}

// running returns the runtime, or an error once the target is stopped (a
// nemesis's final heal may come after Stop).
func (t *Target) running() (*docker.Runtime, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.rt == nil {
		return nil, errors.New("zookeeper target is not running")
	}
	return t.rt, nil
}

// ServerAddr is a server's client port as the host reaches it (published on
// 127.0.0.1).
func (t *Target) ServerAddr(name string) (string, error) {
	rt, err := t.running()
	if err != nil {
		return "", err
	}
	c, err := rt.Container(name)
	if err != nil {
		return "", err
	}
	return c.Addr(clientPort), nil
}

// fourLetter sends a four-letter command to a server and returns its answer.
func (t *Target) fourLetter(ctx context.Context, name, cmd string) (string, error) {
	addr, err := t.ServerAddr(name)
	if err != nil {
		return "", err
	}
	d := net.Dialer{Timeout: time.Second}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second))
	if _, err := io.WriteString(c, cmd); err != nil {
		return "", err
	}
	b, err := io.ReadAll(bufio.NewReader(c))
	if err != nil && len(b) == 0 {
		return "", err
	}
	return string(b), nil
}

// mode is a server's role in the ensemble ("leader", "follower"), or an
// error while it is not serving (not in a quorum, starting, frozen).
func (t *Target) mode(ctx context.Context, name string) (string, error) {
	out, err := t.fourLetter(ctx, name, "srvr")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(out, "\n") {
		if m, ok := strings.CutPrefix(line, "Mode: "); ok {
			return strings.TrimSpace(m), nil
		}
	}
	return "", fmt.Errorf("not serving: %q", strings.TrimSpace(out))
}

// waitServing polls a server until it serves requests.
func (t *Target) waitServing(ctx context.Context, name string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		if _, last = t.mode(ctx, name); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("not serving after %s: %v", timeout, last)
}

// Stop saves every node's log into env.Dir/logs, then removes the
// containers, the network and the run directory (idempotent).
func (t *Target) Stop(ctx context.Context) error {
	t.mu.Lock()
	rt := t.rt
	t.rt = nil
	t.mu.Unlock()
	if rt == nil {
		return nil
	}
	var errs []error
	if t.env.Dir != "" {
		if err := rt.SaveLogs(ctx, filepath.Join(t.env.Dir, "logs")); err != nil {
			errs = append(errs, fmt.Errorf("saving node logs: %w", err))
		}
	}
	if err := rt.Close(ctx); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Nodes lists the servers and the adapters.
func (t *Target) Nodes() []nemesis.Node {
	out := make([]nemesis.Node, 0, len(t.nodes))
	for _, n := range t.nodes {
		out = append(out, nemesis.Node{Name: n.name, Role: n.role, Stateless: n.role == roleAdapter})
	}
	return out
}

// Leader names the server that reports itself leader. Servers that are
// frozen or cut off do not answer within the short timeout.
func (t *Target) Leader(ctx context.Context) (string, error) {
	var lastErr error
	for _, n := range t.servers() {
		m, err := t.mode(ctx, n.name)
		if err != nil {
			lastErr = err
			continue
		}
		if m == "leader" {
			return n.name, nil
		}
	}
	return "", fmt.Errorf("no zookeeper server reports itself leader (last error: %v)", lastErr)
}

// PauseNode freezes a server or an adapter (freezer cgroup: every thread).
func (t *Target) PauseNode(ctx context.Context, name string) error {
	rt, err := t.running()
	if err != nil {
		return err
	}
	if _, err := t.node(name); err != nil {
		return err
	}
	return rt.Pause(ctx, name)
}

// ResumeNode thaws it; a node no longer paused (a restart in between thaws
// it) needs nothing.
func (t *Target) ResumeNode(ctx context.Context, name string) error {
	rt, err := t.running()
	if err != nil {
		return err
	}
	if _, err := t.node(name); err != nil {
		return err
	}
	if st, err := rt.State(ctx, name); err == nil && !st.Paused {
		return nil
	}
	return rt.Unpause(ctx, name)
}

// KillNode sends SIGKILL: a server gets no chance to flush and must rely on
// its fsynced transaction log; an adapter's lock sessions expire.
func (t *Target) KillNode(ctx context.Context, name string) error {
	rt, err := t.running()
	if err != nil {
		return err
	}
	if _, err := t.node(name); err != nil {
		return err
	}
	return rt.Kill(ctx, name)
}

// StartNode starts a killed node again with its data. With wipe, a server
// comes back with an empty data folder but its myid, as after a disk
// replacement: it rejoins with nothing and syncs from the leader.
func (t *Target) StartNode(ctx context.Context, name string, wipe bool) error {
	n, err := t.node(name)
	if err != nil {
		return err
	}
	rt, err := t.running()
	if err != nil {
		return err
	}
	if wipe && n.role == roleServer {
		data := filepath.Join(n.dir, "data")
		if err := os.RemoveAll(data); err != nil {
			return fmt.Errorf("wiping %s: %w", name, err)
		}
		if err := os.MkdirAll(data, 0o755); err != nil {
			return err
		}
		if err := t.writeMyID(n); err != nil {
			return err
		}
	}
	return rt.Start(ctx, name)
}

// Partition cuts every node of a group off from the nodes of every other
// group, with iptables rules in each node's own network namespace; nodes in
// no group keep full connectivity. The runtime re-applies the rules when a
// node restarts.
func (t *Target) Partition(ctx context.Context, groups [][]string) error {
	rt, err := t.running()
	if err != nil {
		return err
	}
	if err := rt.HealAll(ctx); err != nil {
		return err
	}
	group := map[string]int{}
	for gi, g := range groups {
		for _, name := range g {
			if _, err := t.node(name); err != nil {
				return err
			}
			group[name] = gi
		}
	}
	for name, gi := range group {
		var peers []string
		for other, gj := range group {
			if gj != gi {
				o, _ := t.node(other)
				peers = append(peers, o.ip)
			}
		}
		if err := rt.Partition(ctx, name, peers); err != nil {
			return err
		}
	}
	return nil
}

// HealPartition removes every rule Partition made.
func (t *Target) HealPartition(ctx context.Context) error {
	rt, err := t.running()
	if err != nil {
		return err
	}
	return rt.HealAll(ctx)
}

// ClockNodes are the servers whose clocks this machine can move: the JVM
// reads the wall clock through libc, where the preload library (and the
// runtime's vDSO patch) shift it. ZooKeeper stamps znodes (mtime) with the
// leader's wall clock but expires sessions on the monotonic clock, so a
// step must change nothing that fencing relies on.
func (t *Target) ClockNodes() []string {
	var out []string
	for _, n := range t.servers() {
		if t.clockReason(n.name) == "" {
			out = append(out, n.name)
		}
	}
	return out
}

// ClockUnreachable implements nemesis.ClockExplainer.
func (t *Target) ClockUnreachable() map[string]string {
	out := map[string]string{}
	for _, n := range t.nodes {
		if why := t.clockReason(n.name); why != "" {
			out[n.name] = why
		}
	}
	return out
}

func (t *Target) clockReason(name string) string {
	n, err := t.node(name)
	if err != nil {
		return err.Error()
	}
	if n.role == roleAdapter {
		return "the zookeeper adapter reads no clock: sessions expire on the ensemble's monotonic clocks"
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.clockWhy == nil {
		return "the ensemble is not running"
	}
	return t.clockWhy[name]
}

// SetClockOffset moves a server's wall clock by offset (0 resets it); a
// restarted server gets the offset in force.
func (t *Target) SetClockOffset(ctx context.Context, name string, offset time.Duration) error {
	n, err := t.node(name)
	if err != nil {
		return err
	}
	if n.role != roleServer {
		return fmt.Errorf("%s: %s", name, t.clockReason(name))
	}
	rt, err := t.running()
	if err != nil {
		return err
	}
	return rt.SetClockOffset(ctx, name, offset)
}

// PartitionNodes implements nemesis.Partitioner: every server and adapter.
func (t *Target) PartitionNodes() []string {
	var out []string
	for _, n := range t.nodes {
		out = append(out, n.name)
	}
	return out
}
