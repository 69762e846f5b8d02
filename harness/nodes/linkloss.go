package nodes

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/fencecheck/fencecheck/harness/docker"
	"github.com/fencecheck/fencecheck/nemesis"
	"github.com/fencecheck/fencecheck/nemesis/hostagent"
)

var _ nemesis.LinkLosser = (*Cluster)(nil)

// loser is a driver whose nodes can lose a share of the packets they send
// to their peers (link loss), apart from their cuts: loseWhy says why a
// node cannot ("" when it can); lose replaces the node's earlier loss (no
// peers heals it); healLoss lifts every loss the driver made.
type loser interface {
	loseWhy(m *member) string
	lose(ctx context.Context, m *member, peers []*member, percent int) error
	healLoss(ctx context.Context) error
}

// lossWhy says why the node cannot lose packets on its links ("": it can).
func lossWhy(m *member) string {
	l, ok := m.drv.(loser)
	if !ok || m.Kind() == KindURL {
		return fmt.Sprintf("node %s is a %s node: only containers and ssh hosts lose packets on their links (nftables in their own namespace)", m.Name, m.Kind())
	}
	return l.loseWhy(m)
}

// LossNodes implements nemesis.LinkLosser: the nodes whose links this
// machine can make lossy, in table order.
func (c *Cluster) LossNodes() []string {
	var out []string
	for _, m := range c.members {
		if lossWhy(m) == "" {
			out = append(out, m.Name)
		}
	}
	return out
}

// SetLinkLoss implements nemesis.LinkLosser: each node a loses percent
// percent of the packets it sends to the nodes loss[a] names, at random
// (rules on a's side only: a link lossy both ways has a loss each way). It
// replaces every earlier loss, and leaves the cuts as they are; an empty
// loss heals.
func (c *Cluster) SetLinkLoss(ctx context.Context, loss map[string][]string, percent int) error {
	if percent < 0 || percent > 100 {
		return fmt.Errorf("a loss of %d%% is not a share of packets", percent)
	}
	peers, err := c.linkPeers(loss, lossWhy)
	if err != nil {
		return err
	}
	if err := c.HealLinkLoss(ctx); err != nil {
		return err
	}
	if percent == 0 {
		return nil
	}
	for _, m := range c.members {
		if len(peers[m.Name]) == 0 {
			continue
		}
		if err := m.drv.(loser).lose(ctx, m, peers[m.Name], percent); err != nil {
			return err
		}
	}
	return nil
}

// linkPeers checks the links of a link fault (links[a]: the nodes a's
// packets to are affected) against why (why a node cannot take it) and
// returns each node's peers.
func (c *Cluster) linkPeers(links map[string][]string, why func(*member) string) (map[string][]*member, error) {
	check := func(name string) (*member, error) {
		m, err := c.startedNode(name)
		if err != nil {
			return nil, err
		}
		if w := why(m); w != "" {
			return nil, errors.New(w)
		}
		return m, nil
	}
	peers := map[string][]*member{}
	for a, bs := range links {
		if _, err := check(a); err != nil {
			return nil, err
		}
		for _, b := range bs {
			if b == a {
				return nil, fmt.Errorf("node %s has no link to itself", a)
			}
			p, err := check(b)
			if err != nil {
				return nil, err
			}
			if !slices.Contains(peers[a], p) {
				peers[a] = append(peers[a], p)
			}
		}
	}
	return peers, nil
}

// HealLinkLoss lifts every loss (the cuts stay).
func (c *Cluster) HealLinkLoss(ctx context.Context) error {
	if _, err := c.running(); err != nil {
		return err
	}
	var errs []error
	for _, d := range []driver{c.ctr, c.proc, c.srv, c.ssh} {
		if l, ok := d.(loser); ok {
			errs = append(errs, l.healLoss(ctx))
		}
	}
	return errors.Join(errs...)
}

func (d *containers) loseWhy(*member) string { return "" }

// lose makes the node lose percent percent of what it sends to peers, with
// a table in its own network namespace (re-applied when it starts again).
func (d *containers) lose(ctx context.Context, m *member, peers []*member, percent int) error {
	ips := make([]string, len(peers))
	for i, p := range peers {
		ips[i] = p.host
	}
	return d.rt.SetLoss(ctx, m.Name, docker.Loss{Peers: ips, Percent: percent})
}

func (d *containers) healLoss(ctx context.Context) error {
	if d.rt == nil {
		return nil
	}
	return d.rt.HealLossAll(ctx)
}

// loseWhy: as for a cut, the host must be able to set nftables rules, and
// the node must be the one that stands for its host (a loss is by address).
func (d *hosts) loseWhy(m *member) string { return d.cutWhy(m) }

