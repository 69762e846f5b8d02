package nemesis

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"

	"github.com/fencecheck/fencecheck/history"
	"github.com/fencecheck/fencecheck/nemesis/lazyfs"
)

// powerLoss cuts a node's power: the node is killed hard and everything it
// wrote that was not yet durable is dropped (data not fsynced, folder
// entries whose folder was not fsynced), as a disk behind a page cache
// loses it when the power goes; the node starts again on what survived
// when the fault ends. A kill -9 (restart) keeps the page cache, so only
// this fault finds a counter or a high-water mark written without fsync.
//
// It needs the target's data on the lazyfs layer (package lazyfs), which
// the harness mounts only when power-loss may run (named, or "all" on a
// target and machine where it applies); where it cannot apply, "all"
// leaves it out as it does every nemesis that does not apply.
type powerLoss struct{}

// PowerLoss is the power-loss nemesis's name.
const PowerLoss = "power-loss"

func (powerLoss) Name() string { return PowerLoss }

// Effects: a node comes back without what it did not fsync.
func (powerLoss) Effects() []Effect { return []Effect{LosesState, LosesUnsynced} }

func (powerLoss) NeedsDiskLayer() bool { return true }

// Params: the crash state, what the disk had got of the unsynced writes
// when the power went (lazyfs.CrashModes, and the seed of its choices). A
// schedule from before crash states has none: lose-all.
func (powerLoss) Params() any { return &lazyfs.CrashState{} }

func (powerLoss) ParamsOptional() bool { return true }

// drawCrashState: every unsynced write lost half the time (the harshest
// disk, and what finds a missing fsync at once), otherwise one of the
// partial modes, where every node's layer offers them. Nodes that lose
// power together share the mode (each layer draws its own pages from the
// seed): a cluster that never fsyncs keeps, in a partial mode, what the
// disks had written back, its own bootstrap among it, and comes back
// without its latest writes rather than not at all.
func drawCrashState(env *Env, nodes []string, rng *rand.Rand) *lazyfs.CrashState {
	cs := &lazyfs.CrashState{Mode: lazyfs.LoseAll}
	if !slices.ContainsFunc(nodes, func(n string) bool { return !partialCrash(env, n) }) && rng.IntN(2) == 0 {
		modes := lazyfs.CrashModes()[1:]
		cs.Mode, cs.Seed = modes[rng.IntN(len(modes))], rng.Uint64()
	}
	return cs
}

// partialCrash says whether node's layer can leave part of the unsynced
// writes.
func partialCrash(env *Env, node string) bool {
	cs, ok := env.Target.(CrashStater)
	return ok && slices.Contains(cs.CrashStateNodes(), node)
}

// Timing: as restart's (a node is down briefly and often): what is tested
// is what the node finds on disk when it comes back.
func (powerLoss) Timing(env *Env) Timing { return restart{}.Timing(env) }

// powerNodes lists the target's nodes that can lose power, as Nodes.
func powerNodes(env *Env) []Node {
	if pc, ok := env.Target.(PowerCutter); ok {
		return nodesNamed(env, pc.PowerNodes())
	}
	return nil
}

func (powerLoss) Applicable(env *Env) (bool, string) {
	if _, ok := env.Target.(PowerCutter); !ok {
		return false, "the target keeps no node's data on a layer that can lose power"
	}
	if _, ok := env.Target.(Restarter); !ok {
		return false, "the target's nodes cannot be started again after a power loss"
	}
	if len(powerNodes(env)) == 0 {
		why := "no node's data is on the lazyfs layer"
		if pe, ok := env.Target.(PowerExplainer); ok {
			var parts []string
			for node, reason := range pe.PowerUnreachable() {
				parts = append(parts, node+": "+reason)
			}
			sort.Strings(parts)
			if len(parts) > 0 {
				why += " (" + strings.Join(parts, "; ") + ")"
			}
		}
		return false, why
	}
	return true, ""
}

func (powerLoss) Draw(ctx context.Context, env *Env, rng *rand.Rand) (Plan, error) {
	if all := togetherNodes(env); len(all) >= 2 && rng.IntN(togetherOdds) == 0 {
		return Plan{Nodes: all, TakesOver: true, Outage: true, Params: drawCrashState(env, all, rng)}, nil
	}
	node, err := pickUnsynced(ctx, env, rng, powerNodes(env))
	if err != nil {
		return Plan{}, err
	}
	return Plan{Nodes: []string{node}, TakesOver: true, Outage: true, Params: drawCrashState(env, []string{node}, rng)}, nil
}

