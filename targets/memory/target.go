package memory

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/harness/nodes"
	"github.com/fencecheck/fencecheck/nemesis"
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
// default target, which needs no Docker. Normally one in-process node
// serves both roles; under split-issuers two issuer replicas share a counter
// through a leader (which also serves the resource) until a partition cuts
// them apart: the one link of its own the reference has, which Partition
// cuts in process.
type Target struct {
	*nodes.Cluster
	opts TargetOptions
	bugs Bugs
	pair *IssuerPair
}

// The issuer replicas' node names under split-issuers and
// one-way-failover: the first leads, and serves the resource too.
const (
	pairLeader   = "issuer-1"
	pairFollower = "issuer-2"
	// pairResource serves the resource under rejoin-empty.
	pairResource = "resource"
)

// NewTarget checks the options and returns the target, not started.
func NewTarget(opts TargetOptions) (*Target, error) {
	bugs, err := ParseBugs(opts.Bugs...)
	if err != nil {
		return nil, err
	}
	t := &Target{opts: opts, bugs: bugs}
	node := func(name string, resource bool, role string) nodes.Node {
		return nodes.Node{Name: name, Role: role, Issuer: true, Resource: resource, Ports: []nodes.Port{{}},
			Clock: nodes.Clock{Via: nodes.ClockInjected}, Health: nodes.Health{Timeout: 10 * time.Second},
			Server: &nodes.Server{New: t.server}}
	}
	table := []nodes.Node{node("reference", true, "reference")}
	switch {
	case bugs.Has(RejoinEmpty):
		// The resource on a node of its own: a replica replaced loses its
		// folder, and the resource's marks must not go with it.
		res := node(pairResource, true, "resource")
		res.Issuer = false
		table = []nodes.Node{node(pairLeader, false, "issuer"), node(pairFollower, false, "issuer"), res}
	case bugs.Paired():
		table = []nodes.Node{node(pairLeader, true, "issuer"), node(pairFollower, false, "issuer")}
	}
	t.Cluster, err = nodes.New("memory", t.semantics(), table, nodes.Options{})
	return t, err
}

// semantics is what the reference declares: strict, per-lock tokens,
// authenticated when it seals them. The bug switches do not change the
// declaration: breaking it is what they are for.
func (t *Target) semantics() checkers.Semantics {
	sem := checkers.DefaultSemantics()
	sem.Authenticated = t.opts.SealKey != "" || t.bugs.Has(AcceptForged)
	return sem
}

// server makes one node's reference server in its workspace; under the
// paired bugs the first replica started makes both, sharing the counter,
// pairLeader leading (rejoin-empty's resource is a node of its own).
func (t *Target) server(w nodes.Workspace) (nodes.Runner, error) {
	cfg := func(w nodes.Workspace) Config {
		return Config{Name: w.Name, Dir: w.Data, Addr: w.Addr, SealKey: []byte(t.opts.SealKey), Bugs: t.bugs, Log: w.Log}
	}
	if !t.bugs.Paired() {
		return NewNode(cfg(w))
	}
	if w.Name == pairResource {
		c := cfg(w)
		c.Bugs = withoutSplit(c.Bugs)
		return NewNode(c)
	}
	if t.pair == nil {
		leader, follower, ok := w, w, false
		if w.Name == pairLeader {
			follower, ok = w.Of(pairFollower)
		} else {
			leader, ok = w.Of(pairLeader)
		}
		if !ok {
			return nil, errors.New("memory: split-issuers needs both replicas")
		}
		newPair := NewSplitIssuers
		if t.bugs.Has(RejoinEmpty) {
			newPair = NewMemberPair
		}
		pair, err := newPair(cfg(leader), cfg(follower))
		if err != nil {
			return nil, err
		}
		pair.SetPeerURL("http://" + leader.Addr)
		pair.SetFollowerURL("http://" + follower.Addr)
		t.pair = pair
	}
	if w.Name == t.pair.Leader.Name() {
		return t.pair.Leader, nil
	}
	return t.pair.Follower, nil
}

var _ nemesis.Leaderer = (*Target)(nil)

// Leader implements nemesis.Leaderer: the issuer replica that leads under
// split-issuers and one-way-failover (the follower asks it for tokens, and
// a one-way-failover leader confirms each with the follower). Leadership
// never moves: the follower that issues on its own copy does not take it
// over. A single reference node leads nothing, and under rejoin-empty
// each replica leads half the locks: none is named.
func (t *Target) Leader(context.Context) (string, error) {
	if !t.bugs.Paired() {
		return "", errors.New("memory: a single reference node has no leader")
	}
	if t.bugs.Has(RejoinEmpty) {
		return "", errors.New("memory: each of rejoin-empty's replicas leads half the locks")
	}
	return pairLeader, nil
}

