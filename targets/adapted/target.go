// Package adapted is the shape of a container target built around one
// stateful server that keeps all fencing state (a database) behind
// stateless fenced adapters that speak the Fencing API to the harness: the
// server's container with its data folder on the host (kept across kill -9,
// removed with the run), its clock skewed through the LD_PRELOAD library,
// the adapters' containers, and the nemesis capabilities (pause, restart,
// partition, clock) over both. The postgres and mysql targets are this shape
// with their own server; each keeps every check inside its server.
package adapted

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/fencing"
	"github.com/fencecheck/fencecheck/harness"
	"github.com/fencecheck/fencecheck/harness/docker"
	"github.com/fencecheck/fencecheck/nemesis"
	"github.com/fencecheck/fencecheck/nemesis/timewarp"
	"github.com/fencecheck/fencecheck/targets/redis"
)

// Paths inside the containers.
const (
	// DataDir is where the server's host data folder is mounted.
	DataDir = "/data"
	// clockDir is where each node's host clock folder is mounted; the offset
	// file inside is replaced by rename, which is why the folder is mounted
	// and not the file.
	clockDir  = "/fencecheck/clock"
	clockFile = clockDir + "/offset"
	// AdapterPort is the adapters' Fencing API port.
	AdapterPort = 7000
	// ServerUser is the account the server runs as (databases refuse to run
	// as root); ServerUID is its uid when the harness runs as root (otherwise
	// the harness's own uid, so that it can remove what the server wrote).
	ServerUser = "fencecheck"
	ServerUID  = 999
)

// Server is the stateful server's container.
type Server struct {
	// Node and Role name it, e.g. "postgres-1" and "postgres".
	Node, Role string
	// Port is the port it serves its clients (the adapters) on.
	Port int
	// Image builds (or finds) its image and returns the tag.
	Image docker.EnsureFunc
	// Cmd is its command line; it runs as ServerUser, with its data folder
	// at DataDir (empty on first start) and /etc/passwd naming its uid.
	Cmd []string
	Env []string
	// Skew preloads redis.SkewLibrary (which the image must carry) so that
	// the clock nemesis moves the server's wall clock.
	Skew bool
	// Ready probes the server once through its published address on
	// 127.0.0.1; Start and StartNode poll it until it succeeds.
	Ready func(ctx context.Context, addr string) error
}

// Options configure New.
type Options struct {
	// Name and Semantics are the target's.
	Name      string
	Semantics checkers.Semantics
	Server    Server
	// AdapterArgs are fenced's backend arguments, given the server's
	// host:port on the run network.
	AdapterArgs func(serverAddr string) []string
	// Adapters is the number of adapter containers (default 2).
	Adapters int
	// ReadyTimeout bounds how long Start and StartNode wait for nodes
	// (default 90 s: a first start initialises the server's data folder).
	ReadyTimeout time.Duration
	_            struct{}
}

// Target is the server plus adapters. It implements harness.Target and the
// nemesis capabilities Cluster, Pauser, Restarter, Partitioner and
// ClockSkewer.
type Target struct {
	opts Options

	mu       sync.Mutex
	env      harness.Env
	rt       *docker.Runtime
	nodes    []nemesis.Node
	ips      map[string]string // node -> IP on the run network
	dirs     map[string]string // node -> host folder (clock/, data/, etc/) in the run directory
	adapters []string
	stopped  bool
}

var (
	_ harness.Target      = (*Target)(nil)
	_ nemesis.Cluster     = (*Target)(nil)
	_ nemesis.Pauser      = (*Target)(nil)
	_ nemesis.Restarter   = (*Target)(nil)
	_ nemesis.Partitioner = (*Target)(nil)
	_ nemesis.ClockSkewer = (*Target)(nil)
)

// New returns the target; nothing runs until Start.
func New(opts Options) *Target {
	if opts.Adapters <= 0 {
		opts.Adapters = 2
	}
	if opts.ReadyTimeout <= 0 {
		opts.ReadyTimeout = 90 * time.Second
	}
	return &Target{opts: opts}
}

// Name implements harness.Target.
func (t *Target) Name() string { return t.opts.Name }

// Semantics implements harness.Target.
func (t *Target) Semantics() checkers.Semantics { return t.opts.Semantics }

// Env is the run environment Start was given (the zero Env before).
func (t *Target) Env() harness.Env {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.env
}

