// Package nemesis injects faults into a run: it schedules them from a seed,
// records every start and stop in the history, and heals everything at the
// end. Targets offer what they can suffer through the small capability
// interfaces below; a nemesis that finds none reports itself not applicable.
package nemesis

import (
	"context"
	"slices"
	"time"

	"github.com/fencecheck/fencecheck/nemesis/lazyfs"
)

// Node is one process of a target that faults can hit.
type Node struct {
	Name string
	// Role is what the node does: "reference", "etcd", "adapter", "redis",
	// "issuer", "resource", ...
	Role string
	// Stateless says the node keeps no state of its own (an adapter in
	// front of a store): restarting it tests little, so restart prefers the
	// nodes that hold state.
	Stateless bool
}

// Cluster lists a target's nodes.
type Cluster interface {
	Nodes() []Node
}

// nodesOf lists env's target's nodes (none without a target).
func nodesOf(env *Env) []Node {
	if env.Target == nil {
		return nil
	}
	return env.Target.Nodes()
}

// nodesNamed are the target's nodes among names, in the order of Nodes.
func nodesNamed(env *Env, names []string) []Node {
	var out []Node
	for _, n := range nodesOf(env) {
		if slices.Contains(names, n.Name) {
			out = append(out, n)
		}
	}
	return out
}

// Leaderer is a cluster that can name its current leader (etcd).
type Leaderer interface {
	Leader(ctx context.Context) (string, error)
}

// Pauser freezes and thaws a node (freezer cgroup, SIGSTOP, or an in-process
// stall).
type Pauser interface {
	PauseNode(ctx context.Context, node string) error
	ResumeNode(ctx context.Context, node string) error
}

// Restarter kills a node hard (kill -9) and starts it again, with its data
// kept, or wiped when wipe is true. StartNode on a node that already runs
// (an earlier start that started it but then failed, retried by the final
// heal) only waits for it to answer: it never kills it.
type Restarter interface {
	KillNode(ctx context.Context, node string) error
	StartNode(ctx context.Context, node string, wipe bool) error
}

// Partitioner cuts the network between groups of nodes; nodes in no group
// keep full connectivity. Heal removes every cut it made. PartitionNodes
// are the nodes a group may name (those whose links the target can cut:
// containers, not host processes), in the order of Nodes.
type Partitioner interface {
	PartitionNodes() []string
	Partition(ctx context.Context, groups [][]string) error
	HealPartition(ctx context.Context) error
}

// Grudger is a Partitioner that also cuts one way: grudge[a] names the
// nodes a cannot reach. A grudge each way is a cut both ways; a grudge one
// way drops the connections a opens to b while b's connections to a carry
// on (for TCP a one-way cut is by connection: dropping every packet one way
// would kill b's connections too, whose handshakes need a's answers). The
// nodes are those of PartitionNodes; Grudge replaces every earlier cut,
// and HealPartition lifts it.
type Grudger interface {
	Partitioner
	Grudge(ctx context.Context, grudge map[string][]string) error
}

// LinkLosser loses a share of the packets on the links between its nodes,
// each packet drawn at random (nftables' `numgen random`), apart from any
// cut: loss[a] names the nodes a loses percent percent of its packets to
// (rules on a's side: a link lossy both ways loses percent each way).
// SetLinkLoss replaces every earlier loss and leaves the partitions as they
// are; an empty loss heals. The nodes are those of LossNodes.
type LinkLosser interface {
	LossNodes() []string
	SetLinkLoss(ctx context.Context, loss map[string][]string, percent int) error
}

// LinkDuplicator sends a share of the packets on the links between its
// nodes twice, each packet drawn at random, apart from any other link
// fault: dup[a] names the nodes a sends percent percent of its packets to
// twice. SetLinkDup replaces every earlier duplication; an empty one heals.
// The nodes are those of DupNodes.
type LinkDuplicator interface {
	DupNodes() []string
	SetLinkDup(ctx context.Context, dup map[string][]string, percent int) error
}

// LinkDelayer holds back the packets on the links between its nodes, apart
// from any cut or loss: what a sends to the nodes delay[a] names waits mean
// ± jitter (uniform, each packet drawn: jitter over the gap between two
// packets reorders them). SetLinkDelay replaces every earlier delay; an
// empty delay heals. The nodes are those of DelayNodes.
type LinkDelayer interface {
	DelayNodes() []string
	SetLinkDelay(ctx context.Context, delay map[string][]string, mean, jitter time.Duration) error
}

// ClockSkewer shifts a node's wall clock by offset relative to real time
// (0 resets it). Targets whose nodes cannot be skewed leave those nodes out of
// ClockNodes.
type ClockSkewer interface {
	ClockNodes() []string
	SetClockOffset(ctx context.Context, node string, offset time.Duration) error
}

// ClockExplainer says, for the report, why nodes of a ClockSkewer are left
// out of ClockNodes (no ptrace permission, an engine whose processes this
// machine cannot see, a node that opted out), by node.
type ClockExplainer interface {
	ClockUnreachable() map[string]string
}

