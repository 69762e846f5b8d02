package nemesis

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/fencecheck/fencecheck/history"
	"github.com/fencecheck/fencecheck/nemesis/lazyfs"
)

// disk makes a node's disk slow (every fsync takes longer: disk-slow) or
// full (ENOSPC for what needs new space: disk-full) on the lazyfs layer,
// until the fault ends; disk-corrupt cuts the node's power, damages one
// durable file of its disk (a bit flipped, or the file cut short, as
// Jepsen's file nemesis does) and starts it again on that disk when the
// fault ends. A full disk and a corrupted one can stop a correct system for
// good (etcd's NOSPACE alarm stays raised until disarmed by hand; a
// checksummed store refuses to start), so "all" leaves them out.
type disk struct{ kind string }

// Names of the disk nemeses (their modes are their params'), and the modes
// of disk-slow and disk-full.
const (
	DiskSlowName = "disk-slow"
	DiskFullName = "disk-full"
	DiskCorrupt  = "disk-corrupt"

	DiskSlow = "slow-fsync"
	DiskFull = "full"
)

// diskFault is a disk plan's parameters.
type diskFault struct {
	Mode string `json:"mode"`
	// FsyncDelayMS is slow-fsync's added latency per fsync.
	FsyncDelayMS int64 `json:"fsync_delay_ms,omitempty"`
	// Seed picks a corruption's file and offset.
	Seed uint64 `json:"seed,omitempty"`
}

func (d disk) Name() string { return d.kind }

func (d disk) OptInOnly() bool { return d.kind != DiskSlowName }

// Effects: a corrupted disk loses state; a slow or full one delays what
// waits for it, and a full one fails the writes.
func (d disk) Effects() []Effect {
	switch d.kind {
	case DiskCorrupt:
		return []Effect{LosesState}
	case DiskFullName:
		return []Effect{Delays, FailsWrites}
	}
	return []Effect{Delays}
}

func (disk) NeedsDiskLayer() bool { return true }

func (disk) Params() any { return &diskFault{} }

// Timing: as restart's for a corruption (the node is down briefly); a slow
// or full disk lasts the default fault period.
func (d disk) Timing(env *Env) Timing {
	if d.kind == DiskCorrupt {
		return restart{}.Timing(env)
	}
	return DefaultTiming
}

func diskNodes(env *Env) []Node {
	if df, ok := env.Target.(DiskFaulter); ok {
		return nodesNamed(env, df.DiskNodes())
	}
	return nil
}

func (d disk) Applicable(env *Env) (bool, string) {
	if _, ok := env.Target.(DiskFaulter); !ok {
		return false, "the target keeps no node's data on a layer that can be made slow, full or corrupt"
	}
	if d.kind == DiskCorrupt {
		if ok, why := (powerLoss{}).Applicable(env); !ok {
			return false, why
		}
	}
	if len(diskNodes(env)) == 0 {
		return false, "no node's data is on the lazyfs layer on this machine"
	}
	return true, ""
}

func (d disk) Draw(ctx context.Context, env *Env, rng *rand.Rand) (Plan, error) {
	if d.kind == DiskCorrupt {
		node, err := pickFree(ctx, env, rng, diskNodes(env))
		if err != nil {
			return Plan{}, err
		}
		mode := []string{lazyfs.BitFlip, lazyfs.Truncate}[rng.IntN(2)]
		return Plan{Nodes: []string{node}, TakesOver: true, Outage: true, Params: &diskFault{Mode: mode, Seed: rng.Uint64()}}, nil
	}
	// A slow or full disk does not take its node over, but it picks
	// among the nodes no other fault holds: one that does (a cut that
	// needs its two nodes answering in time, a frozen node) is waited for.
	node, err := pickFree(ctx, env, rng, diskNodes(env))
	if err != nil {
		return Plan{}, err
	}
	if d.kind == DiskSlowName {
		return Plan{Nodes: []string{node}, Params: &diskFault{Mode: DiskSlow, FsyncDelayMS: 20 + rng.Int64N(181)}}, nil
	}
	// A full disk keeps the node from committing: an outage.
	return Plan{Nodes: []string{node}, Outage: true, Params: &diskFault{Mode: DiskFull}}, nil
}

