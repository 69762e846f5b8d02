package nemesis

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"

	"github.com/fencecheck/fencecheck/history"
)

// linkLoss loses a share of the packets on links between the target's own
// nodes, each packet drawn at random (nftables' `numgen random mod 100 < P
// drop`, on the sending side), where the target can (LinkLosser): on every
// link of one node, on one link between two nodes, or on every link. The
// share is drawn from 10 to 50 %. No packet is held or reordered: TCP
// retransmits what is lost, so requests between members arrive late,
// heartbeats and votes go missing now and then, and a link that loses half
// its packets is nearly cut. netem (`tc qdisc ... netem loss P%`) is absent
// from this machine's kernel; where present it would be a qdisc on the
// node's own interface, as the rules here are in its own namespace.
type linkLoss struct{}

// LinkLoss is the link-loss nemesis's name.
const LinkLoss = "link-loss"

func (linkLoss) Name() string { return LinkLoss }

// Effects: messages between members arrive late (retransmitted) or, when
// retransmissions run out, not at all, as a short cut would.
func (linkLoss) Effects() []Effect { return []Effect{Delays, Separates} }

func (linkLoss) Applicable(env *Env) (bool, string) {
	ll, ok := env.Target.(LinkLosser)
	if !ok {
		return false, "the target cannot lose packets on the links between its nodes"
	}
	if len(nodesNamed(env, ll.LossNodes())) < 2 {
		return false, "the target can lose packets on links of fewer than two of its nodes"
	}
	return true, ""
}

// linkLossParams: the packets between nodes of different groups are lost,
// Percent percent each way; nodes in no group keep clean links.
type linkLossParams struct {
	Mode    string     `json:"mode"`
	Groups  [][]string `json:"groups"`
	Percent int        `json:"percent"`
}

func (linkLoss) Params() any { return &linkLossParams{} }

// lossNodes are the target's nodes whose links can lose packets, in the
// order of Nodes.
func lossNodes(env *Env) []string {
	ll, ok := env.Target.(LinkLosser)
	if !ok {
		return nil
	}
	var out []string
	for _, n := range nodesNamed(env, ll.LossNodes()) {
		out = append(out, n.Name)
	}
	return out
}

func (linkLoss) Draw(_ context.Context, env *Env, rng *rand.Rand) (Plan, error) {
	names := lossNodes(env)
	if len(names) < 2 {
		return Plan{}, errors.New("no two nodes whose links can lose packets")
	}
	var lp linkLossParams
	lp.Mode, lp.Groups = drawLinkGroups(env, names, rng)
	lp.Percent = 10 + rng.IntN(41)
	return Plan{Nodes: groupNodes(lp.Groups), Outage: true, Params: &lp}, nil
}

func (linkLoss) CheckPlan(env *Env, p Plan) error {
	lp, err := paramsOf[linkLossParams](p)
	if err != nil {
		return err
	}
	if lp.Percent <= 0 || lp.Percent > 100 {
		return fmt.Errorf("percent must be in (0, 100], got %d", lp.Percent)
	}
	if _, ok := env.Target.(LinkLosser); !ok {
		return errors.New("the target cannot lose packets on the links between its nodes")
	}
	return checkLinkGroups(env, lp.Groups, lossNodes(env), "make lossy")
}

// drawLinkGroups draws the links a link fault acts on, as groups (the links
// between nodes of different groups): every link of one node, the one link
// between two nodes, or every link. The one node, and the two, are drawn
// among the nodes that keep state of their own where there are two or more
// (the members: two stateless adapters do not talk to each other).
func drawLinkGroups(env *Env, names []string, rng *rand.Rand) (string, [][]string) {
	pool := names
	var stateful []string
	for _, n := range nodesNamed(env, names) {
		if !n.Stateless {
			stateful = append(stateful, n.Name)
		}
	}
	if len(stateful) >= 2 {
		pool = stateful
	}
	perm := rng.Perm(len(pool))
	switch rng.IntN(3) {
	case 0:
		return "one", [][]string{{pool[perm[0]]}, without(names, pool[perm[0]])}
	case 1:
		a, b := pool[perm[0]], pool[perm[1]]
		if b < a {
			a, b = b, a
		}
		return "pair", [][]string{{a}, {b}}
	default:
		var groups [][]string
		for _, n := range names {
			groups = append(groups, []string{n})
		}
		return "every", groups
	}
}

// checkLinkGroups checks a link fault's groups: two or more, each node once,
// each one of allowed (the nodes whose links the target can do it to).
func checkLinkGroups(env *Env, groups [][]string, allowed []string, do string) error {
	if len(groups) < 2 {
		return errors.New("a link fault needs at least two groups")
	}
	seen := map[string]bool{}
	for _, g := range groups {
		for _, n := range g {
			if !hasNode(nodesOf(env), n) {
				return fmt.Errorf("group names %s, which is not a node of the target", n)
			}
			if !slices.Contains(allowed, n) {
				return fmt.Errorf("group names %s, a node whose links the target cannot %s", n, do)
			}
			if seen[n] {
				return fmt.Errorf("node %s is in two groups", n)
			}
			seen[n] = true
		}
	}
	return nil
}

// groupNodes are the nodes of groups, sorted.
func groupNodes(groups [][]string) []string {
	var nodes []string
	for _, g := range groups {
		nodes = append(nodes, g...)
	}
	sort.Strings(nodes)
	return nodes
}

// linksOf are the links between nodes of different groups, as a link fault
// takes them: each node, the nodes its packets to are affected.
func linksOf(groups [][]string) map[string][]string {
	links := map[string][]string{}
	for i, a := range groups {
		for j, b := range groups {
			if i == j {
				continue
			}
			for _, n := range a {
				links[n] = append(links[n], b...)
			}
		}
	}
	return links
}

func (linkLoss) Start(ctx context.Context, env *Env, p Plan) (*Fault, error) {
	lp, err := paramsOf[linkLossParams](p)
	if err != nil {
		return nil, err
	}
	ll, ok := env.Target.(LinkLosser)
	if !ok {
		return nil, errors.New("the target cannot lose packets on the links between its nodes")
	}
	if err := ll.SetLinkLoss(ctx, linksOf(lp.Groups), lp.Percent); err != nil {
		return nil, applyFailed(lp.Mode, p.Nodes, errors.Join(err, ll.SetLinkLoss(context.WithoutCancel(ctx), nil, 0)))
	}
	return &Fault{Nodes: p.Nodes,
		Details: map[string]any{history.ExtraMode: lp.Mode, "groups": lp.Groups, "percent": lp.Percent},
		Stop:    func(ctx context.Context) error { return ll.SetLinkLoss(ctx, nil, 0) }}, nil
}

// Heal lifts every loss.
func (linkLoss) Heal(ctx context.Context, env *Env) error {
	if ll, ok := env.Target.(LinkLosser); ok {
		return ll.SetLinkLoss(ctx, nil, 0)
	}
	return nil
}