// lose makes the host lose percent percent of what it sends to the peers'
// hosts, in the run's own loss table there.
func (d *hosts) lose(ctx context.Context, m *member, peers []*member, percent int) error {
	ips, err := d.peerIPs(ctx, m, peers)
	if err != nil {
		return err
	}
	_, err = sshOf(m).agent.call(ctx, hostagent.Request{Op: hostagent.OpLose, Peers: ips, Percent: percent})
	return err
}

// healLoss lifts every host's loss.
func (d *hosts) healLoss(ctx context.Context) error {
	var errs []error
	for _, a := range d.agentsNow() {
		if a.hello.NetfilterWhy != "" {
			continue
		}
		_, err := a.call(ctx, hostagent.Request{Op: hostagent.OpLose})
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

var _ nemesis.LinkDuplicator = (*Cluster)(nil)

// duper is a loser that can also send a share of a node's packets to its
// peers twice (link duplication), where it can lose them (loseWhy).
type duper interface {
	loser
	dup(ctx context.Context, m *member, peers []*member, percent int) error
	healDup(ctx context.Context) error
}

func dupWhy(m *member) string {
	if _, ok := m.drv.(duper); !ok {
		return fmt.Sprintf("node %s is a %s node: only containers and ssh hosts send packets twice on their links (nftables in their own namespace)", m.Name, m.Kind())
	}
	return lossWhy(m)
}

// DupNodes implements nemesis.LinkDuplicator.
func (c *Cluster) DupNodes() []string {
	var out []string
	for _, m := range c.members {
		if dupWhy(m) == "" {
			out = append(out, m.Name)
		}
	}
	return out
}

// SetLinkDup implements nemesis.LinkDuplicator: each node a sends percent
// percent of its packets to the nodes dup[a] names twice, at random. It
// replaces every earlier duplication, and leaves the other link faults as
// they are; an empty one heals.
func (c *Cluster) SetLinkDup(ctx context.Context, dup map[string][]string, percent int) error {
	if percent < 0 || percent > 100 {
		return fmt.Errorf("%d%% of packets sent twice is not a share", percent)
	}
	peers, err := c.linkPeers(dup, dupWhy)
	if err != nil {
		return err
	}
	if err := c.HealLinkDup(ctx); err != nil {
		return err
	}
	if percent == 0 {
		return nil
	}
	for _, m := range c.members {
		if len(peers[m.Name]) == 0 {
			continue
		}
		if err := m.drv.(duper).dup(ctx, m, peers[m.Name], percent); err != nil {
			return err
		}
	}
	return nil
}

// HealLinkDup lifts every duplication.
func (c *Cluster) HealLinkDup(ctx context.Context) error {
	if _, err := c.running(); err != nil {
		return err
	}
	var errs []error
	for _, d := range []driver{c.ctr, c.proc, c.srv, c.ssh} {
		if dd, ok := d.(duper); ok {
			errs = append(errs, dd.healDup(ctx))
		}
	}
	return errors.Join(errs...)
}

func (d *containers) dup(ctx context.Context, m *member, peers []*member, percent int) error {
	ips := make([]string, len(peers))
	for i, p := range peers {
		ips[i] = p.host
	}
	return d.rt.SetDup(ctx, m.Name, docker.Loss{Peers: ips, Percent: percent})
}

func (d *containers) healDup(ctx context.Context) error {
	if d.rt == nil {
		return nil
	}
	return d.rt.HealDupAll(ctx)
}

func (d *hosts) dup(ctx context.Context, m *member, peers []*member, percent int) error {
	ips, err := d.peerIPs(ctx, m, peers)
	if err != nil {
		return err
	}
	_, err = sshOf(m).agent.call(ctx, hostagent.Request{Op: hostagent.OpDup, Peers: ips, Percent: percent})
	return err
}

func (d *hosts) healDup(ctx context.Context) error {
	var errs []error
	for _, a := range d.agentsNow() {
		if a.hello.NetfilterWhy != "" {
			continue
		}
		_, err := a.call(ctx, hostagent.Request{Op: hostagent.OpDup})
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// peerIPs are the addresses of the peers' hosts, for a link fault of m's.
func (d *hosts) peerIPs(ctx context.Context, m *member, peers []*member) ([]string, error) {
	var ips []string
	for _, p := range peers {
		ip, err := resolveIPv4(ctx, p.host)
		if err != nil {
			return nil, fmt.Errorf("the link from %s to %s: %w", m.Name, p.Name, err)
		}
		if p.host == m.host {
			return nil, fmt.Errorf("nodes %s and %s share the address %s: no link between them", m.Name, p.Name, m.host)
		}
		ips = append(ips, ip)
	}
	return ips, nil
}
