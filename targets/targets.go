// Package targets is the table of fencing systems fencecheck can test, by
// name: a new target is its package (a harness.Target) and one line in the
// table below.
package targets

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/fencecheck/fencecheck/harness"
	"github.com/fencecheck/fencecheck/targets/etcd"
	"github.com/fencecheck/fencecheck/targets/memory"
	"github.com/fencecheck/fencecheck/targets/mysql"
	"github.com/fencecheck/fencecheck/targets/postgres"
	"github.com/fencecheck/fencecheck/targets/redis"
	"github.com/fencecheck/fencecheck/targets/s3"
	"github.com/fencecheck/fencecheck/targets/spec"
	"github.com/fencecheck/fencecheck/targets/zookeeper"
)

// entry is one line of the table. open makes the target from a run's
// config; options a target does not take (the reference's bug switches and
// seal key) are refused before it is called.
type entry struct {
	name, describe string
	// reference marks the target that takes --bug and --seal-key.
	reference bool
	// version and members mark the targets that take --version (a server
	// built from source here) and --members (a cluster of its own).
	version, members bool
	// noVersion says why --version is refused, when not because the server
	// is the host's Debian package.
	noVersion string
	open      func(cfg harness.Config) (harness.Target, error)
}

var table = []entry{
	{name: "memory", reference: true,
		describe: "the reference fencing server, embedded in this process (no Docker); --bug switches break it on purpose",
		open: func(cfg harness.Config) (harness.Target, error) {
			return memory.NewTarget(memory.TargetOptions{Bugs: cfg.Bugs, SealKey: cfg.SealKey})
		}},
	{name: "etcd", version: true, members: true,
		describe: "3 etcd members (--members, --version) + 2 fenced adapters in containers (token = lock key's create revision, global scope)",
		open: func(cfg harness.Config) (harness.Target, error) {
			return etcd.Open(etcd.Options{Version: cfg.Version, Members: cfg.Members})
		}},
	{name: "etcd-mutex", version: true, members: true,
		describe: "3 etcd members (--members, --version) + 2 adapters that lock through etcd's own client lock (concurrency.Session + Mutex; token = the mutex key's create revision)",
		open: func(cfg harness.Config) (harness.Target, error) {
			return etcd.Open(etcd.Options{Mutex: true, Version: cfg.Version, Members: cfg.Members})
		}},
	{name: "zookeeper", members: true,
		describe: "3 ZooKeeper servers (--members) + 2 adapters in containers (lock recipe: token = the lock node's creation zxid, lease = a session; version-conditional set per write)",
		open: func(cfg harness.Config) (harness.Target, error) {
			return zookeeper.New(zookeeper.Options{Servers: cfg.Members}), nil
		}},
	{name: "redis",
		describe: "Redis with AOF appendfsync always + 2 fenced adapters in containers (Lua scripts, per-lock tokens)",
		open:     func(harness.Config) (harness.Target, error) { return redis.Durable(), nil }},
	{name: "redis-volatile",
		describe: "Redis with no persistence + 2 adapters: the lock counter resets on restart (expected invalid under restart)",
		open:     func(harness.Config) (harness.Target, error) { return redis.VolatileTarget(), nil }},
	{name: "redis-everysec",
		describe: "Redis with its default AOF policy, appendfsync everysec + 2 adapters: acknowledged writes not yet fsynced are lost at a power loss (expected invalid under power-loss, valid under restart)",
		open:     func(harness.Config) (harness.Target, error) { return redis.EverysecTarget(), nil }},
	{name: "postgres",
		describe: "PostgreSQL 15 + 2 fenced adapters in containers (a lock row per lock, granted by one upsert; conditional write UPDATE ... WHERE token < $2)",
		open:     func(harness.Config) (harness.Target, error) { return postgres.New(postgres.Options{}), nil }},
	{name: "postgres-trigger",
		describe: "PostgreSQL 15 + 2 adapters that write plainly; a BEFORE UPDATE trigger rejects stale tokens",
		open: func(harness.Config) (harness.Target, error) {
			return postgres.New(postgres.Options{Mode: postgres.Trigger}), nil
		}},
	{name: "postgres-async",
		describe: "PostgreSQL 15 with synchronous_commit = off + 2 adapters: acknowledged commits can vanish at a crash (expected invalid under restart)",
		open:     func(harness.Config) (harness.Target, error) { return postgres.New(postgres.Options{Async: true}), nil }},
	{name: "mysql",
		describe: "MariaDB 10.11 (InnoDB, every commit fsynced) + 2 fenced adapters in containers (a lock row per lock, one conditional upsert per write)",
		open:     func(harness.Config) (harness.Target, error) { return mysql.New(), nil }},
	{name: "s3", members: true, noVersion: s3NoVersion,
		describe: "3 etcd members (--members) issue the tokens; SeaweedFS (master, volume server, filer with its S3 gateway, built from source) holds the values; 2 adapters write each object with If-Match on the ETag they read (docs/s3.md)",
		open: func(cfg harness.Config) (harness.Target, error) {
			return s3.New(s3.Options{Members: cfg.Members}), nil
		}},
	{name: "s3-unconditional", members: true, noVersion: s3NoVersion,
		describe: "s3 with the same token check followed by a plain PUT: the check-then-act race (expected invalid when a pause or a concurrent writer lands between the check and the PUT)",
		open: func(cfg harness.Config) (harness.Target, error) {
			return s3.New(s3.Options{Mode: s3.Unconditional, Members: cfg.Members}), nil
		}},
}

