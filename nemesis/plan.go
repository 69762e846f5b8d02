package nemesis

import (
	"context"
	"fmt"
	"math/rand/v2"
)

// Plan is one fault as data: the nodes it acts on and the nemesis's own
// parameters (which mode, what offset, what share...). A nemesis draws a
// plan from the seed (Draw) and injects exactly what the plan says (Start),
// so a fault drawn in one run can be given back to Start in another: the
// schedule a run records (schedule.json) is the plans it started, and
// `fencecheck test --schedule` replays them.
type Plan struct {
	// Nodes the fault acts on, as the target (or the workload: "client")
	// names them.
	Nodes []string
	// TakesOver says the fault takes its nodes over (a kill, a freeze): the
	// scheduler claims them, so no other such fault acts on them while this
	// one is live.
	TakesOver bool
	// Outage says the fault may keep the system from serving (a node
	// killed, frozen or cut off): a quiet holder pause holds such faults
	// back while its takers need the lock service (see claims.hush).
	Outage bool
	// Params are the nemesis's parameters: a pointer to its own type, as
	// its Params method makes; nil for a nemesis whose faults take none.
	// They must survive a JSON round trip: a schedule file stores them.
	Params any
	// why the guided schedule chose the fault (schedule.json's why).
	why string
}

// Planner is the half of a nemesis that chooses: Draw picks one fault with
// rng, and never acts.
type Planner interface {
	// Draw chooses one fault. A fault that takes nodes over must pick among
	// the free ones (Env.free) and return ErrBusy when every one is held.
	Draw(ctx context.Context, env *Env, rng *rand.Rand) (Plan, error)
	// Params is a new, empty value of the parameter type (a pointer), into
	// which a schedule file's params are decoded; nil when there are none.
	Params() any
}

// PlanChecker is a nemesis whose parameters name things beyond the plan's
// nodes (proxy links, partition groups, clocks): CheckPlan says before a
// replay starts whether env has them. The scheduler already checks that
// every node of a plan exists.
type PlanChecker interface {
	CheckPlan(env *Env, p Plan) error
}

// paramsOf is p's parameters as the nemesis's own type T.
func paramsOf[T any](p Plan) (*T, error) {
	if t, ok := p.Params.(*T); ok && t != nil {
		return t, nil
	}
	return nil, fmt.Errorf("fault parameters are %T, want %T", p.Params, new(T))
}

// free says whether no fault holds node (always true for a nemesis used on
// its own, outside a scheduler).
func (e *Env) free(node string) bool { return e.claims.free(node) }

// pickFree chooses one of nodes that no fault holds: the leader a third of
// the time when the target can name it (and it is among nodes), otherwise a
// random free node; ErrBusy when every one is held.
func pickFree(ctx context.Context, env *Env, rng *rand.Rand, nodes []Node) (string, error) {
	if l, ok := env.Target.(Leaderer); ok && rng.IntN(3) == 0 {
		if name, err := l.Leader(ctx); err == nil && name != "" && hasNode(nodes, name) && env.free(name) {
			return name, nil
		}
	}
	for _, i := range rng.Perm(len(nodes)) {
		if env.free(nodes[i].Name) {
			return nodes[i].Name, nil
		}
	}
	return "", ErrBusy
}

// knownNodes are the names a plan's nodes may take in env: the target's
// nodes, every clock the clock nemesis can step, the workload's clients.
func knownNodes(env *Env) map[string]bool {
	out := map[string]bool{}
	for _, n := range nodesOf(env) {
		out[n.Name] = true
	}
	for _, c := range clockTargets(env) {
		out[c.node] = true
	}
	if env.Holders != nil {
		out[holderNode] = true
	}
	return out
}