func (powerLoss) Start(ctx context.Context, env *Env, p Plan) (*Fault, error) {
	pc, ok := env.Target.(PowerCutter)
	rs, ok2 := env.Target.(Restarter)
	if !ok || !ok2 || len(p.Nodes) == 0 {
		return nil, errors.New("a power loss acts on nodes of a target whose data is on the lazyfs layer")
	}
	cs, _ := p.Params.(*lazyfs.CrashState)
	if len(p.Nodes) > 1 {
		return cutTogether(ctx, env, pc, rs, p.Nodes, cs)
	}
	node := p.Nodes[0]
	details := map[string]any{}
	if partialState(cs) {
		details[history.ExtraMode], details["crash_seed"] = cs.Mode, cs.Seed
	}
	loss, err := cutPower(ctx, env, pc, node, cs)
	if err != nil {
		mode := ""
		if cs != nil {
			mode = cs.Mode
		}
		return nil, applyFailed(mode, []string{node}, err)
	}
	details["lost_files"], details["lost_entries"] = loss.Files, loss.Entries
	if loss.Kept > 0 {
		details["kept_pages"] = loss.Kept
	}
	return &Fault{Nodes: p.Nodes, Details: details,
		Stop: func(ctx context.Context) error { return startedAgain(ctx, env, rs, node, false) }}, nil
}

func (powerLoss) CheckPlan(env *Env, p Plan) error {
	if len(p.Nodes) == 0 {
		return errors.New("a power loss acts on at least one node")
	}
	if cs, _ := p.Params.(*lazyfs.CrashState); partialState(cs) {
		if err := cs.Check(); err != nil {
			return err
		}
		for _, node := range p.Nodes {
			if !partialCrash(env, node) {
				return fmt.Errorf("node %s's layer cannot leave part of the unsynced writes (crash state %s)", node, cs.Mode)
			}
		}
	}
	seen := map[string]bool{}
	for _, node := range p.Nodes {
		if seen[node] {
			return fmt.Errorf("node %s is named twice", node)
		}
		seen[node] = true
		if !hasNode(powerNodes(env), node) {
			return fmt.Errorf("node %s's data is not on the lazyfs layer", node)
		}
	}
	return nil
}

// partialState says whether cs leaves part of the unsynced writes (not
// lose-all).
func partialState(cs *lazyfs.CrashState) bool {
	return cs != nil && cs.Mode != "" && cs.Mode != lazyfs.LoseAll
}

// cutPower cuts node's power in crash state cs (nil: lose-all).
func cutPower(ctx context.Context, env *Env, pc PowerCutter, node string, cs *lazyfs.CrashState) (lazyfs.Loss, error) {
	if partialState(cs) {
		return env.Target.(CrashStater).CutPowerAs(ctx, node, *cs)
	}
	return pc.CutPower(ctx, node)
}

// unsyncedNodes are the free nodes of nodes whose layer holds writes a
// power loss would drop now (none when the target cannot say).
func unsyncedNodes(ctx context.Context, env *Env, nodes []Node) []Node {
	dp, ok := env.Target.(DurabilityProber)
	if !ok {
		return nil
	}
	var out []Node
	for _, n := range nodes {
		if !env.free(n.Name) {
			continue
		}
		if loss, err := dp.UnsyncedWrites(ctx, n.Name); err == nil && loss.Total() > 0 {
			out = append(out, n)
		}
	}
	return out
}

// pickUnsynced picks a free node as pickFree does (the leader a third of
// the time), among the nodes whose layer holds unsynced writes when there
// are such nodes: a power loss is aimed where durability is at stake (with
// etcd behind adapters, 21 of 29 random power losses went to an adapter
// whose layer held nothing).
func pickUnsynced(ctx context.Context, env *Env, rng *rand.Rand, nodes []Node) (string, error) {
	if at := unsyncedNodes(ctx, env, nodes); len(at) > 0 {
		nodes = at
	}
	return pickFree(ctx, env, rng, nodes)
}
