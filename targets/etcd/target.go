package etcd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/harness"
	"github.com/fencecheck/fencecheck/harness/docker"
	"github.com/fencecheck/fencecheck/nemesis"
	"github.com/fencecheck/fencecheck/nemesis/lazyfs"
)

// Ports inside the containers.
const (
	clientPort  = 2379
	peerPort    = 2380
	adapterPort = 7000
)

// Options configure the etcd target.
type Options struct {
	// Members is the number of etcd members (default 3).
	Members int
	// Adapters is the number of adapter replicas (default 2); clients are
	// spread over them.
	Adapters int
	// Mutex makes the adapters take locks through etcd's own client lock
	// (MutexStore, backend etcd-mutex): the target "etcd-mutex".
	Mutex bool
	// Log receives setup messages (default: the run's log).
	Log io.Writer
	_   struct{}
}

// Target is three etcd members and two adapters (the fenced server with the
// etcd backend) in containers on the run's own network. The adapters hold no
// fencing state, so any of them can serve any client.
type Target struct {
	opts Options

	mu       sync.Mutex
	rt       *docker.Runtime
	env      harness.Env
	tags     map[string]string
	nw       *docker.Network
	dataRoot string
	nodes    []node
	stopped  bool
	// clockWhy says, per node, why its clock cannot be moved from this
	// machine (found once the cluster is up, so that ClockNodes never
	// changes during a run: the final heal must reach every node).
	clockWhy map[string]string
}

// node is one container of the target.
type node struct {
	name string
	role string // "etcd" or "adapter"
	ip   string
	// dataDir (members) is bind-mounted at /data, under the runtime's
	// RunDir.
	dataDir string
	// disk is the lazyfs layer over dataDir (Env.DiskLayer), bind-mounted
	// instead of it; diskWhy says why there is none when one was asked for.
	disk    *lazyfs.Mount
	diskWhy string
}

// workDir is the host folder bind-mounted at /data.
func (n node) workDir() string {
	if n.disk != nil {
		return n.disk.Dir()
	}
	return n.dataDir
}

const (
	roleMember  = "etcd"
	roleAdapter = "adapter"
)

var (
	_ harness.Target      = (*Target)(nil)
	_ nemesis.Cluster     = (*Target)(nil)
	_ nemesis.Leaderer    = (*Target)(nil)
	_ nemesis.Pauser      = (*Target)(nil)
	_ nemesis.Restarter   = (*Target)(nil)
	_ nemesis.Partitioner = (*Target)(nil)
	_ nemesis.ClockSkewer = (*Target)(nil)
)

// New returns the etcd target; nothing runs until Start.
func New(opts Options) harness.Target {
	if opts.Members <= 0 {
		opts.Members = 3
	}
	if opts.Adapters <= 0 {
		opts.Adapters = 2
	}
	t := &Target{opts: opts}
	for i := 1; i <= opts.Members; i++ {
		t.nodes = append(t.nodes, node{name: fmt.Sprintf("etcd-%d", i), role: roleMember})
	}
	for i := 1; i <= opts.Adapters; i++ {
		t.nodes = append(t.nodes, node{name: fmt.Sprintf("adapter-%d", i), role: roleAdapter})
	}
	return t
}

// Name is "etcd", or "etcd-mutex" with Options.Mutex.
func (t *Target) Name() string {
	if t.opts.Mutex {
		return "etcd-mutex"
	}
	return "etcd"
}

func (t *Target) Semantics() checkers.Semantics { return Semantics }

func (t *Target) logf(format string, args ...any) {
	w := t.opts.Log
	if w == nil {
		w = t.env.Log
	}
	if w != nil {
		fmt.Fprintf(w, t.Name()+": "+format+"\n", args...)
	}
}

