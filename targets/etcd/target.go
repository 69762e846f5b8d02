package etcd

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fencecheck/fencecheck/harness"
	"github.com/fencecheck/fencecheck/harness/nodes"
	"github.com/fencecheck/fencecheck/nemesis"
	"github.com/fencecheck/fencecheck/targets/adapted"
)

// Ports inside the containers.
const (
	clientPort = 2379
	peerPort   = 2380
	// metricsPort serves /metrics from the member's start, before it
	// publishes itself and its client port serves (caughtUp reads it).
	metricsPort = 2381
)

// Options configure the etcd target.
type Options struct {
	// Members is the number of etcd members (default 3).
	Members int
	// Version is the etcd release (Release: "" is DefaultVersion; a bad one
	// is Open's error, New takes the default).
	Version string
	// Adapters is the number of adapter replicas (default 2); clients are
	// spread over them.
	Adapters int
	// Mutex makes the adapters take locks through etcd's own client lock
	// (MutexStore, backend etcd-mutex): the target "etcd-mutex".
	Mutex bool
	// Resource, when set, makes the members the issuer of another target:
	// its nodes join the table and the adapters serve its backend (the s3
	// target: tokens from etcd, values in an object store).
	Resource *Resource
	// Log receives setup messages (default: the run's log).
	Log io.Writer
	_   struct{}
}

// Resource is the other half of a target whose issuer is etcd.
type Resource struct {
	// Name is the target's name; Backend is fenced's backend, which takes
	// --etcd-endpoints for its locks, and Args are its own flags ({addr:NODE}
	// reaches Nodes).
	Name, Backend string
	Args          []string
	// Nodes are the resource's rows of the table; AdapterWaitFor names
	// those that must answer before the adapters start.
	Nodes          []nodes.Node
	AdapterWaitFor []string
	// System names the resource's release for the run.
	System string
}

// Target is etcd members and adapters (the fenced server with the etcd
// backend) in containers on the run's own network: a table of nodes
// (harness/nodes) plus what is etcd's own: who leads, and how a wiped
// member comes back (removed from the cluster and added again).
type Target struct {
	*nodes.Cluster
	members  []string
	release  string
	resource *Resource
}

var (
	_ harness.Target         = (*Target)(nil)
	_ harness.Systemer       = (*Target)(nil)
	_ nemesis.Leaderer       = (*Target)(nil)
	_ nemesis.MemberReplacer = (*Target)(nil)
	_ nemesis.MemberSettler  = (*Target)(nil)
	_ nemesis.LogPather      = (*Target)(nil)
)

// New returns the etcd target; nothing runs until Start.
func New(opts Options) harness.Target {
	if opts.Members <= 0 {
		opts.Members = 3
	}
	t := &Target{resource: opts.Resource}
	var err error
	if t.release, err = Release(opts.Version); err != nil {
		t.release = DefaultVersion
	}
	for i := 1; i <= opts.Members; i++ {
		t.members = append(t.members, fmt.Sprintf("etcd-%d", i))
	}
	name, backend := "etcd", "etcd"
	if opts.Mutex {
		name, backend = "etcd-mutex", "etcd-mutex"
	}
	var extra, waitFor []string
	if r := opts.Resource; r != nil {
		name, backend, extra, waitFor = r.Name, r.Backend, r.Args, r.AdapterWaitFor
	}
	// With a resource of its own the members keep only the issuer's
	// state, and the role says so: coverage and the guided schedule judge
	// a node's half by its role (a partition between two SeaweedFS nodes
	// separates no issuer replicas).
	role := "etcd"
	if opts.Resource != nil {
		role = "etcd, issuer state"
	}
	var table []nodes.Node
	endpoints := make([]string, len(t.members))
	for i, m := range t.members {
		endpoints[i] = "http://{addr:" + m + "}"
		table = append(table, nodes.Node{Name: m, Role: role,
			Ports: []nodes.Port{{Number: clientPort}, {Name: "peer", Number: peerPort}, {Name: "metrics", Number: metricsPort}},
			Data:  nodes.Data{Path: "/data"},
			// etcd reads the wall clock through the vDSO (a static Go
			// program): its processes' own clock is moved.
			Clock: nodes.Clock{Via: nodes.ClockProcesses},
			// A member answers /health only in a quorum.
			Health:    nodes.Health{Probe: nodes.Probe{Func: memberHealth}, Timeout: 60 * time.Second, Quorum: true},
			Container: &nodes.Container{Build: t.image(), Cmd: t.memberCmd(m, "new")}})
	}
	if opts.Resource != nil {
		table = append(table, opts.Resource.Nodes...)
	}
	// Everything starts at once: the adapters connect to etcd lazily and
	// report healthy only once a quorum answers them. The etcd backend
	// reads no adapter clock, so a step there must change nothing.
	table = append(table, adapted.Adapters{Count: opts.Adapters,
		Args:   append([]string{"--backend", backend, "--etcd-endpoints", strings.Join(endpoints, ",")}, extra...),
		Clock:  nodes.Clock{Via: nodes.ClockProcesses},
		Health: nodes.Health{Timeout: 30 * time.Second, Quorum: true}, WaitFor: waitFor}.Nodes()...)
	t.Cluster = nodes.Must(nodes.New(name, Semantics, table, nodes.Options{Log: opts.Log}))
	return t
}