// s3NoVersion: SeaweedFS is compiled here, but at one build only.
const s3NoVersion = "the Go module proxy serves one build of SeaweedFS, pinned at " + s3.Version + " (docs/s3.md)"

// SpecPrefix selects a target described by a spec file: spec:PATH.
const SpecPrefix = "spec:"

// New returns the target cfg.Target names, configured by cfg.
func New(cfg harness.Config) (harness.Target, error) {
	return open(cfg, spec.Options{StrictContract: cfg.StrictContract, DeferPreflight: true})
}

// NewWithoutPreflight is New, except that a spec target does not run the
// conformance preflight in Start: for a caller that runs it itself and wants
// the report rather than Start's error (fencecheck conform).
func NewWithoutPreflight(cfg harness.Config) (harness.Target, error) {
	return open(cfg, spec.Options{NoPreflight: true})
}

func open(cfg harness.Config, so spec.Options) (harness.Target, error) {
	reference := len(cfg.Bugs) > 0 || cfg.SealKey != ""
	if path, ok := strings.CutPrefix(cfg.Target, SpecPrefix); ok {
		if path == "" {
			return nil, errors.New("a spec target needs a file: spec:PATH")
		}
		if reference || cfg.Version != "" || cfg.Members != 0 {
			return nil, errors.New("--bug, --seal-key, --version and --members apply to built-in targets only; a spec's system is configured by its spec")
		}
		return spec.Open(path, so)
	}
	for _, e := range table {
		if e.name != cfg.Target {
			continue
		}
		if reference && !e.reference {
			return nil, fmt.Errorf("--bug and --seal-key apply to the memory reference only, not %s", e.name)
		}
		if cfg.Version != "" && !e.version {
			why := "its server is the installed Debian package, and the run says which version it used"
			if e.noVersion != "" {
				why = e.noVersion
			}
			return nil, fmt.Errorf("--version applies to the targets whose server is built from source here (etcd, etcd-mutex), not %s: %s", e.name, why)
		}
		if cfg.Members != 0 && !e.members {
			return nil, fmt.Errorf("--members applies to the targets that run a cluster (etcd, etcd-mutex, zookeeper, s3, s3-unconditional), not %s", e.name)
		}
		return e.open(cfg)
	}
	return nil, fmt.Errorf("unknown target %q (known: %s, spec:FILE)", cfg.Target, strings.Join(Names(), ", "))
}

// Names lists the built-in targets, sorted.
func Names() []string {
	out := make([]string, len(table))
	for i, e := range table {
		out[i] = e.name
	}
	sort.Strings(out)
	return out
}

// Describe returns a one-line description of a built-in target.
func Describe(name string) string {
	for _, e := range table {
		if e.name == name {
			return e.describe
		}
	}
	return ""
}