// Start implements harness.Target: it builds (or finds) the images, starts
// the server, waits until it answers, starts the adapters and waits until
// every adapter is healthy. A failed start stops what it started.
func (t *Target) Start(ctx context.Context, env harness.Env) (harness.Endpoints, error) {
	if env.Log == nil {
		env.Log = io.Discard
	}
	dir, err := filepath.Abs(env.Dir)
	if err != nil {
		return harness.Endpoints{}, err
	}
	env.Dir = dir
	serverTag, err := t.opts.Server.Image(ctx, env.Log)
	if err != nil {
		return harness.Endpoints{}, err
	}
	tags, err := docker.EnsureImages(ctx, env.Log, docker.ImageFenced)
	if err != nil {
		return harness.Endpoints{}, err
	}
	fail := func(err error) (harness.Endpoints, error) {
		t.Stop(context.WithoutCancel(ctx))
		return harness.Endpoints{}, err
	}
	begin := time.Now()
	if err := t.startServer(ctx, env, serverTag); err != nil {
		return fail(err)
	}
	eps, err := t.startAdapters(ctx, tags[docker.ImageFenced])
	if err != nil {
		return fail(err)
	}
	fmt.Fprintf(env.Log, "%s: ready in %.1fs (%s + %d adapters)\n", t.Name(), time.Since(begin).Seconds(), t.opts.Server.Node, len(t.adapters))
	return eps, nil
}

func (t *Target) startServer(ctx context.Context, env harness.Env, image string) error {
	rt, err := docker.New(ctx, env.RunID, docker.Options{Log: env.Log})
	if err != nil {
		return err
	}
	t.mu.Lock()
	t.env, t.rt, t.stopped = env, rt, false
	t.mu.Unlock()
	nw, err := rt.Network(ctx)
	if err != nil {
		return err
	}
	// Data, clock and account files live in the runtime's run directory:
	// a host folder (so the server's files outlive kill -9) that the
	// runtime removes with the containers, and its watchdog if we die.
	root, err := rt.RunDir()
	if err != nil {
		return err
	}
	srv := t.opts.Server
	t.mu.Lock()
	t.ips = map[string]string{srv.Node: nw.HostIP(0)}
	t.dirs = map[string]string{}
	t.nodes = []nemesis.Node{{Name: srv.Node, Role: srv.Role}}
	t.adapters = nil
	for i := 1; i <= t.opts.Adapters; i++ {
		name := "adapter-" + strconv.Itoa(i)
		t.ips[name] = nw.HostIP(i)
		t.nodes = append(t.nodes, nemesis.Node{Name: name, Role: "adapter", Stateless: true})
		t.adapters = append(t.adapters, name)
	}
	for _, n := range t.nodes {
		t.dirs[n.Name] = filepath.Join(root, n.Name)
	}
	t.mu.Unlock()

	for _, n := range t.nodes {
		if err := os.MkdirAll(t.clockDir(n.Name), 0o755); err != nil {
			return err
		}
		if err := redis.WriteClockOffset(t.clockFile(n.Name), 0); err != nil {
			return err
		}
	}
	user, err := t.prepareServerDirs()
	if err != nil {
		return err
	}
	env2 := append([]string{}, srv.Env...)
	if srv.Skew {
		env2 = append(env2, "LD_PRELOAD="+redis.SkewLibrary, redis.SkewFileEnv+"="+clockFile, redis.SkewRefreshEnv+"=5")
	}
	etc := filepath.Join(t.dirs[srv.Node], "etc")
	_, err = rt.Run(ctx, docker.ContainerSpec{
		Node:  srv.Node,
		Image: image,
		Cmd:   srv.Cmd,
		Env:   env2,
		User:  user,
		IP:    t.ips[srv.Node],
		Ports: []int{srv.Port},
		Binds: []docker.Bind{
			{Host: t.dataDir(), Container: DataDir},
			{Host: t.clockDir(srv.Node), Container: clockDir, ReadOnly: true},
			{Host: filepath.Join(etc, "passwd"), Container: "/etc/passwd", ReadOnly: true},
			{Host: filepath.Join(etc, "group"), Container: "/etc/group", ReadOnly: true},
		},
	})
	if err != nil {
		return fmt.Errorf("starting %s: %w", srv.Node, err)
	}
	return t.waitServer(ctx)
}

// prepareServerDirs makes the server's data folder (owned by the account it
// runs as) and the passwd and group files that name that account, and
// returns "uid:gid" for the container.
func (t *Target) prepareServerDirs() (string, error) {
	uid, gid := os.Getuid(), os.Getgid()
	if uid == 0 {
		uid, gid = ServerUID, ServerUID
	}
	if err := os.MkdirAll(t.dataDir(), 0o700); err != nil {
		return "", err
	}
	if os.Getuid() == 0 {
		if err := os.Chown(t.dataDir(), uid, gid); err != nil {
			return "", err
		}
	}
	etc := filepath.Join(t.dirs[t.opts.Server.Node], "etc")
	if err := os.MkdirAll(etc, 0o755); err != nil {
		return "", err
	}
	passwd := fmt.Sprintf("root:x:0:0:root:/:/bin/sh\n%s:x:%d:%d:%s:%s:/bin/sh\n", ServerUser, uid, gid, ServerUser, DataDir)
	group := fmt.Sprintf("root:x:0:\n%s:x:%d:\n", ServerUser, gid)
	if err := os.WriteFile(filepath.Join(etc, "passwd"), []byte(passwd), 0o644); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(etc, "group"), []byte(group), 0o644); err != nil {
		return "", err
	}
	return fmt.Sprintf("%d:%d", uid, gid), nil
}

