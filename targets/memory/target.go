package memory

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/harness"
	"github.com/fencecheck/fencecheck/nemesis"
	"github.com/fencecheck/fencecheck/nemesis/lazyfs"
)

// TargetOptions configure the embedded reference target.
type TargetOptions struct {
	// Bugs are the bug switches by name (see AllBugs).
	Bugs []string
	// SealKey makes the reference seal tokens and verify seals.
	SealKey string
	_       struct{}
}

// Target is the reference running inside the fencecheck process: the
// default target, which needs no Docker. Normally one node serves both
// roles; under split-issuers two issuer replicas share a counter through a
// leader (which also serves the resource) until a partition cuts them apart.
type Target struct {
	opts TargetOptions
	bugs Bugs

	mu    sync.Mutex
	nodes map[string]*Node
	order []string
	pair  *IssuerPair
	logs  []*os.File
	// disks are the nodes' lazyfs layers (Env.DiskLayer), by node;
	// noDisk says why there are none when one was asked for.
	disks  map[string]*lazyfs.Mount
	noDisk string
}

// NewTarget checks the options and returns the target, not started.
func NewTarget(opts TargetOptions) (*Target, error) {
	bugs, err := ParseBugs(opts.Bugs...)
	if err != nil {
		return nil, err
	}
	return &Target{opts: opts, bugs: bugs, nodes: map[string]*Node{}, disks: map[string]*lazyfs.Mount{}}, nil
}

// Name is "memory".
func (t *Target) Name() string { return "memory" }

// Semantics is what the reference declares: strict, per-lock tokens,
// authenticated when it seals them. The bug switches do not change the
// declaration: breaking it is what they are for.
func (t *Target) Semantics() checkers.Semantics {
	sem := checkers.DefaultSemantics()
	sem.Authenticated = t.opts.SealKey != "" || t.bugs.Has(AcceptForged)
	return sem
}

// Start starts the node(s) with data dirs under env.Dir/data and logs under
// env.Dir/logs.
func (t *Target) Start(ctx context.Context, env harness.Env) (harness.Endpoints, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var eps harness.Endpoints
	if err := os.MkdirAll(filepath.Join(env.Dir, "logs"), 0o755); err != nil {
		return eps, err
	}
	if env.DiskLayer {
		if err := lazyfs.Supported(); err != nil {
			t.noDisk = err.Error()
		}
	}
	cfg := func(name string) (Config, error) {
		dir := filepath.Join(env.Dir, "data", name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return Config{}, err
		}
		if env.DiskLayer && t.noDisk == "" {
			// The data folder is the disk; the node works in the layer
			// over it.
			m, err := lazyfs.New(dir, filepath.Join(env.Dir, "mnt", name), lazyfs.Options{})
			if err != nil {
				return Config{}, err
			}
			t.disks[name] = m
			dir = m.Dir()
		}
		lf, err := os.Create(filepath.Join(env.Dir, "logs", name+".log"))
		if err != nil {
			return Config{}, err
		}
		t.logs = append(t.logs, lf)
		return Config{Name: name, Dir: dir, SealKey: []byte(t.opts.SealKey), Bugs: t.bugs, Log: lf}, nil
	}
	if t.bugs.Has(SplitIssuers) {
		lc, err := cfg("issuer-1")
		if err != nil {
			return eps, err
		}
		fc, err := cfg("issuer-2")
		if err != nil {
			return eps, err
		}
		pair, err := NewSplitIssuers(lc, fc)
		if err != nil {
			return eps, err
		}
		lu, fu, err := pair.Start()
		if err != nil {
			return eps, err
		}
		t.pair = pair
		t.add(pair.Leader)
		t.add(pair.Follower)
		eps.Issuers = []harness.Endpoint{{Node: "issuer-1", URL: lu}, {Node: "issuer-2", URL: fu}}
		eps.Resources = []harness.Endpoint{{Node: "issuer-1", URL: lu}}
	} else {
		c, err := cfg("reference")
		if err != nil {
			return eps, err
		}
		n, err := NewNode(c)
		if err != nil {
			return eps, err
		}
		u, err := n.Start("")
		if err != nil {
			return eps, err
		}
		t.add(n)
		eps.Issuers = []harness.Endpoint{{Node: n.Name(), URL: u}}
		eps.Resources = eps.Issuers
	}
	return eps, harness.WaitHealthy(ctx, eps, 10*time.Second)
}

func (t *Target) add(n *Node) {
	t.nodes[n.Name()] = n
	t.order = append(t.order, n.Name())
}

