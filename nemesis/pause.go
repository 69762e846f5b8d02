package nemesis

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"
)

// pause freezes a lock holder past its lease (the GC pause that fencing
// exists for) or freezes a whole node. A frozen holder wakes with an expired
// lease and writes with its old token: only the resource's check can stop it.
type pause struct{}

func (pause) Name() string { return "pause" }

func (pause) Applicable(env *Env) (bool, string) {
	_, node := env.Target.(Pauser)
	if env.Holders == nil && !node {
		return false, "neither the workload's lock holders nor the target's nodes can be paused"
	}
	return true, ""
}

// Timing: a fault must outlast the lease, so a paused holder really wakes
// up late.
func (pause) Timing(env *Env) Timing {
	t := DefaultTiming
	t.FaultMin = env.TTL + env.TTL/2
	t.FaultMax = 2*env.TTL + env.TTL/2
	return t
}

func (pause) Start(ctx context.Context, env *Env, rng *rand.Rand) (*Fault, error) {
	hp, holder := env.Holders, env.Holders != nil
	pz, canNode := env.Target.(Pauser)
	nodes := nodesOf(env)
	canNode = canNode && len(nodes) > 0
	pauseHolder := func() (*Fault, error) {
		d := env.TTL + time.Duration(rng.Int64N(int64(env.TTL)+1))
		hp.PauseNextHolder(d)
		return &Fault{Nodes: []string{"client"}, Details: map[string]any{"mode": "holder", "stall_ms": d.Milliseconds()},
			Stop: func(context.Context) error { return nil }}, nil
	}
	if holder && (!canNode || rng.IntN(2) == 0) {
		return pauseHolder()
	}
	if !canNode {
		return nil, errors.New("no pausable node")
	}
	node, err := claimNode(ctx, env, rng, nodes, "pause")
	if errors.Is(err, ErrBusy) && holder {
		return pauseHolder() // every node is down or frozen: freeze a client instead
	}
	if err != nil {
		return nil, err
	}
	if err := pz.PauseNode(ctx, node); err != nil {
		return nil, err
	}
	return &Fault{Nodes: []string{node}, Details: map[string]any{"mode": "node"},
		Stop: func(ctx context.Context) error { return pz.ResumeNode(ctx, node) }}, nil
}
