package docker

import (
	"context"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/google/nftables"

	"github.com/fencecheck/fencecheck/nemesis/netcut"
)

// Delay is what one node's packets to the Peers wait: Mean ± Jitter, each
// packet drawn on its own (netcut.Delay: an NFQUEUE rule in the node's
// namespace and a Delayer in user space that lets each packet go when its
// time comes; jitter over the gap between two packets reorders them). A
// table apart from the cut's and the loss's. A link delayed both ways has
// the rule on each side.
type Delay struct {
	Peers        []string
	Mean, Jitter time.Duration
}

func (d Delay) empty() bool { return len(d.Peers) == 0 || d.Mean <= 0 }

// hostDelayer is a Delayer this process runs for a node's namespace (the
// host path): bound to the namespace of the process pid started at started,
// so a node started again gets a new one.
type hostDelayer struct {
	d       *netcut.Delayer
	pid     int
	started string
}

// SetDelay makes node's packets to l.Peers wait (replacing its earlier
// delay; an empty one heals). Start re-applies it after a restart.
func (r *Runtime) SetDelay(ctx context.Context, node string, d Delay) error {
	d = Delay{Peers: sortedIPs(d.Peers), Mean: d.Mean, Jitter: d.Jitter}
	r.delayMu.Lock()
	defer r.delayMu.Unlock()
	r.mu.Lock()
	if r.delayed == nil {
		r.delayed = map[string]Delay{}
	}
	if d.empty() {
		delete(r.delayed, node)
	} else {
		r.delayed[node] = d
	}
	r.mu.Unlock()
	return r.applyDelay(ctx, node, d)
}

// DelayOf returns what node's packets wait now.
func (r *Runtime) DelayOf(node string) Delay {
	r.mu.Lock()
	defer r.mu.Unlock()
	d := r.delayed[node]
	return Delay{Peers: slices.Clone(d.Peers), Mean: d.Mean, Jitter: d.Jitter}
}

// HealDelayAll heals every node's delay.
func (r *Runtime) HealDelayAll(ctx context.Context) error {
	r.mu.Lock()
	var nodes []string
	for n := range r.delayed {
		nodes = append(nodes, n)
	}
	for n := range r.delayers {
		if !slices.Contains(nodes, n) {
			nodes = append(nodes, n)
		}
	}
	r.mu.Unlock()
	var firstErr error
	for _, n := range nodes {
		if err := r.SetDelay(ctx, n, Delay{}); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	return firstErr
}

func (r *Runtime) reapplyDelay(ctx context.Context, node string) error {
	r.delayMu.Lock()
	defer r.delayMu.Unlock()
	d := r.DelayOf(node)
	if d.empty() {
		return nil
	}
	return r.applyDelay(ctx, node, d)
}

// applyDelay sets node's delay to exactly d, by the partitions' path.
func (r *Runtime) applyDelay(ctx context.Context, node string, d Delay) error {
	c, st, err := r.inspect(ctx, node)
	if err != nil {
		return err
	}
	if !st.Running || st.Pid == 0 {
		// No namespace: a delayer of an earlier one reads nothing.
		return r.closeDelayer(node)
	}
	return onTheNodesProcess(st, func(st *container.State) error { return r.delayNamespace(ctx, node, c, st, d) },
		func() (*container.State, error) { return r.State(ctx, node) }, hostProcessGone)
}

func (r *Runtime) delayNamespace(ctx context.Context, node string, c *Container, st *container.State, d Delay) error {
	if r.faultPath(faultPartition, c, st.Pid) == PathAPI {
		if d.empty() && !r.joined(ImageNetcut, node, c, st.StartedAt) {
			return nil
		}
		h, err := r.helperFor(ctx, ImageNetcut, node, c, st.StartedAt)
		if err != nil {
			return fmt.Errorf("link delay on %s: %w", node, err)
		}
		ans, err := h.ask(ctx, netcut.DelayCommand(d.Mean, d.Jitter, d.Peers))
		if err != nil {
			return fmt.Errorf("link delay on %s: %w", node, err)
		}
		if want := netcut.DelayCounts(len(d.Peers), d.Mean, d.Jitter); ans != want {
			return fmt.Errorf("link delay on %s: the helper answered %q, want %q", node, ans, want)
		}
		return nil
	}
	if err := r.hostDelay(node, st, d); err != nil {
		return fmt.Errorf("link delay on %s: %w", node, err)
	}
	return nil
}

// hostDelay programs the delay table in the namespace of the node's host
// pid, with a delayer of this process bound there.
func (r *Runtime) hostDelay(node string, st *container.State, d Delay) error {
	peers, err := netcut.ParsePeers(d.Peers)
	if err != nil {
		return err
	}
	r.mu.Lock()
	hd := r.delayers[node]
	r.mu.Unlock()
	if hd != nil && (hd.pid != st.Pid || hd.started != st.StartedAt) {
		// The node started anew: the old namespace is gone.
		if err := r.closeDelayer(node); err != nil {
			return err
		}
		hd = nil
	}
	ns, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", st.Pid))
	if err != nil {
		return err
	}
	defer ns.Close()
	conn, err := nftables.New(nftables.WithNetNSFd(int(ns.Fd())))
	if err != nil {
		return err
	}
	defer conn.CloseLasting()
	var dl *netcut.Delayer
	if hd != nil {
		dl = hd.d
	}
	nd := netcut.Delay{Peers: peers, Mean: d.Mean, Jitter: d.Jitter}
	if d.empty() {
		nd = netcut.Delay{}
	}
	err = netcut.SetDelay(conn, &dl, int(ns.Fd()), nd)
	r.mu.Lock()
	if r.delayers == nil {
		r.delayers = map[string]*hostDelayer{}
	}
	if dl == nil {
		delete(r.delayers, node)
	} else {
		r.delayers[node] = &hostDelayer{d: dl, pid: st.Pid, started: st.StartedAt}
	}
	r.mu.Unlock()
	return err
}

// closeDelayer closes the delayer this process runs for node, if any.
func (r *Runtime) closeDelayer(node string) error {
	r.mu.Lock()
	hd := r.delayers[node]
	delete(r.delayers, node)
	r.mu.Unlock()
	if hd == nil {
		return nil
	}
	return hd.d.Close()
}

// closeDelayers closes every delayer of this process (the run's end).
func (r *Runtime) closeDelayers() {
	r.mu.Lock()
	hds := r.delayers
	r.delayers = nil
	r.mu.Unlock()
	for _, hd := range hds {
		hd.d.Close()
	}
}