func (t *Target) startAdapters(ctx context.Context, image string) (harness.Endpoints, error) {
	srv := t.opts.Server
	args := t.opts.AdapterArgs(t.ips[srv.Node] + ":" + strconv.Itoa(srv.Port))
	cmd := append([]string{"/usr/local/bin/fenced", "--addr", "0.0.0.0:" + strconv.Itoa(AdapterPort)}, args...)
	var eps harness.Endpoints
	for _, name := range t.adapters {
		c, err := t.rt.Run(ctx, docker.ContainerSpec{
			Node:  name,
			Image: image,
			Cmd:   cmd,
			// The adapters read their clock from the offset file; the SQL
			// stores read none (leases run on the database's clock).
			Env:   []string{fencing.ClockFileEnv + "=" + clockFile},
			User:  docker.HostUser(),
			IP:    t.ips[name],
			Ports: []int{AdapterPort},
			Binds: []docker.Bind{{Host: t.clockDir(name), Container: clockDir, ReadOnly: true}},
		})
		if err != nil {
			return harness.Endpoints{}, fmt.Errorf("starting %s: %w", name, err)
		}
		ep := harness.Endpoint{Node: name, URL: "http://" + c.Addr(AdapterPort)}
		eps.Issuers = append(eps.Issuers, ep)
		eps.Resources = append(eps.Resources, ep)
	}
	if err := harness.WaitHealthy(ctx, eps, t.opts.ReadyTimeout); err != nil {
		return harness.Endpoints{}, fmt.Errorf("%s: %w (see the node logs)", t.Name(), err)
	}
	return eps, nil
}

func (t *Target) clockDir(node string) string  { return filepath.Join(t.dirs[node], "clock") }
func (t *Target) clockFile(node string) string { return filepath.Join(t.clockDir(node), "offset") }
func (t *Target) dataDir() string              { return filepath.Join(t.dirs[t.opts.Server.Node], "data") }

// ServerAddr is the server's published address on 127.0.0.1, for checks
// from the host.
func (t *Target) ServerAddr() (string, error) {
	t.mu.Lock()
	rt := t.rt
	t.mu.Unlock()
	if rt == nil {
		return "", fmt.Errorf("%s target not started", t.Name())
	}
	c, err := rt.Container(t.opts.Server.Node)
	if err != nil {
		return "", err
	}
	return c.Addr(t.opts.Server.Port), nil
}

// waitServer polls the server's Ready probe until it succeeds or the ready
// timeout passes.
func (t *Target) waitServer(ctx context.Context) error {
	addr, err := t.ServerAddr()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, t.opts.ReadyTimeout)
	defer cancel()
	for {
		pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
		last := t.opts.Server.Ready(pctx, addr)
		pcancel()
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s did not answer within %s: %v", t.opts.Server.Node, t.opts.ReadyTimeout, last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Stop implements harness.Target: it saves node logs into env.Dir/logs and
// removes every container, the network and the run directory with the
// server's data (idempotent).
func (t *Target) Stop(ctx context.Context) error {
	t.mu.Lock()
	rt, env := t.rt, t.env
	if rt == nil || t.stopped {
		t.mu.Unlock()
		return nil
	}
	t.stopped = true
	t.mu.Unlock()
	logErr := rt.SaveLogs(ctx, filepath.Join(env.Dir, "logs"))
	return errors.Join(rt.Close(ctx), logErr)
}

// SaveLogs writes every node's log so far into dir (Stop does this into the
// run's own folder).
func (t *Target) SaveLogs(ctx context.Context, dir string) error {
	t.mu.Lock()
	rt := t.rt
	t.mu.Unlock()
	if rt == nil {
		return fmt.Errorf("%s target not started", t.Name())
	}
	return rt.SaveLogs(ctx, dir)
}

// CheckRunning returns an error naming every node whose container is not
// running, with its exit code.
func (t *Target) CheckRunning(ctx context.Context) error {
	var errs []error
	for _, n := range t.Nodes() {
		st, err := t.rt.State(ctx, n.Name)
		switch {
		case err != nil:
			errs = append(errs, err)
		case !st.Running:
			errs = append(errs, fmt.Errorf("%s is not running (status %s, exit code %d)", n.Name, st.Status, st.ExitCode))
		}
	}
	return errors.Join(errs...)
}

// Nodes implements nemesis.Cluster.
func (t *Target) Nodes() []nemesis.Node {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.nodes)
}