// PartitionNodes implements nemesis.Partitioner: the issuer replicas of
// split-issuers (a single reference has no links between nodes to cut).
func (t *Target) PartitionNodes() []string {
	if t.pair == nil {
		return nil
	}
	return []string{t.pair.Leader.Name(), t.pair.Follower.Name()}
}

// Partition cuts the issuer replicas apart when the groups separate them
// (split-issuers).
func (t *Target) Partition(_ context.Context, groups [][]string) error {
	if t.pair == nil {
		return errors.New("memory: a single reference node has no links between nodes to cut")
	}
	group, err := nodes.CheckGroups(groups, func(n string) error {
		if n != t.pair.Leader.Name() && n != t.pair.Follower.Name() {
			return fmt.Errorf("memory has no node %q", n)
		}
		return nil
	})
	if err != nil {
		return err
	}
	lg, lin := group[t.pair.Leader.Name()]
	fg, fin := group[t.pair.Follower.Name()]
	if lin && fin && lg != fg {
		t.pair.Cut(true)
	}
	return nil
}

// Grudge implements nemesis.Grudger for the issuer replicas: grudge[a]
// names the replicas a cannot reach, each direction cut apart: the
// follower's requests to the leader (it asks for each token) and, under
// one-way-failover, the leader's to the follower (it confirms each token).
// Under split-issuers the leader opens no connection, so a leader that
// cannot reach the follower loses nothing, as on a network whose one-way
// cut drops the connections one side opens.
func (t *Target) Grudge(_ context.Context, grudge map[string][]string) error {
	if t.pair == nil {
		return errors.New("memory: a single reference node has no links between nodes to cut")
	}
	l, f := t.pair.Leader.Name(), t.pair.Follower.Name()
	for a, bs := range grudge {
		for _, n := range append([]string{a}, bs...) {
			if n != l && n != f {
				return fmt.Errorf("memory has no node %q", n)
			}
		}
	}
	t.pair.CutOneWay(slices.Contains(grudge[f], l), slices.Contains(grudge[l], f))
	return nil
}

// HealPartition reconnects the issuer replicas.
func (t *Target) HealPartition(context.Context) error {
	if t.pair != nil {
		t.pair.Cut(false)
	}
	return nil
}

var (
	_ nemesis.MemberReplacer = (*Target)(nil)
	_ nemesis.Settler        = (*Target)(nil)
)

// SettleBeforeChange implements nemesis.Settler: a replica is removed and
// added back at any time, the other issuing alone meanwhile (rejoin.go).
func (t *Target) SettleBeforeChange() time.Duration { return 0 }

// ReplaceableMembers implements nemesis.MemberReplacer: rejoin-empty's
// issuer replicas. A single reference, and the pairs whose failover is no
// membership change, have none.
func (t *Target) ReplaceableMembers() []string {
	if !t.bugs.Has(RejoinEmpty) {
		return nil
	}
	return []string{pairLeader, pairFollower}
}

// RemoveMember implements nemesis.MemberReplacer: the replica leaves the
// pair (the other then issues alone), is stopped, and its folder emptied.
func (t *Target) RemoveMember(ctx context.Context, node string) (string, error) {
	if t.pair == nil || !t.pair.members {
		return "", fmt.Errorf("memory: %s is not a member another one can remove", node)
	}
	id, err := t.pair.Remove(node, func() error { return t.StopNode(ctx, node) })
	if errors.Is(err, errMemberOut) {
		return "", fmt.Errorf("removing %s: %w: %w", node, nemesis.ErrRefusedNow, err)
	}
	return id, err
}

// AddMember implements nemesis.MemberReplacer: the replica catches up from
// the other (unless rejoin-empty skips it), joins the pair, and is started;
// it returns once it serves.
func (t *Target) AddMember(ctx context.Context, node string) (string, error) {
	if t.pair == nil || !t.pair.members {
		return "", fmt.Errorf("memory: %s is not a member another one can add", node)
	}
	return t.pair.Add(node, func() error { return t.StopNode(ctx, node) },
		func() error { return t.StartNode(ctx, node, false) })
}

// SetClockOffset implements nodes.ClockRunner: the node's injectable clock.
func (n *Node) SetClockOffset(offset time.Duration) error {
	c := n.Clock()
	if c == nil {
		return fmt.Errorf("memory: node %s has no settable clock", n.Name())
	}
	c.Set(offset)
	return nil
}
