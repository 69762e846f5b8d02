package redis

import (
	"cmp"
	"context"
	"fmt"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencecheck/fencecheck/harness/docker"
	"github.com/fencecheck/fencecheck/harness/nodes"
	"github.com/fencecheck/fencecheck/targets/adapted"
)

// Node names and ports of a Redis target.
const (
	RedisNode          = "redis-1"
	RedisPort          = 6379
	AdapterPort        = adapted.AdapterPort
	dataDirInContainer = "/data"
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
// with the Redis store: a table of nodes (harness/nodes) that carries out
// every fault.
type Target struct {
	*nodes.Cluster
	opts TargetOptions
}

// NewTarget returns a Redis target; nothing runs until Start.
func NewTarget(opts TargetOptions) *Target {
	t := &Target{opts: opts}
	t.Cluster = nodes.Must(nodes.New(t.name(), Semantics, t.table(), nodes.Options{}))
	return t
}

// Durable is the "redis" target: AOF with an fsync before every reply, on a
// host folder that outlives kill -9.
func Durable() *Target { return NewTarget(TargetOptions{}) }

// VolatileTarget is the "redis-volatile" target: no persistence.
func VolatileTarget() *Target { return NewTarget(TargetOptions{Volatile: true}) }

// EverysecTarget is the "redis-everysec" target: Redis's default AOF
// policy, which a power loss breaks.
func EverysecTarget() *Target { return NewTarget(TargetOptions{Everysec: true}) }

// System names the Redis release, from the Debian package its image is
// assembled from.
func (t *Target) System(ctx context.Context) (string, error) {
	return docker.DebianSystem(ctx, "Redis", hostRedis)
}

func (t *Target) name() string {
	switch {
	case t.opts.Volatile:
		return "redis-volatile"
	case t.opts.Everysec:
		return "redis-everysec"
	}
	return "redis"
}

// table is Redis (its data on the host, its wall clock read through the
// image's skew library) and the adapters, which start once Redis answers.
func (t *Target) table() []nodes.Node {
	ready := cmp.Or(t.opts.ReadyTimeout, 60*time.Second)
	cmd := append([]string{RedisBinary,
		"--bind", "0.0.0.0", "--port", "{port}", "--protected-mode", "no",
		"--dir", "{data}", "--daemonize", "no", "--loglevel", "notice"}, t.persistenceArgs()...)
	redis := nodes.Node{Name: RedisNode, Role: "redis", Ports: []nodes.Port{{Number: RedisPort}},
		// A partial crash state can leave holes in the AOF, which Redis
		// refuses at its start (the node then never comes back and the
		// run is unknown): its power losses drop every unsynced write.
		Data:      nodes.Data{Path: dataDirInContainer, LoseAllOnly: "Redis refuses to start on an AOF with holes"},
		Clock:     nodes.Clock{Via: nodes.ClockSkewLibrary},
		Health:    nodes.Health{Probe: nodes.Probe{Func: ping}, Timeout: ready},
		Container: &nodes.Container{Build: ImageName, Cmd: cmd}}
	clock := nodes.Clock{Via: nodes.ClockFile, Aside: "the Redis store reads no adapter clock: leases are Redis TTLs"}
	if t.opts.SkewAdapters {
		clock.Aside = ""
	}
	return append([]nodes.Node{redis}, adapted.Adapters{Count: t.opts.Adapters, Clock: clock,
		Args:    []string{"--backend", "redis", "--redis-addr", "{addr:" + RedisNode + "}"},
		Health:  nodes.Health{Timeout: ready},
		WaitFor: []string{RedisNode}}.Nodes()...)
}

// persistenceArgs is the heart of the targets' difference.
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

// RedisAddr is Redis's published address on 127.0.0.1 (for checks from the
// host, such as reading Redis's TIME).
func (t *Target) RedisAddr() (string, error) { return t.HostAddr(RedisNode, "") }

// ping succeeds once Redis answers PING (not LOADING).
func ping(ctx context.Context, addr string) error {
	client := goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second,
		ReadTimeout: time.Second, WriteTimeout: time.Second})
	defer client.Close()
	if err := client.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("PING: %w", err)
	}
	return nil
}
