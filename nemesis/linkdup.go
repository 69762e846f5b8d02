package nemesis

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"

	"github.com/fencecheck/fencecheck/history"
)

// linkDup sends a share of the packets on links between the target's own
// nodes twice, each packet drawn at random (nftables' `numgen random mod
// 100 < P dup to ip daddr`, on the sending side), where the target can
// (LinkDuplicator): on every link of one node, one link, or every link,
// each way, 10 to 40 % drawn. A copy arrives beside the packet: TCP drops
// the copy (and answers with a duplicate acknowledgement); a protocol over
// UDP, or one that retries by itself, sees a message twice. netem's
// `duplicate P%` where netem is present.
type linkDup struct{}

// LinkDuplicate is the link-duplicate nemesis's name.
const LinkDuplicate = "link-duplicate"

func (linkDup) Name() string { return LinkDuplicate }

// Effects: messages between members arrive twice, the copy late.
func (linkDup) Effects() []Effect { return []Effect{Delays} }

func (linkDup) Applicable(env *Env) (bool, string) {
	if _, ok := env.Target.(LinkDuplicator); !ok {
		return false, "the target cannot send packets twice on the links between its nodes"
	}
	if len(dupNodes(env)) < 2 {
		return false, "the target can send packets twice on links of fewer than two of its nodes"
	}
	return true, ""
}

// dupNodes are the target's nodes whose links can carry copies, in the
// order of Nodes.
func dupNodes(env *Env) []string {
	ld, ok := env.Target.(LinkDuplicator)
	if !ok {
		return nil
	}
	var out []string
	for _, n := range nodesNamed(env, ld.DupNodes()) {
		out = append(out, n.Name)
	}
	return out
}

// Params: the same as a loss's (the share sent twice).
func (linkDup) Params() any { return &linkLossParams{} }

func (linkDup) Draw(_ context.Context, env *Env, rng *rand.Rand) (Plan, error) {
	names := dupNodes(env)
	if len(names) < 2 {
		return Plan{}, errors.New("no two nodes whose links can carry copies")
	}
	var lp linkLossParams
	lp.Mode, lp.Groups = drawLinkGroups(env, names, rng)
	lp.Percent = 10 + rng.IntN(31)
	return Plan{Nodes: groupNodes(lp.Groups), Params: &lp}, nil
}

func (linkDup) CheckPlan(env *Env, p Plan) error {
	lp, err := paramsOf[linkLossParams](p)
	if err != nil {
		return err
	}
	if lp.Percent <= 0 || lp.Percent > 100 {
		return fmt.Errorf("percent must be in (0, 100], got %d", lp.Percent)
	}
	if _, ok := env.Target.(LinkDuplicator); !ok {
		return errors.New("the target cannot send packets twice on the links between its nodes")
	}
	return checkLinkGroups(env, lp.Groups, dupNodes(env), "duplicate on")
}

func (linkDup) Start(ctx context.Context, env *Env, p Plan) (*Fault, error) {
	lp, err := paramsOf[linkLossParams](p)
	if err != nil {
		return nil, err
	}
	ld, ok := env.Target.(LinkDuplicator)
	if !ok {
		return nil, errors.New("the target cannot send packets twice on the links between its nodes")
	}
	if err := ld.SetLinkDup(ctx, linksOf(lp.Groups), lp.Percent); err != nil {
		return nil, applyFailed(lp.Mode, p.Nodes, errors.Join(err, ld.SetLinkDup(context.WithoutCancel(ctx), nil, 0)))
	}
	return &Fault{Nodes: p.Nodes,
		Details: map[string]any{history.ExtraMode: lp.Mode, "groups": lp.Groups, "percent": lp.Percent},
		Stop:    func(ctx context.Context) error { return ld.SetLinkDup(ctx, nil, 0) }}, nil
}

// Heal lifts every duplication.
func (linkDup) Heal(ctx context.Context, env *Env) error {
	if ld, ok := env.Target.(LinkDuplicator); ok {
		return ld.SetLinkDup(ctx, nil, 0)
	}
	return nil
}
