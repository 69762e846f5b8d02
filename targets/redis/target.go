package redis

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

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/fencing"
	"github.com/fencecheck/fencecheck/harness"
	"github.com/fencecheck/fencecheck/harness/docker"
	"github.com/fencecheck/fencecheck/nemesis"
	"github.com/fencecheck/fencecheck/nemesis/lazyfs"
	"github.com/fencecheck/fencecheck/nemesis/timewarp"
)

// Node names and ports of a Redis target.
const (
	RedisNode   = "redis-1"
	RedisPort   = 6379
	AdapterPort = 7000
	// clockDirInContainer is where each node's own host clock directory is
	// bind-mounted; the offset file inside is rewritten by rename, which is
	// why the directory is mounted and not the file.
	clockDirInContainer  = "/fencecheck/clock"
	clockFileInContainer = clockDirInContainer + "/offset"
	dataDirInContainer   = "/data"
)

// TargetOptions configure NewTarget.
type TargetOptions struct {
	// Volatile runs Redis with no persistence at all (save "", appendonly
	// no): after a restart the lock counters start again from 1.
	Volatile bool
	// Everysec runs Redis with its default AOF policy, appendfsync
	// everysec: a write is acknowledged before it is fsynced, and the AOF is
	// fsynced about once a second. A kill -9 keeps what was written (the
	// page cache survives); a power loss drops up to a second of it.
	Everysec bool
	// Adapters is the number of fenced adapter containers (default 2).
	Adapters int
	// SkewAdapters lists the adapters among ClockNodes too. Off by default:
	// the Redis store reads no adapter clock (leases are Redis TTLs), so a
	// clock step on an adapter changes nothing, and a clock nemesis picking
	// nodes at random would spend most of its steps there. SetClockOffset
	// accepts adapters either way.
	SkewAdapters bool
	// ReadyTimeout bounds how long Start and StartNode wait for nodes
	// (default 60 s).
	ReadyTimeout time.Duration
	_            struct{}
}

// Target is Redis in a container plus adapters that speak the Fencing API
// with the Redis store. It implements harness.Target and the nemesis
// capabilities Cluster, Pauser, Restarter, Partitioner and ClockSkewer.
type Target struct {
	opts TargetOptions

	mu       sync.Mutex
	env      harness.Env
	rt       *docker.Runtime
	nodes    []nemesis.Node
	ips      map[string]string // node -> IP on the run network
	dirs     map[string]string // node -> host folder (clock/, data/) in the run directory
	adapters []string
	stopped  bool
	// disk is Redis's data folder's lazyfs layer (Env.DiskLayer), or nil
	// with noDisk saying why.
	disk   *lazyfs.Mount
	noDisk string
}

var (
	_ harness.Target      = (*Target)(nil)
	_ nemesis.Cluster     = (*Target)(nil)
	_ nemesis.Pauser      = (*Target)(nil)
	_ nemesis.Restarter   = (*Target)(nil)
	_ nemesis.Partitioner = (*Target)(nil)
	_ nemesis.ClockSkewer = (*Target)(nil)
	_ nemesis.PowerCutter = (*Target)(nil)
)

// NewTarget returns a Redis target; nothing runs until Start.
func NewTarget(opts TargetOptions) *Target {
	if opts.Adapters <= 0 {
		opts.Adapters = 2
	}
	if opts.ReadyTimeout <= 0 {
		opts.ReadyTimeout = 60 * time.Second
	}
	return &Target{opts: opts}
}

// Durable is the "redis" target: AOF with an fsync before every reply, on a
// host folder that outlives kill -9.
func Durable() *Target { return NewTarget(TargetOptions{}) }

// VolatileTarget is the "redis-volatile" target: no persistence.
func VolatileTarget() *Target { return NewTarget(TargetOptions{Volatile: true}) }

// EverysecTarget is the "redis-everysec" target: Redis's default AOF
// policy, which a power loss breaks.
func EverysecTarget() *Target { return NewTarget(TargetOptions{Everysec: true}) }