// Start builds the images if needed (the first run on a machine compiles
// etcd: about a minute), starts the members and the adapters, and returns
// once every member is healthy and every adapter answers GET /v1/health.
// A failed start stops what it started, saving the logs first.
func (t *Target) Start(ctx context.Context, env harness.Env) (harness.Endpoints, error) {
	t.env = env
	progress := t.opts.Log
	if progress == nil {
		progress = env.Log
	}
	tags, err := docker.EnsureImages(ctx, progress, docker.ImageEtcd, docker.ImageFenced)
	if err != nil {
		return harness.Endpoints{}, err
	}
	t.tags = tags
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
	if t.nw, err = rt.Network(ctx); err != nil {
		return fail(err)
	}
	// Data and clock folders live in the run's own directory, which the
	// runtime removes with the containers (and the watchdog, if we die).
	if t.dataRoot, err = rt.RunDir(); err != nil {
		return fail(err)
	}
	for i := range t.nodes {
		n := &t.nodes[i]
		n.ip = t.nw.HostIP(i)
		if n.role == roleMember {
			n.dataDir = filepath.Join(t.dataRoot, n.name)
			if err := os.MkdirAll(n.dataDir, 0o755); err != nil {
				return fail(err)
			}
		}
	}
	if env.DiskLayer {
		if err := t.mountDisks(rt); err != nil {
			return fail(err)
		}
	}

	// Everything starts at once: the adapters connect to etcd lazily and
	// report healthy only once a quorum answers them.
	start := time.Now()
	for _, n := range t.members() {
		if _, err := rt.Run(ctx, t.memberSpec(n, "new", t.initialCluster(), nil)); err != nil {
			return fail(err)
		}
	}
	var eps harness.Endpoints
	for _, n := range t.adapters() {
		c, err := rt.Run(ctx, t.adapterSpec(n))
		if err != nil {
			return fail(err)
		}
		ep := harness.Endpoint{Node: n.name, URL: "http://" + c.Addr(adapterPort)}
		eps.Issuers = append(eps.Issuers, ep)
		eps.Resources = append(eps.Resources, ep)
	}
	for _, n := range t.members() {
		if err := waitEtcdHealthy(ctx, t.memberURL(n.name), 60*time.Second); err != nil {
			return fail(fmt.Errorf("member %s: %w", n.name, err))
		}
	}
	if err := harness.WaitHealthy(ctx, eps, 30*time.Second); err != nil {
		return fail(fmt.Errorf("adapters: %w", err))
	}
	t.logf("cluster ready in %.1fs (%d members, %d adapters)", time.Since(start).Seconds(), len(t.members()), len(t.adapters()))
	why := map[string]string{}
	for _, n := range t.nodes {
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

func (t *Target) members() []node  { return t.byRole(roleMember) }
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
	return node{}, fmt.Errorf("etcd target has no node %q", name)
}

func peerURL(n node) string   { return "http://" + n.ip + ":" + strconv.Itoa(peerPort) }
func clientURL(n node) string { return "http://" + n.ip + ":" + strconv.Itoa(clientPort) }

func (t *Target) initialCluster() string {
	var parts []string
	for _, n := range t.members() {
		parts = append(parts, n.name+"="+peerURL(n))
	}
	return strings.Join(parts, ",")
}

// memberSpec is an etcd member's container. Timings are etcd's defaults
// (100 ms heartbeat, 1 s election timeout): the faults should meet etcd as
// users run it.
func (t *Target) memberSpec(n node, state, cluster string, hostPorts map[int]int) docker.ContainerSpec {
	return docker.ContainerSpec{
		Node:  n.name,
		Image: t.tags[docker.ImageEtcd],
		IP:    n.ip,
		Cmd: []string{"/usr/local/bin/etcd",
			"--name", n.name,
			"--data-dir", "/data",
			"--listen-client-urls", "http://0.0.0.0:" + strconv.Itoa(clientPort),
			"--advertise-client-urls", clientURL(n),
			"--listen-peer-urls", "http://0.0.0.0:" + strconv.Itoa(peerPort),
			"--initial-advertise-peer-urls", peerURL(n),
			"--initial-cluster", cluster,
			"--initial-cluster-state", state,
			"--initial-cluster-token", "fencecheck-" + t.env.RunID,
		},
		User:      docker.HostUser(),
		Ports:     []int{clientPort},
		HostPorts: hostPorts,
		Binds:     []docker.Bind{{Host: n.workDir(), Container: "/data"}},
	}
}

func (t *Target) adapterSpec(n node) docker.ContainerSpec {
	var endpoints []string
	for _, m := range t.members() {
		endpoints = append(endpoints, clientURL(m))
	}
	return docker.ContainerSpec{
		Node:  n.name,
		Image: t.tags[docker.ImageFenced],
		IP:    n.ip,
		Cmd: []string{"/usr/local/bin/fenced",
			"--addr", "0.0.0.0:" + strconv.Itoa(adapterPort),
			"--backend", t.backend(),
			"--etcd-endpoints", strings.Join(endpoints, ","),
		},
		User:  docker.HostUser(),
		Ports: []int{adapterPort},
	}
}

// backend is the adapters' fenced backend.
func (t *Target) backend() string {
	if t.opts.Mutex {
		return "etcd-mutex"
	}
	return "etcd"
}

// memberURL is a member's client URL as the host reaches it: through its
// published port on 127.0.0.1, never the container IP.
func (t *Target) memberURL(name string) string {
	rt, err := t.running()
	if err != nil {
		return ""
	}
	c, err := rt.Container(name)
	if err != nil {
		return ""
	}
	return "http://" + c.Addr(clientPort)
}

// running returns the runtime, or an error once the target is stopped (a
// nemesis's final heal may come after Stop).
func (t *Target) running() (*docker.Runtime, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.rt == nil {
		return nil, errors.New("etcd target is not running")
	}
	return t.rt, nil
}

// Stop saves every node's log into env.Dir/logs, then removes the
// containers, the network and the run directory with the members' data
// (idempotent).
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
	for _, n := range t.members() {
		if n.disk != nil {
			// The container's copy of the mount holds the layer up.
			rt.Kill(ctx, n.name)
			errs = append(errs, n.disk.Unmount())
		}
	}
	if err := rt.Close(ctx); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// mountDisks puts every member's data folder on the lazyfs layer, for the
// power-loss nemesis, where the layer reaches the containers.
func (t *Target) mountDisks(rt *docker.Runtime) error {
	why := ""
	if err := lazyfs.Supported(); err != nil {
		why = err.Error()
	} else if err := rt.HostBinds(); err != nil {
		why = err.Error()
	}
	for i := range t.nodes {
		n := &t.nodes[i]
		if n.role != roleMember {
			continue
		}
		if why != "" {
			n.diskWhy = why
			continue
		}
		m, err := lazyfs.New(n.dataDir, n.dataDir+".mnt", lazyfs.Options{})
		if err != nil {
			return fmt.Errorf("%s: %w", n.name, err)
		}
		n.disk = m
	}
	return nil
}

// PowerNodes implements nemesis.PowerCutter: the members on the layer.
func (t *Target) PowerNodes() []string {
	var out []string
	for _, n := range t.members() {
		if n.disk != nil {
			out = append(out, n.name)
		}
	}
	return out
}

// PowerUnreachable implements nemesis.PowerExplainer (adapters hold no
// data, so they are not listed).
func (t *Target) PowerUnreachable() map[string]string {
	out := map[string]string{}
	for _, n := range t.members() {
		switch {
		case n.disk != nil:
		case n.diskWhy != "":
			out[n.name] = n.diskWhy
		default:
			out[n.name] = "its data is not on the lazyfs layer (the run did not name power-loss)"
		}
	}
	return out
}

// CutPower implements nemesis.PowerCutter: the member is killed, then what
// it never fsynced is dropped.
func (t *Target) CutPower(ctx context.Context, name string) (lazyfs.Loss, error) {
	n, err := t.node(name)
	if err != nil {
		return lazyfs.Loss{}, err
	}
	if n.disk == nil {
		return lazyfs.Loss{}, fmt.Errorf("%s's data is not on the lazyfs layer", name)
	}
	if err := t.KillNode(ctx, name); err != nil {
		return lazyfs.Loss{}, err
	}
	return n.disk.PowerLoss()
}

// Nodes lists the members and the adapters.
func (t *Target) Nodes() []nemesis.Node {
	out := make([]nemesis.Node, 0, len(t.nodes))
	for _, n := range t.nodes {
		out = append(out, nemesis.Node{Name: n.name, Role: n.role, Stateless: n.role == roleAdapter})
	}
	return out
}

// Leader asks every reachable member for its status and names the leader
// most of them report. Members that are paused or cut off simply do not
// answer within the short timeout.
func (t *Target) Leader(ctx context.Context) (string, error) {
	names := map[uint64]string{}
	votes := map[uint64]int{}
	var lastErr error
	for _, n := range t.members() {
		id, leader, err := t.memberStatus(ctx, n.name)
		if err != nil {
			lastErr = err
			continue
		}
		names[id] = n.name
		if leader != 0 {
			votes[leader]++
		}
	}
	best, bestVotes := uint64(0), 0
	for id, v := range votes {
		if v > bestVotes {
			best, bestVotes = id, v
		}
	}
	if bestVotes == 0 {
		return "", fmt.Errorf("no etcd member reports a leader (last error: %v)", lastErr)
	}
	name, ok := names[best]
	if !ok {
		return "", fmt.Errorf("the reported leader %x did not answer itself", best)
	}
	return name, nil
}

// memberStatus returns a member's own id and the leader it follows.
func (t *Target) memberStatus(ctx context.Context, name string) (id, leader uint64, err error) {
	url := t.memberURL(name)
	if url == "" {
		return 0, 0, fmt.Errorf("member %s has no container", name)
	}
	cli, err := hostClient([]string{url})
	if err != nil {
		return 0, 0, err
	}
	defer cli.Close()
	sctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	st, err := cli.Status(sctx, url)
	if err != nil {
		return 0, 0, fmt.Errorf("status of %s: %w", name, err)
	}
	return st.Header.MemberId, st.Leader, nil
}

// hostClient is an etcd client for the harness itself, talking to members
// through their published ports. It logs nothing: the harness's output is
// for the run, and failures come back as errors.
func hostClient(endpoints []string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: time.Second, Logger: zap.NewNop()})
}