// Stop stops every node and closes the logs.
func (t *Target) Stop(context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	var errs []error
	for _, name := range t.order {
		errs = append(errs, t.nodes[name].Stop())
	}
	for _, f := range t.logs {
		errs = append(errs, f.Close())
	}
	for _, m := range t.disks {
		errs = append(errs, m.Unmount())
	}
	t.nodes, t.order, t.logs, t.pair, t.disks = map[string]*Node{}, nil, nil, nil, map[string]*lazyfs.Mount{}
	return errors.Join(errs...)
}

func (t *Target) node(name string) (*Node, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n, ok := t.nodes[name]
	if !ok {
		return nil, fmt.Errorf("memory: no node %q", name)
	}
	return n, nil
}

// Nodes lists the reference's nodes (nemesis.Cluster).
func (t *Target) Nodes() []nemesis.Node {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]nemesis.Node, 0, len(t.order))
	for _, name := range t.order {
		role := "reference"
		if t.pair != nil {
			role = "issuer"
		}
		out = append(out, nemesis.Node{Name: name, Role: role})
	}
	return out
}

// PauseNode freezes a node: its requests stall until ResumeNode.
func (t *Target) PauseNode(_ context.Context, name string) error {
	n, err := t.node(name)
	if err != nil {
		return err
	}
	n.Pause()
	return nil
}

// ResumeNode thaws a node.
func (t *Target) ResumeNode(_ context.Context, name string) error {
	n, err := t.node(name)
	if err != nil {
		return err
	}
	n.Resume()
	return nil
}

// KillNode crashes a node: what was not durable is gone.
func (t *Target) KillNode(_ context.Context, name string) error {
	n, err := t.node(name)
	if err != nil {
		return err
	}
	return n.Kill()
}

// StartNode starts a killed node again from its data dir (or an empty one);
// a node that already runs is left as it is.
func (t *Target) StartNode(_ context.Context, name string, wipe bool) error {
	n, err := t.node(name)
	if err != nil {
		return err
	}
	if n.Running() {
		return nil
	}
	return n.Restart(wipe)
}

// PowerNodes lists the nodes whose data is on the lazyfs layer: all of
// them when the run asked for it and this machine has FUSE.
func (t *Target) PowerNodes() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []string
	for _, name := range t.order {
		if t.disks[name] != nil {
			out = append(out, name)
		}
	}
	return out
}

// PowerUnreachable says why no node is on the layer.
func (t *Target) PowerUnreachable() map[string]string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := map[string]string{}
	for _, name := range t.order {
		switch {
		case t.disks[name] != nil:
		case t.noDisk != "":
			out[name] = t.noDisk
		default:
			out[name] = "its data is not on the lazyfs layer (the run did not name power-loss)"
		}
	}
	return out
}

// CutPower kills a node and drops what it wrote but never made durable.
func (t *Target) CutPower(_ context.Context, name string) (lazyfs.Loss, error) {
	n, err := t.node(name)
	if err != nil {
		return lazyfs.Loss{}, err
	}
	t.mu.Lock()
	m := t.disks[name]
	t.mu.Unlock()
	if m == nil {
		return lazyfs.Loss{}, fmt.Errorf("memory: node %s's data is not on the lazyfs layer", name)
	}
	if err := n.Kill(); err != nil {
		return lazyfs.Loss{}, err
	}
	return m.PowerLoss()
}

// ClockNodes lists the nodes whose clock the clock nemesis can shift: all
// of them (their clocks are injectable).
func (t *Target) ClockNodes() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]string(nil), t.order...)
}

// SetClockOffset shifts a node's clock by offset from real time.
func (t *Target) SetClockOffset(_ context.Context, name string, offset time.Duration) error {
	n, err := t.node(name)
	if err != nil {
		return err
	}
	c := n.Clock()
	if c == nil {
		return fmt.Errorf("memory: node %s has no settable clock", name)
	}
	c.Set(offset)
	return nil
}

// Partition cuts the issuer replicas apart when the groups separate them
// (split-issuers). The single reference has no internal links to cut.
func (t *Target) Partition(_ context.Context, groups [][]string) error {
	t.mu.Lock()
	pair := t.pair
	t.mu.Unlock()
	if pair == nil {
		return errors.New("memory: a single reference node has no links between nodes to cut")
	}
	group := map[string]int{}
	for i, g := range groups {
		for _, n := range g {
			group[n] = i + 1
		}
	}
	if group["issuer-1"] != group["issuer-2"] {
		pair.Cut(true)
	}
	return nil
}

// HealPartition reconnects the issuer replicas.
func (t *Target) HealPartition(context.Context) error {
	t.mu.Lock()
	pair := t.pair
	t.mu.Unlock()
	if pair != nil {
		pair.Cut(false)
	}
	return nil
}