// Name implements harness.Target.
func (t *Target) Name() string {
	switch {
	case t.opts.Volatile:
		return "redis-volatile"
	case t.opts.Everysec:
		return "redis-everysec"
	}
	return "redis"
}

// Semantics implements harness.Target.
func (t *Target) Semantics() checkers.Semantics { return Semantics }

// persistenceArgs is the heart of the two targets' difference.
func (t *Target) persistenceArgs() []string {
	if t.opts.Volatile {
		return []string{"--save", "", "--appendonly", "no"}
	}
	// RDB snapshots stay off: the AOF alone is the durable record, and a
	// background fork would only add noise to latencies.
	policy := "always"
	if t.opts.Everysec {
		policy = "everysec"
	}
	return []string{"--save", "", "--appendonly", "yes", "--appendfsync", policy}
}

// Start implements harness.Target: it builds (or finds) the images, then
// starts Redis and the adapters and waits until every adapter is healthy.
func (t *Target) Start(ctx context.Context, env harness.Env) (harness.Endpoints, error) {
	if env.Log == nil {
		env.Log = io.Discard
	}
	dir, err := filepath.Abs(env.Dir)
	if err != nil {
		return harness.Endpoints{}, err
	}
	env.Dir = dir
	redisTag, err := EnsureImage(ctx, env.Log)
	if err != nil {
		return harness.Endpoints{}, err
	}
	tags, err := docker.EnsureImages(ctx, env.Log, docker.ImageFenced)
	if err != nil {
		return harness.Endpoints{}, err
	}
	if err := t.startRedis(ctx, env, redisTag); err != nil {
		return harness.Endpoints{}, err
	}
	return t.startAdapters(ctx, tags[docker.ImageFenced])
}

// startRedis creates the run's runtime and the Redis container and waits
// until Redis answers.
func (t *Target) startRedis(ctx context.Context, env harness.Env, image string) error {
	rt, err := docker.New(ctx, env.RunID, docker.Options{Log: env.Log})
	if err != nil {
		return err
	}
	nw, err := rt.Network(ctx)
	if err != nil {
		rt.Close(context.WithoutCancel(ctx))
		return err
	}
	// Data and clock folders live in the runtime's run directory: a host
	// folder (so Redis's AOF outlives kill -9) that the runtime removes with
	// the containers, and its watchdog if the harness dies.
	root, err := rt.RunDir()
	if err != nil {
		rt.Close(context.WithoutCancel(ctx))
		return err
	}
	t.mu.Lock()
	t.env, t.rt, t.stopped = env, rt, false
	t.ips = map[string]string{RedisNode: nw.HostIP(0)}
	t.dirs = map[string]string{}
	t.nodes = []nemesis.Node{{Name: RedisNode, Role: "redis"}}
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
		if err := WriteClockOffset(t.clockFile(n.Name), 0); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(t.dataDir(), 0o755); err != nil {
		return err
	}
	dataHost := t.dataDir()
	if env.DiskLayer {
		if dataHost, err = t.mountDisk(rt); err != nil {
			return err
		}
	}
	cmd := append([]string{RedisBinary,
		"--bind", "0.0.0.0", "--port", strconv.Itoa(RedisPort), "--protected-mode", "no",
		"--dir", dataDirInContainer, "--daemonize", "no", "--loglevel", "notice"}, t.persistenceArgs()...)
	_, err = rt.Run(ctx, docker.ContainerSpec{
		Node:  RedisNode,
		Image: image,
		Cmd:   cmd,
		Env: []string{"LD_PRELOAD=" + SkewLibrary, SkewFileEnv + "=" + clockFileInContainer,
			SkewRefreshEnv + "=5"},
		// As the harness's user, so the harness can remove what Redis wrote.
		User:  docker.HostUser(),
		IP:    t.ips[RedisNode],
		Ports: []int{RedisPort},
		Binds: []docker.Bind{
			{Host: dataHost, Container: dataDirInContainer},
			{Host: t.clockDir(RedisNode), Container: clockDirInContainer, ReadOnly: true},
		},
	})
	if err != nil {
		return fmt.Errorf("starting %s: %w", RedisNode, err)
	}
	return t.waitRedis(ctx)
}