// memberCmd is a member's command line, joining a new cluster or (state
// "existing") one that runs. Timings are etcd's defaults (100 ms heartbeat,
// 1 s election timeout): the faults should meet etcd as users run it.
func (t *Target) memberCmd(name, state string) []string {
	cluster := make([]string, len(t.members))
	for i, m := range t.members {
		cluster[i] = m + "=http://{addr:" + m + ":peer}"
	}
	return []string{"/usr/local/bin/etcd",
		"--name", "{name}",
		"--data-dir", "{data}",
		"--listen-client-urls", "http://0.0.0.0:{port}",
		"--advertise-client-urls", "http://{addr:" + name + "}",
		"--listen-peer-urls", "http://0.0.0.0:{port:peer}",
		"--listen-metrics-urls", "http://0.0.0.0:{port:metrics}",
		"--initial-advertise-peer-urls", "http://{addr:" + name + ":peer}",
		"--initial-cluster", strings.Join(cluster, ","),
		"--initial-cluster-state", state,
		"--initial-cluster-token", "fencecheck-{run}",
	}
}

// memberHealth asks a member's /health once.
func memberHealth(ctx context.Context, addr string) error {
	return etcdHealth(ctx, &http.Client{Timeout: time.Second}, "http://"+addr)
}

// memberURL is a member's client URL as this machine reaches it: through
// its published port on 127.0.0.1, never the container IP.
func (t *Target) memberURL(name string) string {
	addr, err := t.HostAddr(name, "")
	if err != nil {
		return ""
	}
	return "http://" + addr
}

func (t *Target) isMember(name string) bool {
	for _, m := range t.members {
		if m == name {
			return true
		}
	}
	return false
}

// LogPaths implements nemesis.LogPather: a member's write-ahead log
// (member/wal under its data folder), whose fsync makes an entry durable;
// its backend (member/snap/db) is committed on its own every 100 ms, and
// while that commit runs it holds the lock an apply, and so an answer,
// waits for.
func (t *Target) LogPaths(node string) []string {
	if !t.isMember(node) {
		return nil
	}
	return []string{"member/wal"}
}

// Leader asks every reachable member for its status and names the leader
// most of them report. Members that are paused or cut off simply do not
// answer within the short timeout.
func (t *Target) Leader(ctx context.Context) (string, error) {
	names := map[uint64]string{}
	votes := map[uint64]int{}
	var lastErr error
	for _, m := range t.members {
		id, leader, err := t.memberStatus(ctx, m)
		if err != nil {
			lastErr = err
			continue
		}
		names[id] = m
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

// StartNode starts a killed node again with its data. With wipe, a member
// comes back with an empty data dir the way an operator replaces a disk:
// removed from the cluster and added again as a new member (a member that
// simply lost its raft log would crash the cluster's raft invariants, which
// is not a fault etcd claims to survive). Adapters hold no data.
func (t *Target) StartNode(ctx context.Context, name string, wipe bool) error {
	if wipe && t.isMember(name) && len(t.members) == 1 {
		// No other member to re-add it through: a wiped single member is a
		// new cluster, everything it held gone (restart-wipe is opt-in: no
		// system survives it).
		if err := t.WipeData(name); err != nil {
			return err
		}
		return t.Recreate(ctx, name, t.memberCmd(name, "new"))
	}
	if wipe && t.isMember(name) {
		return t.replaceMember(ctx, name)
	}
	return t.Cluster.StartNode(ctx, name, wipe)
}
