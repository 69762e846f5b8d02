package nodes

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencecheck/fencecheck/nemesis/lazyfs"
	"github.com/fencecheck/fencecheck/nemesis/timewarp"
)

// The nemesis capabilities, each once for every kind: the node's driver
// does what its kind needs.

// PauseNode implements nemesis.Pauser: the freezer cgroup of a container,
// SIGSTOP to a process group, a request stall in process.
func (c *Cluster) PauseNode(ctx context.Context, name string) error {
	m, err := c.startedNode(name)
	if err != nil {
		return err
	}
	return m.drv.pause(ctx, m)
}

// ResumeNode implements nemesis.Pauser.
func (c *Cluster) ResumeNode(ctx context.Context, name string) error {
	m, err := c.startedNode(name)
	if err != nil {
		return err
	}
	return m.drv.resume(ctx, m)
}

// KillNode implements nemesis.Restarter: kill -9 (every process of the
// container or the group at once), no chance to flush.
func (c *Cluster) KillNode(ctx context.Context, name string) error {
	m, err := c.startedNode(name)
	if err != nil {
		return err
	}
	return m.drv.kill(ctx, m)
}

// StopNode kills a container node unless it already stopped (a member a
// cluster removed stops itself once it learns it was removed).
func (c *Cluster) StopNode(ctx context.Context, name string) error {
	err := c.KillNode(ctx, name)
	if err == nil {
		return nil
	}
	if rt := c.Runtime(); rt != nil {
		if st, serr := rt.State(ctx, name); serr == nil && !st.Running {
			return nil
		}
	}
	return err
}

// StartNode implements nemesis.Restarter: the same command line, ports and
// data folder, or an emptied data folder (with its files written again)
// when wipe is set. It returns once the node answers its health, unless
// the node answers only in a quorum (a partition may keep it out). A node
// that already runs (an earlier start that got it running, then failed,
// retried by the final heal) is only waited for: never wiped or restarted.
func (c *Cluster) StartNode(ctx context.Context, name string, wipeData bool) error {
	m, err := c.startedNode(name)
	if err != nil {
		return err
	}
	running, err := m.drv.running(ctx, m)
	if err != nil {
		return err
	}
	if !running {
		if wipeData && m.hasData() {
			if err := m.drv.wipe(ctx, m); err != nil {
				return fmt.Errorf("wiping %s: %w", name, err)
			}
		}
		if err := m.drv.start(ctx, m); err != nil {
			return err
		}
	}
	if m.Health.Quorum {
		return nil
	}
	if err := c.waitHealthy(ctx, []*member{m}, 0); err != nil {
		return err
	}
	return m.drv.afterStart(m)
}

// PowerNodes implements nemesis.PowerCutter: the nodes whose data is on the
// lazyfs layer.
func (c *Cluster) PowerNodes() []string {
	var out []string
	for _, m := range c.members {
		if m.disk != nil {
			out = append(out, m.Name)
		}
	}
	return out
}

// PowerUnreachable implements nemesis.PowerExplainer.
func (c *Cluster) PowerUnreachable() map[string]string {
	out := map[string]string{}
	for _, m := range c.members {
		switch {
		case m.disk != nil:
		case m.Kind() == KindURL:
			out[m.Name] = "a url node is not started by fencecheck"
		case m.diskWhy != "":
			out[m.Name] = m.diskWhy
		default:
			out[m.Name] = "its data is not on the lazyfs layer (the run did not name power-loss)"
		}
	}
	return out
}

// CutPower implements nemesis.PowerCutter: the node is killed, then what
// it never made durable is dropped; StartNode brings it back on what
// survived.
func (c *Cluster) CutPower(ctx context.Context, name string) (lazyfs.Loss, error) {
	return c.CutPowerAs(ctx, name, lazyfs.CrashState{})
}

// CutPowerAs implements nemesis.CrashStater: CutPower that leaves what the
// crash state chooses of the unsynced writes (lazyfs.CrashModes).
func (c *Cluster) CutPowerAs(ctx context.Context, name string, cs lazyfs.CrashState) (lazyfs.Loss, error) {
	if err := cs.Check(); err != nil {
		return lazyfs.Loss{}, err
	}
	m, err := c.startedNode(name)
	if err != nil {
		return lazyfs.Loss{}, err
	}
	if m.disk == nil {
		return lazyfs.Loss{}, fmt.Errorf("node %s's data is not on the lazyfs layer", name)
	}
	if err := m.drv.kill(ctx, m); err != nil {
		return lazyfs.Loss{}, err
	}
	if cs.Mode == "" || cs.Mode == lazyfs.LoseAll {
		return m.disk.PowerLoss()
	}
	cd, ok := m.disk.(crashDisk)
	if !ok {
		return lazyfs.Loss{}, fmt.Errorf("node %s's layer leaves no partial crash state (%s)", name, cs.Mode)
	}
	return cd.PowerLossAs(cs)
}

