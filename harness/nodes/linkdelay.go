package nodes

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencecheck/fencecheck/harness/docker"
	"github.com/fencecheck/fencecheck/nemesis"
	"github.com/fencecheck/fencecheck/nemesis/hostagent"
)

var _ nemesis.LinkDelayer = (*Cluster)(nil)

// delayDriver is a driver whose nodes' packets to their peers can be held
// back (link delay), apart from their cuts and losses: delayWhy says why a
// node's cannot ("" when they can); delay replaces the node's earlier
// delay (no peers heals it); healDelay lifts every delay the driver made.
type delayDriver interface {
	delayWhy(m *member) string
	delay(ctx context.Context, m *member, peers []*member, mean, jitter time.Duration) error
	healDelay(ctx context.Context) error
}

// delayWhy says why the node's links cannot be delayed ("": they can).
func delayWhy(m *member) string {
	d, ok := m.drv.(delayDriver)
	if !ok || m.Kind() == KindURL {
		return fmt.Sprintf("node %s is a %s node: only containers' and ssh hosts' links are delayed (nftables and a delayer in their own namespace)", m.Name, m.Kind())
	}
	return d.delayWhy(m)
}

// DelayNodes implements nemesis.LinkDelayer: the nodes whose links this
// machine can delay, in table order.
func (c *Cluster) DelayNodes() []string {
	var out []string
	for _, m := range c.members {
		if delayWhy(m) == "" {
			out = append(out, m.Name)
		}
	}
	return out
}

// SetLinkDelay implements nemesis.LinkDelayer: what each node a sends to
// the nodes delay[a] names waits mean ± jitter, each packet drawn (rules and
// a delayer on a's side only). It replaces every earlier delay, and leaves
// the cuts and losses as they are; an empty delay heals.
func (c *Cluster) SetLinkDelay(ctx context.Context, delay map[string][]string, mean, jitter time.Duration) error {
	if mean < 0 || jitter < 0 || jitter > mean {
		return fmt.Errorf("a delay of %v ± %v: the jitter must be at most the delay", mean, jitter)
	}
	peers, err := c.linkPeers(delay, delayWhy)
	if err != nil {
		return err
	}
	if err := c.HealLinkDelay(ctx); err != nil {
		return err
	}
	if mean == 0 {
		return nil
	}
	for _, m := range c.members {
		if len(peers[m.Name]) == 0 {
			continue
		}
		if err := m.drv.(delayDriver).delay(ctx, m, peers[m.Name], mean, jitter); err != nil {
			return err
		}
	}
	return nil
}

// HealLinkDelay lifts every delay (cuts and losses stay).
func (c *Cluster) HealLinkDelay(ctx context.Context) error {
	if _, err := c.running(); err != nil {
		return err
	}
	var errs []error
	for _, d := range []driver{c.ctr, c.proc, c.srv, c.ssh} {
		if dd, ok := d.(delayDriver); ok {
			errs = append(errs, dd.healDelay(ctx))
		}
	}
	return errors.Join(errs...)
}

func (d *containers) delayWhy(*member) string { return "" }

// delay holds what the node sends to peers, with a table and a delayer in
// its own network namespace (re-applied when it starts again).
func (d *containers) delay(ctx context.Context, m *member, peers []*member, mean, jitter time.Duration) error {
	return d.rt.SetDelay(ctx, m.Name, docker.Delay{Peers: hostsOf(peers), Mean: mean, Jitter: jitter})
}

func (d *containers) healDelay(ctx context.Context) error {
	if d.rt == nil {
		return nil
	}
	return d.rt.HealDelayAll(ctx)
}

// delayWhy: as for a cut, the host must be able to set nftables rules, and
// the node must be the one that stands for its host.
func (d *hosts) delayWhy(m *member) string { return d.cutWhy(m) }

// delay holds what the host sends to the peers' hosts, with the run's own
// delay table there and a delayer in its agent.
func (d *hosts) delay(ctx context.Context, m *member, peers []*member, mean, jitter time.Duration) error {
	ips, err := d.peerIPs(ctx, m, peers)
	if err != nil {
		return err
	}
	_, err = sshOf(m).agent.call(ctx, hostagent.Request{Op: hostagent.OpDelay, Peers: ips, Delay: mean, Jitter: jitter})
	return err
}

// healDelay lifts every host's delay.
func (d *hosts) healDelay(ctx context.Context) error {
	var errs []error
	for _, a := range d.agentsNow() {
		if a.hello.NetfilterWhy != "" {
			continue
		}
		_, err := a.call(ctx, hostagent.Request{Op: hostagent.OpDelay})
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
