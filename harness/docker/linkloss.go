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
type Loss struct {
	Peers   []string
	Percent int
}

func (l Loss) empty() bool { return len(l.Peers) == 0 || l.Percent <= 0 }

// SetLoss makes node lose exactly l (replacing its earlier loss; an empty
// one heals). Start re-applies it after a restart, as it does a cut.
func (r *Runtime) SetLoss(ctx context.Context, node string, l Loss) error {
	l = Loss{Peers: sortedIPs(l.Peers), Percent: l.Percent}
	r.mu.Lock()
	if r.lossy == nil {
		r.lossy = map[string]Loss{}
	}
	if l.empty() {
		delete(r.lossy, node)
	} else {
		r.lossy[node] = l
	}
	r.mu.Unlock()
	return r.applyLoss(ctx, node, l)
}

// LossOf returns what node currently loses.
func (r *Runtime) LossOf(node string) Loss {
	r.mu.Lock()
	defer r.mu.Unlock()
	l := r.lossy[node]
	return Loss{Peers: slices.Clone(l.Peers), Percent: l.Percent}
}

// HealLossAll heals every node's loss.
func (r *Runtime) HealLossAll(ctx context.Context) error {
	r.mu.Lock()
	var nodes []string
	for n := range r.lossy {
		nodes = append(nodes, n)
	}
	r.mu.Unlock()
	var firstErr error
	for _, n := range nodes {
		if err := r.SetLoss(ctx, n, Loss{}); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	return firstErr
}

func (r *Runtime) reapplyLoss(ctx context.Context, node string) error {
	l := r.LossOf(node)
	if l.empty() {
		return nil
	}
	return r.applyLoss(ctx, node, l)
}

// applyLoss sets node's loss to exactly l, by the partitions' path: from
// this machine (nftables through netlink, in the namespace of the node's
// host pid) or through its netcut helper.
func (r *Runtime) applyLoss(ctx context.Context, node string, l Loss) error {
	c, st, err := r.inspect(ctx, node)
	if err != nil {
		return err
	}
	return onTheNodesProcess(st, func(st *container.State) error { return r.lossNamespace(ctx, node, c, st, l) },
		func() (*container.State, error) { return r.State(ctx, node) }, hostProcessGone)
}

func (r *Runtime) lossNamespace(ctx context.Context, node string, c *Container, st *container.State, l Loss) error {
	if r.faultPath(faultPartition, c, st.Pid) == PathAPI {
		if l.empty() && !r.joined(ImageNetcut, node, c, st.StartedAt) {
			return nil
		}
		h, err := r.helperFor(ctx, ImageNetcut, node, c, st.StartedAt)
		if err != nil {
			return fmt.Errorf("link loss on %s: %w", node, err)
		}
		ans, err := h.ask(ctx, netcut.LossCommand(l.Percent, l.Peers))
		if err != nil {
			return fmt.Errorf("link loss on %s: %w", node, err)
		}
		if want := netcut.LossCounts(len(l.Peers), l.Percent); ans != want {
			return fmt.Errorf("link loss on %s: the helper answered %q, want %q", node, ans, want)
		}
		return nil
	}
	if err := hostLoss(st.Pid, l); err != nil {
		return fmt.Errorf("link loss on %s: %w", node, err)
	}
	return nil
}

// hostLoss programs the loss table in the network namespace of host pid.
func hostLoss(pid int, l Loss) error {
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
	return netcut.SetLossIn(conn, netcut.LossTable, netcut.Loss{Peers: peers, Percent: l.Percent})
}