// pendingDisk is a layer that says what a power loss would drop now.
type pendingDisk interface {
	Pending() (lazyfs.Loss, error)
}

// UnsyncedWrites implements nemesis.DurabilityProber: what node's layer
// holds that a power loss would drop now.
func (c *Cluster) UnsyncedWrites(_ context.Context, name string) (lazyfs.Loss, error) {
	m, err := c.startedNode(name)
	if err != nil {
		return lazyfs.Loss{}, err
	}
	d, ok := m.disk.(pendingDisk)
	if !ok {
		return lazyfs.Loss{}, fmt.Errorf("node %s's data is not on a lazyfs layer", name)
	}
	return d.Pending()
}

// cutDisk is a layer that can take the power at the next fsync.
type cutDisk interface {
	ArmCut(window time.Duration) error
}

// ArmPowerCut implements nemesis.FsyncCutter: node's layer takes the power
// at its next fsync within window; CutPower follows.
func (c *Cluster) ArmPowerCut(_ context.Context, name string, window time.Duration) error {
	m, err := c.startedNode(name)
	if err != nil {
		return err
	}
	d, ok := m.disk.(cutDisk)
	if !ok {
		return fmt.Errorf("node %s's data is not on a lazyfs layer", name)
	}
	return d.ArmCut(window)
}

// crashDisk is a layer that can leave part of the unsynced writes (the
// layer on this machine; a host's agent cannot yet).
type crashDisk interface {
	PowerLossAs(cs lazyfs.CrashState) (lazyfs.Loss, error)
}

// CrashStateNodes implements nemesis.CrashStater: the nodes whose layer can
// leave part of the unsynced writes.
func (c *Cluster) CrashStateNodes() []string {
	var out []string
	for _, m := range c.members {
		if _, ok := m.disk.(crashDisk); ok && m.Data.LoseAllOnly == "" {
			out = append(out, m.Name)
		}
	}
	return out
}

// PartitionNodes implements nemesis.Partitioner: the nodes whose links
// this machine can cut (containers), in table order.
func (c *Cluster) PartitionNodes() []string {
	var out []string
	for _, m := range c.members {
		if m.Kind() != KindURL && m.drv.cutWhy(m) == "" {
			out = append(out, m.Name)
		}
	}
	return out
}

// CheckGroups is the one validation of partition groups: every node named
// once, in one group, and allowed (allow returns why not). It returns each
// node's group.
func CheckGroups(groups [][]string, allow func(node string) error) (map[string]int, error) {
	group := map[string]int{}
	for i, g := range groups {
		for _, n := range g {
			if err := allow(n); err != nil {
				return nil, err
			}
			if j, dup := group[n]; dup && j != i {
				return nil, fmt.Errorf("node %s is in two partition groups", n)
			}
			group[n] = i
		}
	}
	return group, nil
}

// Partition implements nemesis.Partitioner: nodes in different groups
// cannot reach each other; nodes in no group keep full connectivity. The
// harness's clients reach nodes through published ports, which no rule
// touches.
func (c *Cluster) Partition(ctx context.Context, groups [][]string) error {
	if _, err := CheckGroups(groups, c.cuttable); err != nil {
		return err
	}
	return c.Grudge(ctx, GroupsGrudge(groups))
}

// GroupsGrudge is the grudge of a cut between groups (checked by
// CheckGroups): every node cannot reach the nodes of the other groups.
func GroupsGrudge(groups [][]string) map[string][]string {
	grudge := map[string][]string{}
	for i, g := range groups {
		for _, n := range g {
			for j, o := range groups {
				if j != i {
					grudge[n] = append(grudge[n], o...)
				}
			}
		}
	}
	return grudge
}

// cuttable says why name cannot be in a cut (nil: it can).
func (c *Cluster) cuttable(name string) error {
	m, err := c.startedNode(name)
	if err != nil {
		return err
	}
	if why := m.drv.cutWhy(m); why != "" {
		return errors.New(why)
	}
	return nil
}

// Grudge implements nemesis.Grudger: grudge[a] names the nodes a cannot
// reach. A pair with a grudge each way is cut both ways (every packet
// dropped); a grudge one way drops the connections a opens to b, with
// rules on a's side only, while b's connections to a carry on (docker.Cut
// says why a one-way cut is by connection). It replaces every earlier cut.
func (c *Cluster) Grudge(ctx context.Context, grudge map[string][]string) error {
	cannot := map[string]map[string]bool{}
	for a, bs := range grudge {
		if err := c.cuttable(a); err != nil {
			return err
		}
		for _, b := range bs {
			if b == a {
				return fmt.Errorf("node %s cannot be cut from itself", a)
			}
			if err := c.cuttable(b); err != nil {
				return err
			}
			if cannot[a] == nil {
				cannot[a] = map[string]bool{}
			}
			cannot[a][b] = true
		}
	}
	if err := c.HealPartition(ctx); err != nil {
		return err
	}
	for _, m := range c.members {
		var both, to []*member
		for _, o := range c.members {
			switch {
			case !cannot[m.Name][o.Name]:
			case cannot[o.Name][m.Name]:
				both = append(both, o)
			default:
				to = append(to, o)
			}
		}
		if len(both) == 0 && len(to) == 0 {
			continue
		}
		if err := m.drv.cut(ctx, m, both, to); err != nil {
			return err
		}
	}
	return nil
}

