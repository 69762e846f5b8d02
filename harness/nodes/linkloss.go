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
func (c *Cluster) LossNodes() []string { return c.nodesWhere(lossWhy) }

// SetLinkLoss implements nemesis.LinkLosser: each node a loses percent
// percent of the packets it sends to the nodes loss[a] names, at random
// (rules on a's side only: a link lossy both ways has a loss each way). It
// replaces every earlier loss, and leaves the cuts as they are; an empty
// loss heals.
func (c *Cluster) SetLinkLoss(ctx context.Context, loss map[string][]string, percent int) error {
	return c.setShare(ctx, loss, percent, lossShare)
}

// shareFault is a link fault on a share of a node's packets (a loss, a
// duplication): which nodes can take it, and how their driver sets it on
// one node and lifts every one it made.
type shareFault struct {
	what string // for errors: "lost", "sent twice"
	why  func(*member) string
	set  func(ctx context.Context, m *member, peers []*member, percent int) error
	heal func(ctx context.Context, d driver) error // nil error for a driver without it
}

var lossShare = shareFault{what: "lost", why: lossWhy,
	set: func(ctx context.Context, m *member, peers []*member, percent int) error {
		return m.drv.(loser).lose(ctx, m, peers, percent)
	},
	heal: func(ctx context.Context, d driver) error {
		if l, ok := d.(loser); ok {
			return l.healLoss(ctx)
		}
		return nil
	}}

var dupShare = shareFault{what: "sent twice", why: dupWhy,
	set: func(ctx context.Context, m *member, peers []*member, percent int) error {
		return m.drv.(duper).dup(ctx, m, peers, percent)
	},
	heal: func(ctx context.Context, d driver) error {
		if dd, ok := d.(duper); ok {
			return dd.healDup(ctx)
		}
		return nil
	}}

// nodesWhere are the nodes why has nothing against, in table order.
func (c *Cluster) nodesWhere(why func(*member) string) []string {
	var out []string
	for _, m := range c.members {
		if why(m) == "" {
			out = append(out, m.Name)
		}
	}
	return out
}

// setShare replaces every earlier fault of kind f with links (links[a]: the
// nodes a's packets to are affected) on percent percent of the packets; an
// empty one heals.
func (c *Cluster) setShare(ctx context.Context, links map[string][]string, percent int, f shareFault) error {
	if percent < 0 || percent > 100 {
		return fmt.Errorf("%d%% of packets %s is not a share", percent, f.what)
	}
	peers, err := c.linkPeers(links, f.why)
	if err != nil {
		return err
	}
	if err := c.healShare(ctx, f); err != nil {
		return err
	}
	if percent == 0 {
		return nil
	}
	for _, m := range c.members {
		if len(peers[m.Name]) == 0 {
			continue
		}
		if err := f.set(ctx, m, peers[m.Name], percent); err != nil {
			return err
		}
	}
	return nil
}

// healShare lifts every fault of kind f.
func (c *Cluster) healShare(ctx context.Context, f shareFault) error {
	if _, err := c.running(); err != nil {
		return err
	}
	var errs []error
	for _, d := range []driver{c.ctr, c.proc, c.srv, c.ssh} {
		errs = append(errs, f.heal(ctx, d))
	}
	return errors.Join(errs...)
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
func (c *Cluster) HealLinkLoss(ctx context.Context) error { return c.healShare(ctx, lossShare) }

func (d *containers) loseWhy(*member) string { return "" }

// lose makes the node lose percent percent of what it sends to peers, with
// a table in its own network namespace (re-applied when it starts again).
func (d *containers) lose(ctx context.Context, m *member, peers []*member, percent int) error {
	return d.rt.SetLoss(ctx, m.Name, docker.Loss{Peers: hostsOf(peers), Percent: percent})
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
	return d.shareOn(ctx, hostagent.OpLose, m, peers, percent)
}

// healLoss lifts every host's loss.
func (d *hosts) healLoss(ctx context.Context) error { return d.shareOff(ctx, hostagent.OpLose) }

// shareOn asks m's host agent for a share fault (op) on its packets to the
// peers' hosts.
func (d *hosts) shareOn(ctx context.Context, op string, m *member, peers []*member, percent int) error {
	ips, err := d.peerIPs(ctx, m, peers)
	if err != nil {
		return err
	}
	_, err = sshOf(m).agent.call(ctx, hostagent.Request{Op: op, Peers: ips, Percent: percent})
	return err
}

// shareOff lifts the share fault op on every host that can have one.
func (d *hosts) shareOff(ctx context.Context, op string) error {
	var errs []error
	for _, a := range d.agentsNow() {
		if a.hello.NetfilterWhy != "" {
			continue
		}
		_, err := a.call(ctx, hostagent.Request{Op: op})
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
func (c *Cluster) DupNodes() []string { return c.nodesWhere(dupWhy) }

// SetLinkDup implements nemesis.LinkDuplicator: each node a sends percent
// percent of its packets to the nodes dup[a] names twice, at random. It
// replaces every earlier duplication, and leaves the other link faults as
// they are; an empty one heals.
func (c *Cluster) SetLinkDup(ctx context.Context, dup map[string][]string, percent int) error {
	return c.setShare(ctx, dup, percent, dupShare)
}

// HealLinkDup lifts every duplication.
func (c *Cluster) HealLinkDup(ctx context.Context) error { return c.healShare(ctx, dupShare) }

func (d *containers) dup(ctx context.Context, m *member, peers []*member, percent int) error {
	return d.rt.SetDup(ctx, m.Name, docker.Loss{Peers: hostsOf(peers), Percent: percent})
}

func (d *containers) healDup(ctx context.Context) error {
	if d.rt == nil {
		return nil
	}
	return d.rt.HealDupAll(ctx)
}

func (d *hosts) dup(ctx context.Context, m *member, peers []*member, percent int) error {
	return d.shareOn(ctx, hostagent.OpDup, m, peers, percent)
}

func (d *hosts) healDup(ctx context.Context) error { return d.shareOff(ctx, hostagent.OpDup) }

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

// hostsOf are the peers' addresses on the run's network.
func hostsOf(peers []*member) []string {
	out := make([]string, len(peers))
	for i, p := range peers {
		out[i] = p.host
	}
	return out
}
