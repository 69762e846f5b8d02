package docker

import (
	"context"
	"fmt"
	"os"
	"slices"

	"github.com/docker/docker/api/types/container"
	"github.com/google/nftables"

	"github.com/fencecheck/fencecheck/nemesis/netcut"
)

// Loss is what one node loses on its links: Percent percent of the packets
// it sends to the Peers, each drawn at random (netcut.Loss: nftables'
// `numgen random mod 100 < P drop` on the output hook of its namespace, in
// a table apart from the partition's, so a loss and a cut come and go
// independently). A link loses both ways when each side loses to the other.
// The same shape says what a node sends twice (SetDup).
type Loss struct {
	Peers   []string
	Percent int
}

func (l Loss) empty() bool { return len(l.Peers) == 0 || l.Percent <= 0 }

// share is one kind of rule on a share of a node's packets: losing them,
// or sending them twice. Each has its table, its helper command and its
// state in the runtime.
type share struct {
	what   string
	set    func(conn *nftables.Conn, table string, l netcut.Loss) error
	table  string
	cmd    func(percent int, peers []string) string
	counts func(peers, percent int) string
	state  func(r *Runtime) *map[string]Loss
}

var (
	lossShare = share{what: "link loss", set: netcut.SetLossIn, table: netcut.LossTable, cmd: netcut.LossCommand,
		counts: netcut.LossCounts, state: func(r *Runtime) *map[string]Loss { return &r.lossy }}
	dupShare = share{what: "link duplication", set: netcut.SetDupIn, table: netcut.DupTable, cmd: netcut.DupCommand,
		counts: netcut.DupCounts, state: func(r *Runtime) *map[string]Loss { return &r.duped }}
)

// SetLoss makes node lose exactly l (replacing its earlier loss; an empty
// one heals). Start re-applies it after a restart, as it does a cut.
func (r *Runtime) SetLoss(ctx context.Context, node string, l Loss) error {
	return r.setShare(ctx, lossShare, node, l)
}

// SetDup makes node send l.Percent percent of its packets to l.Peers twice
// (netcut.SetDupIn), replacing its earlier duplication; an empty one heals.
func (r *Runtime) SetDup(ctx context.Context, node string, l Loss) error {
	return r.setShare(ctx, dupShare, node, l)
}

func (r *Runtime) setShare(ctx context.Context, sh share, node string, l Loss) error {
	l = Loss{Peers: sortedIPs(l.Peers), Percent: l.Percent}
	defer r.lockRules(node)()
	r.mu.Lock()
	m := sh.state(r)
	if *m == nil {
		*m = map[string]Loss{}
	}
	if l.empty() {
		delete(*m, node)
	} else {
		(*m)[node] = l
	}
	r.mu.Unlock()
	return r.applyShare(ctx, sh, node, l)
}

// LossOf returns what node currently loses.
func (r *Runtime) LossOf(node string) Loss { return r.shareOf(lossShare, node) }

// DupOf returns what node currently sends twice.
func (r *Runtime) DupOf(node string) Loss { return r.shareOf(dupShare, node) }

func (r *Runtime) shareOf(sh share, node string) Loss {
	r.mu.Lock()
	defer r.mu.Unlock()
	l := (*sh.state(r))[node]
	return Loss{Peers: slices.Clone(l.Peers), Percent: l.Percent}
}

// HealLossAll heals every node's loss.
func (r *Runtime) HealLossAll(ctx context.Context) error { return r.healShareAll(ctx, lossShare) }

// HealDupAll heals every node's duplication.
func (r *Runtime) HealDupAll(ctx context.Context) error { return r.healShareAll(ctx, dupShare) }

func (r *Runtime) healShareAll(ctx context.Context, sh share) error {
	r.mu.Lock()
	var nodes []string
	for n := range *sh.state(r) {
		nodes = append(nodes, n)
	}
	r.mu.Unlock()
	var firstErr error
	for _, n := range nodes {
		if err := r.setShare(ctx, sh, n, Loss{}); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	return firstErr
}

// reapplyShares puts node's loss and duplication back (its start).
func (r *Runtime) reapplyShares(ctx context.Context, node string) error {
	defer r.lockRules(node)()
	for _, sh := range []share{lossShare, dupShare} {
		if l := r.shareOf(sh, node); !l.empty() {
			if err := r.applyShare(ctx, sh, node, l); err != nil {
				return err
			}
		}
	}
	return nil
}

// applyShare sets node's rule of kind sh to exactly l, by the partitions'
// path: from this machine (nftables through netlink, in the namespace of
// the node's host pid) or through its netcut helper.
func (r *Runtime) applyShare(ctx context.Context, sh share, node string, l Loss) error {
	c, st, err := r.inspect(ctx, node)
	if err != nil {
		return err
	}
	return onTheNodesProcess(st, func(st *container.State) error { return r.shareNamespace(ctx, sh, node, c, st, l) },
		func() (*container.State, error) { return r.State(ctx, node) }, hostProcessGone)
}

func (r *Runtime) shareNamespace(ctx context.Context, sh share, node string, c *Container, st *container.State, l Loss) error {
	if r.faultPath(faultPartition, c, st.Pid) == PathAPI {
		if l.empty() && !r.joined(ImageNetcut, node, c, st.StartedAt) {
			return nil
		}
		h, err := r.helperFor(ctx, ImageNetcut, node, c, st.StartedAt)
		if err != nil {
			return fmt.Errorf("%s on %s: %w", sh.what, node, err)
		}
		ans, err := h.ask(ctx, sh.cmd(l.Percent, l.Peers))
		if err != nil {
			return fmt.Errorf("%s on %s: %w", sh.what, node, err)
		}
		if want := sh.counts(len(l.Peers), l.Percent); ans != want {
			return fmt.Errorf("%s on %s: the helper answered %q, want %q", sh.what, node, ans, want)
		}
		return nil
	}
	if err := hostShare(sh, st.Pid, l); err != nil {
		return fmt.Errorf("%s on %s: %w", sh.what, node, err)
	}
	return nil
}

// hostShare programs sh's table in the network namespace of host pid.
func hostShare(sh share, pid int, l Loss) error {
	peers, err := netcut.ParsePeers(l.Peers)
	if err != nil {
		return err
	}
	ns, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", pid))
	if err != nil {
		return err
	}
	defer ns.Close()
	conn, err := nftables.New(nftables.WithNetNSFd(int(ns.Fd())))
	if err != nil {
		return err
	}
	defer conn.CloseLasting()
	if l.empty() {
		peers = nil
	}
	return sh.set(conn, sh.table, netcut.Loss{Peers: peers, Percent: l.Percent})
}
