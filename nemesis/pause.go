package nemesis

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// pause freezes a lock holder past its lease (the GC pause that fencing
// exists for) or freezes a whole node. A frozen holder wakes with an expired
// lease and writes with its old token: only the resource's check can stop it.
type pause struct{}

// holderNode is the node a holder pause names: the workload's clients.
const holderNode = "client"

// pauseParams: mode "holder" (the next client to acquire a lock stalls for
// StallMS) or "node" (the plan's node is frozen).
type pauseParams struct {
	Mode    string `json:"mode"`
	StallMS int64  `json:"stall_ms,omitempty"`
}

func (pause) Name() string { return "pause" }

func (pause) Params() any { return &pauseParams{} }

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

func (pause) Draw(ctx context.Context, env *Env, rng *rand.Rand) (Plan, error) {
	holder := env.Holders != nil
	_, canNode := env.Target.(Pauser)
	nodes := nodesOf(env)
	canNode = canNode && len(nodes) > 0
	pauseHolder := func() (Plan, error) {
		d := env.TTL + time.Duration(rng.Int64N(int64(env.TTL)+1))
		return Plan{Nodes: []string{holderNode}, Params: &pauseParams{Mode: "holder", StallMS: d.Milliseconds()}}, nil
	}
	if holder && (!canNode || rng.IntN(2) == 0) {
		return pauseHolder()
	}
	if !canNode {
		return Plan{}, errors.New("no pausable node")
	}
	node, err := pickFree(ctx, env, rng, nodes)
	if errors.Is(err, ErrBusy) && holder {
		return pauseHolder() // every node is down or frozen: freeze a client instead
	}
	if err != nil {
		return Plan{}, err
	}
	return Plan{Nodes: []string{node}, TakesOver: true, Params: &pauseParams{Mode: "node"}}, nil
}

func (pause) CheckPlan(env *Env, p Plan) error {
	pp, err := paramsOf[pauseParams](p)
	if err != nil {
		return err
	}
	switch pp.Mode {
	case "holder":
		if env.Holders == nil {
			return errors.New("mode holder: the workload's lock holders cannot be paused")
		}
		if pp.StallMS <= 0 {
			return errors.New("mode holder needs a positive stall_ms")
		}
	case "node":
		if _, ok := env.Target.(Pauser); !ok {
			return errors.New("mode node: the target's nodes cannot be paused")
		}
		if len(p.Nodes) != 1 {
			return fmt.Errorf("mode node pauses one node, the plan names %d", len(p.Nodes))
		}
	default:
		return fmt.Errorf("mode must be holder or node, got %q", pp.Mode)
	}
	return nil
}

func (pause) Start(ctx context.Context, env *Env, p Plan) (*Fault, error) {
	pp, err := paramsOf[pauseParams](p)
	if err != nil {
		return nil, err
	}
	if pp.Mode == "holder" {
		if env.Holders == nil {
			return nil, errors.New("no lock holder can be paused")
		}
		env.Holders.PauseNextHolder(time.Duration(pp.StallMS) * time.Millisecond)
		return &Fault{Nodes: p.Nodes, Details: map[string]any{"mode": "holder", "stall_ms": pp.StallMS}, Stop: stopNothing}, nil
	}
	pz, ok := env.Target.(Pauser)
	if !ok || len(p.Nodes) != 1 {
		return nil, errors.New("no pausable node")
	}
	node := p.Nodes[0]
	if err := pz.PauseNode(ctx, node); err != nil {
		return nil, applyFailed("node", []string{node}, err)
	}
	return &Fault{Nodes: p.Nodes, Details: map[string]any{"mode": "node"},
		Stop: func(ctx context.Context) error { return pz.ResumeNode(ctx, node) }}, nil
}