// retryFor calls fn (each call bounded to 5 s) until it succeeds or limit
// passes, and returns its last error.
func retryFor(ctx context.Context, limit time.Duration, fn func(context.Context) error) error {
	deadline := time.Now().Add(limit)
	for {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := fn(cctx)
		cancel()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// PauseNode freezes a member or an adapter (freezer cgroup).
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

// ResumeNode thaws it.
func (t *Target) ResumeNode(ctx context.Context, name string) error {
	rt, err := t.running()
	if err != nil {
		return err
	}
	if _, err := t.node(name); err != nil {
		return err
	}
	return rt.Unpause(ctx, name)
}

// KillNode sends SIGKILL: etcd gets no chance to flush, and must rely on
// its fsynced WAL.
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

// StartNode starts a killed node again with its data. With wipe, a member
// comes back with an empty data dir the way an operator replaces a disk:
// removed from the cluster and added again as a new member (a member that
// simply lost its raft log would crash the cluster's raft invariants, which
// is not a fault etcd claims to survive). Adapters hold no data.
func (t *Target) StartNode(ctx context.Context, name string, wipe bool) error {
	n, err := t.node(name)
	if err != nil {
		return err
	}
	rt, err := t.running()
	if err != nil {
		return err
	}
	if wipe && n.role == roleMember {
		return t.replaceMember(ctx, rt, n)
	}
	return rt.Start(ctx, name)
}

func (t *Target) replaceMember(ctx context.Context, rt *docker.Runtime, n node) error {
	var others []string
	for _, m := range t.members() {
		if m.name != n.name {
			others = append(others, t.memberURL(m.name))
		}
	}
	cli, err := hostClient(others)
	if err != nil {
		return fmt.Errorf("replacing %s: %w", n.name, err)
	}
	defer cli.Close()
	// etcd refuses membership changes while it cannot prove quorum is safe
	// ("unhealthy cluster": e.g. a peer reconnected less than 5 s ago), so
	// both steps are retried for a while. A retried step whose first reply
	// was lost finds its work done: that counts as success.
	err = retryFor(ctx, 30*time.Second, func(ctx context.Context) error {
		list, err := cli.MemberList(ctx)
		if err != nil {
			return err
		}
		for _, m := range list.Members {
			if m.Name == n.name || (len(m.PeerURLs) == 1 && m.PeerURLs[0] == peerURL(n)) {
				if _, err := cli.MemberRemove(ctx, m.ID); err != nil && !errors.Is(err, rpctypes.ErrMemberNotFound) {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("replacing %s: member remove: %w", n.name, err)
	}
	err = retryFor(ctx, 30*time.Second, func(ctx context.Context) error {
		_, err := cli.MemberAdd(ctx, []string{peerURL(n)})
		if errors.Is(err, rpctypes.ErrPeerURLExist) {
			return nil
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("replacing %s: member add: %w", n.name, err)
	}
	if n.disk != nil {
		if err := wipeLayer(n.disk.Dir()); err != nil {
			return err
		}
	} else {
		if err := os.RemoveAll(n.dataDir); err != nil {
			return err
		}
		if err := os.MkdirAll(n.dataDir, 0o755); err != nil {
			return err
		}
	}
	old, err := rt.Container(n.name)
	if err != nil {
		return err
	}
	hostPorts := old.HostPorts
	if t.env.Dir != "" {
		// The replacement starts a fresh log; keep the old member's.
		path := filepath.Join(t.env.Dir, "logs", fmt.Sprintf("%s.before-wipe-%d.log", n.name, time.Now().UnixMilli()))
		if err := rt.SaveLog(ctx, n.name, path); err != nil {
			t.logf("saving the log of %s before its wipe: %v", n.name, err)
		}
	}
	if err := rt.Remove(ctx, n.name); err != nil {
		return err
	}
	_, err = rt.Run(ctx, t.memberSpec(n, "existing", t.initialCluster(), hostPorts))
	return err
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

// ClockNodes are every member and adapter whose processes this machine can
// reach: the runtime moves the unmodified programs' own clocks (package
// timewarp patches their vDSO). etcd's leases run on the monotonic clock
// and the etcd backend reads no adapter clock, so a correct cluster must
// shrug a step off, which is what the nemesis checks.
func (t *Target) ClockNodes() []string {
	var out []string
	for _, n := range t.nodes {
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
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.clockWhy == nil {
		return "the cluster is not running"
	}
	return t.clockWhy[name]
}

// SetClockOffset moves a member's or an adapter's wall clock by offset (0
// resets it); a restarted node gets the offset in force.
func (t *Target) SetClockOffset(ctx context.Context, name string, offset time.Duration) error {
	if _, err := t.node(name); err != nil {
		return err
	}
	rt, err := t.running()
	if err != nil {
		return err
	}
	return rt.SetClockOffset(ctx, name, offset)
}

// wipeLayer empties a folder on the lazyfs layer, durably (a wipe is meant
// to last).
func wipeLayer(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// PartitionNodes implements nemesis.Partitioner: every member and adapter.
func (t *Target) PartitionNodes() []string {
	var out []string
	for _, n := range t.nodes {
		out = append(out, n.name)
	}
	return out
}
