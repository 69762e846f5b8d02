package nemesis

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"
)

// restart kills a node hard (kill -9: nothing not yet durable survives) and
// starts it again when the fault ends. With wipe, it starts from an empty
// data dir: a disaster that even a correct system does not survive, so "all"
// leaves it out.
type restart struct{ wipe bool }

// Names of the restart nemeses: kill and start again, with the data kept or
// wiped.
const (
	Restart     = "restart"
	RestartWipe = "restart-wipe"
)

func (r restart) Name() string {
	if r.wipe {
		return RestartWipe
	}
	return Restart
}

// Effects: a node comes back with what it made durable, or (wiped)
// nothing.
func (r restart) Effects() []Effect {
	if r.wipe {
		return []Effect{LosesState, LosesUnsynced, LosesDurable}
	}
	return []Effect{LosesState}
}

func (r restart) OptInOnly() bool { return r.wipe }

// Params: none; the plan's one node is what restarts.
func (restart) Params() any { return nil }

// Timing: a node is down for 0.3-1.5 s (plus however long it takes to come
// back), so a one-node target serves most of the run and a restart's
// aftermath (tokens, high-water marks read back from disk) is exercised
// many times; recovery, not downtime, is what finds bugs.
func (restart) Timing(*Env) Timing {
	t := DefaultTiming
	t.FaultMin, t.FaultMax = 300*time.Millisecond, 1500*time.Millisecond
	return t
}

func (restart) Applicable(env *Env) (bool, string) {
	if _, ok := env.Target.(Restarter); !ok {
		return false, "the target's nodes cannot be killed and restarted"
	}
	if len(nodesOf(env)) == 0 {
		// Nodes are those fencecheck runs: a spec's url nodes are not.
		return false, "the target has no node fencecheck runs (a node it does not start, such as a spec's url node, is someone else's to kill)"
	}
	return true, ""
}

func (r restart) Draw(ctx context.Context, env *Env, rng *rand.Rand) (Plan, error) {
	nodes := nodesOf(env)
	// Three times in four a node that holds state, when some do not: a
	// stateless adapter's restart loses nothing worth testing.
	var stateful []Node
	for _, n := range nodes {
		if !n.Stateless {
			stateful = append(stateful, n)
		}
	}
	pool := nodes
	if len(stateful) > 0 && len(stateful) < len(nodes) && rng.IntN(4) != 0 {
		pool = stateful
	}
	node, err := pickFree(ctx, env, rng, pool)
	if errors.Is(err, ErrBusy) && len(pool) < len(nodes) {
		node, err = pickFree(ctx, env, rng, nodes)
	}
	if err != nil {
		return Plan{}, err
	}
	return Plan{Nodes: []string{node}, TakesOver: true, Outage: true}, nil
}

func (r restart) Start(ctx context.Context, env *Env, p Plan) (*Fault, error) {
	rs, ok := env.Target.(Restarter)
	if !ok || len(p.Nodes) != 1 {
		return nil, errors.New("a restart acts on one node of a target that can restart them")
	}
	node := p.Nodes[0]
	if err := rs.KillNode(ctx, node); err != nil {
		return nil, applyFailed("", []string{node}, err)
	}
	return &Fault{Nodes: p.Nodes, Details: map[string]any{"wipe": r.wipe},
		Stop: func(ctx context.Context) error { return startedAgain(ctx, env, rs, node, r.wipe) }}, nil
}

func (restart) CheckPlan(_ *Env, p Plan) error {
	if len(p.Nodes) != 1 {
		return errors.New("a restart acts on exactly one node")
	}
	return nil
}