// HolderPauser is the workload's side of the client pause, the seeds'
// scenario on purpose: the next n clients that acquire a lock (each on a
// lock no other paused holder has) stall for d before they write with their
// tokens, as a GC pause would make them; while each stalls, another client
// takes its lock once the lease ran out and writes, so the first one wakes
// with a token older than one already granted. done is closed once n
// holders were paused and each woke and wrote (or the run ended); drop
// gives up on the holders not reached yet, after which done closes once
// those already paused are done.
//
// With idle > 0 the taker releases right after its write and the holder
// sleeps idle more: the key sits idle until the stale write (a resource that
// forgets an idle key's high-water mark, or forgets it at a restart meanwhile,
// then accepts it); with 0 the holder wakes within a quarter lease, while
// the taker still holds the lock.
type HolderPauser interface {
	PauseHolders(n int, d, idle time.Duration) (done <-chan struct{}, drop func())
	// MaxPaused is how many holders can be paused at once (one per lock).
	MaxPaused() int
	// Lease is what the run learned of the system's leases: the longest
	// lease an acquire answer said was granted (its ttl_ms; 0 before any),
	// and how late after a lease's end another client got the lock at most
	// (the system's expiry granularity). A pause must outlast both.
	Lease() (granted, late time.Duration)
}

// Stragglers is the workload's side of a restart (an optional extra of
// Env.Holders): once a node is back from a restart or a power loss,
// AfterRestart sends writes with tokens older than the high-water marks the
// resource had accepted before it, as an expired holder's request held up
// across the restart would. A resource that forgets its marks on a restart
// accepts them; nothing else in the traffic shows that reliably, since the
// stale write must come after the restart and before any newer one.
type Stragglers interface {
	AfterRestart(node string)
}

// CalmFollower is the workload's side of the guided schedule's calm phases
// (an optional extra of Env.Holders). FollowCalm, called before the main
// phase, says calm phases will come; Calm says one began and lasts until
// then. The idle probes then leave a key and its lock alone inside a calm
// phase, when no fault touches a node, instead of at times of their own
// that a fault on the node nearly always spoils: a server that rebuilds
// its idle timers when it starts shows an idle-time flaw only in an idle
// period it lived through.
type CalmFollower interface {
	FollowCalm()
	Calm(until time.Time)
	// CalmNeeded is until when the probes' rounds begun in the current
	// calm phase need it (their late writes and new grants): the guide
	// holds the phase on that long, within bounds.
	CalmNeeded() time.Time
}

// startedAgain restarts node, then tells the workload's stragglers.
func startedAgain(ctx context.Context, env *Env, rs Restarter, node string, wipe bool) error {
	if err := rs.StartNode(ctx, node, wipe); err != nil {
		return err
	}
	if s, ok := env.Holders.(Stragglers); ok {
		s.AfterRestart(node)
	}
	return nil
}

// PowerCutter is a target whose nodes keep their data on a layer that can
// lose power (package lazyfs): CutPower kills a node hard and drops
// everything it wrote that was not made durable (data not fsynced, folder
// entries whose folder was not fsynced), and reports what was dropped;
// Restarter.StartNode brings the node back on what survived.
type PowerCutter interface {
	PowerNodes() []string
	CutPower(ctx context.Context, node string) (lazyfs.Loss, error)
}

// DurabilityProber says what a node's layer holds that a power loss would
// drop now (written, not yet fsynced): where an acknowledged-before-durable
// bug keeps what it answered. A power loss of a node whose layer holds
// nothing unsynced tests nothing.
type DurabilityProber interface {
	UnsyncedWrites(ctx context.Context, node string) (lazyfs.Loss, error)
}

// FsyncCutter is a PowerCutter whose layer can take the power at a node's
// next fsync (lazyfs.Mount.ArmCut): ArmPowerCut arms it for window, and the
// CutPower that follows drops what that fsync was to make durable
// (Loss.AtFsync says whether one came). A cut sent from outside lands
// milliseconds after an acknowledgement, past the fsync a system that
// answers first makes right after; armed, it lands on that fsync.
type FsyncCutter interface {
	ArmPowerCut(ctx context.Context, node string, window time.Duration) error
}

// CrashStater is a PowerCutter that can leave part of what was not made
// durable, as a disk does (lazyfs.CrashModes: pages written back, writes
// torn): CutPowerAs is CutPower in crash state cs.
type CrashStater interface {
	// CrashStateNodes are the nodes whose layer can.
	CrashStateNodes() []string
	CutPowerAs(ctx context.Context, node string, cs lazyfs.CrashState) (lazyfs.Loss, error)
}

// DiskFaulter is a target whose nodes' data is on a layer that can be made
// slow or full, or corrupted (lazyfs.Faults, lazyfs.Corruption), on the
// DiskNodes.
type DiskFaulter interface {
	DiskNodes() []string
	SetDiskFaults(ctx context.Context, node string, f lazyfs.Faults) error
	CorruptDisk(ctx context.Context, node string, c lazyfs.Corruption) (lazyfs.Corrupted, error)
}

// LogPather is a target that says where a node keeps its log: the paths,
// relative to its data folder on the layer, whose fsync makes a write it
// answers durable (a write-ahead log), beside state applied from it and
// committed on its own. A power cut on an acknowledgement slows only those
// fsyncs: a slowed commit of the rest holds back the answers that wait for
// it until the log's fsync has ended (etcd v3.5.0's apply waits for its
// backend's commit).
type LogPather interface {
	LogPaths(node string) []string
}

// PowerExplainer says, for the report, why nodes are left out of
// PowerNodes (no /dev/fuse, an engine on another machine), by node.
type PowerExplainer interface {
	PowerUnreachable() map[string]string
}

// DiskLayered is a nemesis that needs the targets' data on the lazyfs layer:
// the harness asks a target to mount it only when such a nemesis was named,
// since the layer changes the I/O path of the system under test.
type DiskLayered interface{ NeedsDiskLayer() bool }