// HealPartition implements nemesis.Partitioner: every cut is lifted.
func (c *Cluster) HealPartition(ctx context.Context) error {
	if _, err := c.running(); err != nil {
		return err
	}
	var errs []error
	for _, d := range []driver{c.ctr, c.proc, c.srv, c.ssh} {
		errs = append(errs, d.healCuts(ctx))
	}
	return errors.Join(errs...)
}

// ClockNodes implements nemesis.ClockSkewer: every node whose clock can be
// moved and that the nemesis should aim at, in table order.
func (c *Cluster) ClockNodes() []string {
	var out []string
	for _, m := range c.members {
		if c.clockWhy(m) == "" && m.Clock.Aside == "" {
			out = append(out, m.Name)
		}
	}
	return out
}

// ClockUnreachable implements nemesis.ClockExplainer.
func (c *Cluster) ClockUnreachable() map[string]string {
	out := map[string]string{}
	for _, m := range c.members {
		if why := c.clockWhy(m); why != "" {
			out[m.Name] = why
		}
	}
	return out
}

// clockWhy says why a node's clock cannot be moved ("" when it can).
func (c *Cluster) clockWhy(m *member) string {
	switch {
	case m.Kind() == KindURL:
		return m.drv.clockReach(context.Background(), m)
	case m.Clock.Via == ClockNone && m.Clock.Why != "":
		return m.Clock.Why
	case m.Clock.Via == ClockNone:
		return "its clock cannot be moved"
	case m.Clock.Via != ClockProcesses:
		return "" // a file or an injectable clock: always in reach
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.ready {
		return "the target is not running"
	}
	return m.clockWhy
}

// SetClockOffset implements nemesis.ClockSkewer: the node's wall clock to
// offset from real time (0 heals), by the node's way (Clock.Via). A node
// started again gets the offset in force.
func (c *Cluster) SetClockOffset(ctx context.Context, name string, offset time.Duration) error {
	m, err := c.startedNode(name)
	if err != nil {
		return err
	}
	switch m.Clock.Via {
	case ClockNone:
		return fmt.Errorf("node %s: %s", name, c.clockWhy(m))
	case ClockFile, ClockSkewLibrary:
		if m.Kind() != KindSSH { // an ssh node's file is on its host
			return timewarp.SetPreloadOffset(m.clockFile(), offset)
		}
	}
	return m.drv.moveClock(ctx, m, offset)
}

// checkClocks finds, once every node answers, whether this machine can move
// the clock of each ClockProcesses node (ptrace permission; for a
// container, an engine whose processes are visible here or a helper
// container through its API), without touching the processes yet.
func (c *Cluster) checkClocks(ctx context.Context) {
	for _, m := range c.members {
		if m.Kind() == KindURL || m.Clock.Via != ClockProcesses {
			continue
		}
		if why := m.drv.clockReach(ctx, m); why != "" {
			m.clockWhy = why
			c.logf("clock faults cannot reach %s: %s", m.Name, why)
		}
	}
}

// localDisk is the layer on this machine, which has disk faults.
type localDisk interface {
	crashDisk
	SetFaults(f lazyfs.Faults) error
	Corrupt(c lazyfs.Corruption) (lazyfs.Corrupted, error)
}

// diskOf is name's layer on this machine, or why it has none.
func (c *Cluster) diskOf(name string) (localDisk, error) {
	m, err := c.startedNode(name)
	if err != nil {
		return nil, err
	}
	d, ok := m.disk.(localDisk)
	if !ok {
		return nil, fmt.Errorf("node %s's data is not on a lazyfs layer on this machine", name)
	}
	return d, nil
}

// DiskNodes implements nemesis.DiskFaulter: the nodes whose layer is on
// this machine.
func (c *Cluster) DiskNodes() []string {
	var out []string
	for _, m := range c.members {
		if _, ok := m.disk.(localDisk); ok {
			out = append(out, m.Name)
		}
	}
	return out
}

// SetDiskFaults implements nemesis.DiskFaulter: the node's disk is slow or
// full until set again (lazyfs.Faults{} heals it).
func (c *Cluster) SetDiskFaults(_ context.Context, name string, f lazyfs.Faults) error {
	d, err := c.diskOf(name)
	if err != nil {
		return err
	}
	return d.SetFaults(f)
}

// CorruptDisk implements nemesis.DiskFaulter: one durable file of the
// node's disk is damaged.
func (c *Cluster) CorruptDisk(_ context.Context, name string, co lazyfs.Corruption) (lazyfs.Corrupted, error) {
	d, err := c.diskOf(name)
	if err != nil {
		return lazyfs.Corrupted{}, err
	}
	return d.Corrupt(co)
}