// adapterCmd is the fenced command line of an adapter container.
func (t *Target) adapterCmd() []string {
	// The adapter's clock reads the offset file named by fencing.ClockFileEnv.
	return []string{"/usr/local/bin/fenced",
		"--addr", "0.0.0.0:" + strconv.Itoa(AdapterPort),
		"--backend", "redis",
		"--redis-addr", t.ips[RedisNode] + ":" + strconv.Itoa(RedisPort),
	}
}

func (t *Target) startAdapters(ctx context.Context, image string) (harness.Endpoints, error) {
	var eps harness.Endpoints
	for _, name := range t.adapters {
		c, err := t.rt.Run(ctx, docker.ContainerSpec{
			Node:  name,
			Image: image,
			Cmd:   t.adapterCmd(),
			Env:   []string{fencing.ClockFileEnv + "=" + clockFileInContainer},
			User:  docker.HostUser(),
			IP:    t.ips[name],
			Ports: []int{AdapterPort},
			Binds: []docker.Bind{{Host: t.clockDir(name), Container: clockDirInContainer, ReadOnly: true}},
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
func (t *Target) dataDir() string              { return filepath.Join(t.dirs[RedisNode], "data") }

// RedisAddr is Redis's published address on 127.0.0.1 (for checks from the
// host, such as reading Redis's TIME).
func (t *Target) RedisAddr() (string, error) {
	if t.rt == nil {
		return "", errors.New("redis target not started")
	}
	c, err := t.rt.Container(RedisNode)
	if err != nil {
		return "", err
	}
	return c.Addr(RedisPort), nil
}

// waitRedis polls PING until Redis answers (not LOADING) or the ready
// timeout passes.
func (t *Target) waitRedis(ctx context.Context) error {
	addr, err := t.RedisAddr()
	if err != nil {
		return err
	}
	client := goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second,
		ReadTimeout: time.Second, WriteTimeout: time.Second})
	defer client.Close()
	ctx, cancel := context.WithTimeout(ctx, t.opts.ReadyTimeout)
	defer cancel()
	var last error
	for {
		if last = client.Ping(ctx).Err(); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s did not answer PING within %s: %v", RedisNode, t.opts.ReadyTimeout, last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Stop implements harness.Target: it saves node logs into env.Dir/logs and
// removes every container, the network and the run directory with Redis's
// data (idempotent).
func (t *Target) Stop(ctx context.Context) error {
	t.mu.Lock()
	rt, env := t.rt, t.env
	if rt == nil || t.stopped {
		t.mu.Unlock()
		return nil
	}
	t.stopped = true
	disk := t.disk
	t.disk = nil
	t.mu.Unlock()
	logErr := rt.SaveLogs(ctx, filepath.Join(env.Dir, "logs"))
	var diskErr error
	if disk != nil {
		// Redis dies first: its container's copy of the mount holds the
		// layer up, and the run directory under it goes with the runtime.
		rt.Kill(ctx, RedisNode)
		diskErr = disk.Unmount()
	}
	return errors.Join(rt.Close(ctx), logErr, diskErr)
}

// mountDisk puts Redis's data folder on the lazyfs layer and returns the
// folder to bind-mount, or the plain data folder (with noDisk saying why)
// where the layer cannot reach the container.
func (t *Target) mountDisk(rt *docker.Runtime) (string, error) {
	why := ""
	if err := lazyfs.Supported(); err != nil {
		why = err.Error()
	} else if err := rt.HostBinds(); err != nil {
		why = err.Error()
	}
	if why != "" {
		t.mu.Lock()
		t.noDisk = why
		t.mu.Unlock()
		return t.dataDir(), nil
	}
	m, err := lazyfs.New(t.dataDir(), filepath.Join(t.dirs[RedisNode], "mnt"), lazyfs.Options{})
	if err != nil {
		return "", err
	}
	t.mu.Lock()
	t.disk = m
	t.mu.Unlock()
	return m.Dir(), nil
}

// PowerNodes implements nemesis.PowerCutter: Redis, when its data is on
// the layer.
func (t *Target) PowerNodes() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.disk == nil {
		return nil
	}
	return []string{RedisNode}
}

// PowerUnreachable implements nemesis.PowerExplainer.
func (t *Target) PowerUnreachable() map[string]string {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.disk != nil:
		return nil
	case t.noDisk != "":
		return map[string]string{RedisNode: t.noDisk}
	}
	return map[string]string{RedisNode: "its data is not on the lazyfs layer (the run did not name power-loss)"}
}

// CutPower implements nemesis.PowerCutter: Redis is killed, then what it
// never fsynced is dropped.
func (t *Target) CutPower(ctx context.Context, node string) (lazyfs.Loss, error) {
	t.mu.Lock()
	disk := t.disk
	t.mu.Unlock()
	if node != RedisNode || disk == nil {
		return lazyfs.Loss{}, fmt.Errorf("%s: node %s's data is not on the lazyfs layer", t.Name(), node)
	}
	if err := t.rt.Kill(ctx, node); err != nil {
		return lazyfs.Loss{}, err
	}
	return disk.PowerLoss()
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
		return errors.New("redis target not started")
	}
	if _, ok := t.ips[node]; !ok {
		return fmt.Errorf("%s has no node %q", t.Name(), node)
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

// KillNode implements nemesis.Restarter: SIGKILL, no chance to flush.
func (t *Target) KillNode(ctx context.Context, node string) error {
	if err := t.known(node); err != nil {
		return err
	}
	return t.rt.Kill(ctx, node)
}

// StartNode implements nemesis.Restarter. Wiping applies to Redis's data
// folder (adapters keep no state). It returns once the node answers.
func (t *Target) StartNode(ctx context.Context, node string, wipe bool) error {
	if err := t.known(node); err != nil {
		return err
	}
	if wipe && node == RedisNode {
		dir := t.dataDir()
		t.mu.Lock()
		if t.disk != nil {
			dir = t.disk.Dir()
		}
		t.mu.Unlock()
		entries, err := os.ReadDir(dir)
		if err != nil {
			return err
		}
		for _, e := range entries {
			if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
				return fmt.Errorf("wiping %s: %w", node, err)
			}
		}
		if err := syncDir(dir); err != nil {
			return fmt.Errorf("wiping %s: %w", node, err)
		}
	}
	if err := t.rt.Start(ctx, node); err != nil {
		return err
	}
	if node == RedisNode {
		return t.waitRedis(ctx)
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
	if t.rt == nil {
		return nil
	}
	return t.rt.HealAll(ctx)
}

// ClockNodes implements nemesis.ClockSkewer: Redis, whose wall clock (read
// through the skew library) decides when leases expire, and the adapters
// only with SkewAdapters (see there).
func (t *Target) ClockNodes() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]string, 0, len(t.nodes))
	for _, n := range t.nodes {
		if n.Role == "redis" || t.opts.SkewAdapters {
			out = append(out, n.Name)
		}
	}
	return out
}

// SetClockOffset implements nemesis.ClockSkewer, for Redis (the skew
// library) and the adapters (fenced's FileOffsetClock) alike. The node sees
// the new offset when it returns (timewarp.SetPreloadOffset waits out the readers' refresh interval).
func (t *Target) SetClockOffset(ctx context.Context, node string, offset time.Duration) error {
	if err := t.known(node); err != nil {
		return err
	}
	return timewarp.SetPreloadOffset(t.clockFile(node), offset)
}

// syncDir makes a folder's entries durable (a wipe is meant to be).
func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}