func (t *Target) known(node string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.rt == nil {
		return fmt.Errorf("%s target not started", t.opts.Name)
	}
	if _, ok := t.ips[node]; !ok {
		return fmt.Errorf("%s has no node %q", t.opts.Name, node)
	}
	return nil
}

// PauseNode implements nemesis.Pauser (the freezer cgroup: every thread).
func (t *Target) PauseNode(ctx context.Context, node string) error {
	if err := t.known(node); err != nil {
		return err
	}
	return t.rt.Pause(ctx, node)
}

// ResumeNode implements nemesis.Pauser. A node that is no longer paused (a
// restart in between thaws it) needs nothing, so the final heal never fails
// on it.
func (t *Target) ResumeNode(ctx context.Context, node string) error {
	if err := t.known(node); err != nil {
		return err
	}
	if st, err := t.rt.State(ctx, node); err == nil && !st.Paused {
		return nil
	}
	return t.rt.Unpause(ctx, node)
}

// KillNode implements nemesis.Restarter: SIGKILL to every process of the
// container at once, no chance to flush.
func (t *Target) KillNode(ctx context.Context, node string) error {
	if err := t.known(node); err != nil {
		return err
	}
	return t.rt.Kill(ctx, node)
}

// StartNode implements nemesis.Restarter. Wiping empties the server's data
// folder (adapters keep no state), so it starts as on first start. It
// returns once the node answers.
func (t *Target) StartNode(ctx context.Context, node string, wipe bool) error {
	if err := t.known(node); err != nil {
		return err
	}
	server := node == t.opts.Server.Node
	if wipe && server {
		entries, err := os.ReadDir(t.dataDir())
		if err != nil {
			return err
		}
		for _, e := range entries {
			if err := os.RemoveAll(filepath.Join(t.dataDir(), e.Name())); err != nil {
				return fmt.Errorf("wiping %s: %w", node, err)
			}
		}
	}
	if err := t.rt.Start(ctx, node); err != nil {
		return err
	}
	if server {
		return t.waitServer(ctx)
	}
	c, err := t.rt.Container(node)
	if err != nil {
		return err
	}
	return harness.WaitHealthy(ctx, harness.Endpoints{Issuers: []harness.Endpoint{
		{Node: node, URL: "http://" + c.Addr(AdapterPort)}}}, t.opts.ReadyTimeout)
}

// Partition implements nemesis.Partitioner: nodes in different groups cannot
// reach each other; nodes in no group keep full connectivity. The harness's
// clients reach adapters through published ports, which no rule touches.
func (t *Target) Partition(ctx context.Context, groups [][]string) error {
	group := map[string]int{}
	for i, g := range groups {
		for _, n := range g {
			if err := t.known(n); err != nil {
				return err
			}
			if j, dup := group[n]; dup && j != i {
				return fmt.Errorf("node %s is in two partition groups", n)
			}
			group[n] = i
		}
	}
	if err := t.rt.HealAll(ctx); err != nil {
		return err
	}
	for n, gi := range group {
		var peers []string
		for m, gj := range group {
			if gj != gi {
				peers = append(peers, t.ips[m])
			}
		}
		if len(peers) == 0 {
			continue
		}
		if err := t.rt.Partition(ctx, n, peers); err != nil {
			return err
		}
	}
	return nil
}

// HealPartition implements nemesis.Partitioner.
func (t *Target) HealPartition(ctx context.Context) error {
	t.mu.Lock()
	rt := t.rt
	t.mu.Unlock()
	if rt == nil {
		return nil
	}
	return rt.HealAll(ctx)
}

// ClockNodes implements nemesis.ClockSkewer: the server, whose wall clock
// decides when leases end (when it runs under the skew library). The
// adapters read no clock, so a step there would change nothing and would
// only take steps away from the server.
func (t *Target) ClockNodes() []string {
	if !t.opts.Server.Skew {
		return nil
	}
	return []string{t.opts.Server.Node}
}

// SetClockOffset implements nemesis.ClockSkewer. The node sees the new
// offset within a few milliseconds (the skew library's refresh interval).
func (t *Target) SetClockOffset(ctx context.Context, node string, offset time.Duration) error {
	if err := t.known(node); err != nil {
		return err
	}
	return timewarp.SetPreloadOffset(t.clockFile(node), offset)
}