func (d disk) Start(ctx context.Context, env *Env, p Plan) (*Fault, error) {
	if err := d.CheckPlan(env, p); err != nil {
		return nil, err
	}
	params, _ := paramsOf[diskFault](p)
	df := env.Target.(DiskFaulter)
	node := p.Nodes[0]
	details := map[string]any{history.ExtraMode: params.Mode}
	if d.kind == DiskCorrupt {
		pc := env.Target.(PowerCutter)
		rs := env.Target.(Restarter)
		loss, err := pc.CutPower(ctx, node)
		if err != nil {
			return nil, applyFailed(params.Mode, p.Nodes, err)
		}
		details["lost_files"], details["lost_entries"] = loss.Files, loss.Entries
		c, err := df.CorruptDisk(ctx, node, lazyfs.Corruption{Mode: params.Mode, Seed: params.Seed})
		if err != nil {
			// The node is down: it starts again whatever happened.
			startedAgain(ctx, env, rs, node, false)
			return nil, applyFailed(params.Mode, p.Nodes, err)
		}
		details["file"], details["offset"], details["size"] = c.File, c.Offset, c.Size
		return &Fault{Nodes: p.Nodes, Details: details,
			Stop: func(ctx context.Context) error { return startedAgain(ctx, env, rs, node, false) }}, nil
	}
	f := lazyfs.Faults{Full: params.Mode == DiskFull, FsyncDelay: time.Duration(params.FsyncDelayMS) * time.Millisecond}
	if params.Mode == DiskSlow {
		details["fsync_delay_ms"] = params.FsyncDelayMS
	}
	if err := df.SetDiskFaults(ctx, node, f); err != nil {
		return nil, applyFailed(params.Mode, p.Nodes, err)
	}
	return &Fault{Nodes: p.Nodes, Details: details,
		Stop: func(ctx context.Context) error { return df.SetDiskFaults(ctx, node, lazyfs.Faults{}) }}, nil
}

// Heal: every disk healthy again (a slow or full disk left by a fault that
// could not be stopped).
func (d disk) Heal(ctx context.Context, env *Env) error {
	if d.kind == DiskCorrupt {
		return nil
	}
	df, ok := env.Target.(DiskFaulter)
	if !ok {
		return nil
	}
	var errs []error
	for _, n := range df.DiskNodes() {
		errs = append(errs, df.SetDiskFaults(ctx, n, lazyfs.Faults{}))
	}
	return errors.Join(errs...)
}

func (d disk) CheckPlan(env *Env, p Plan) error {
	if len(p.Nodes) != 1 {
		return errors.New("a disk fault acts on exactly one node")
	}
	params, err := paramsOf[diskFault](p)
	if err != nil {
		return err
	}
	modes := map[string][]string{DiskSlowName: {DiskSlow}, DiskFullName: {DiskFull}, DiskCorrupt: {lazyfs.BitFlip, lazyfs.Truncate}}[d.kind]
	if !slices.Contains(modes, params.Mode) {
		return fmt.Errorf("%s's mode is one of %v, not %q", d.Name(), modes, params.Mode)
	}
	if params.FsyncDelayMS < 0 {
		return errors.New("a slow disk's delay is not negative")
	}
	if !hasNode(diskNodes(env), p.Nodes[0]) {
		return fmt.Errorf("node %s's data is not on the lazyfs layer on this machine", p.Nodes[0])
	}
	if d.kind == DiskCorrupt {
		if _, ok := env.Target.(Restarter); !ok {
			return errors.New("the target's nodes cannot be started again after a corruption")
		}
		if _, ok := env.Target.(PowerCutter); !ok {
			return errors.New("the target's nodes cannot lose power")
		}
	}
	return nil
}
