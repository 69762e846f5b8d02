package nemesis

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/fencecheck/fencecheck/history"
)

// linkDelay holds back the packets on links between the target's own nodes
// (LinkDelayer): on every link of one node, on one link between two nodes,
// or on every link, each way, by a delay drawn from 20 to 250 ms plus or
// minus a jitter of up to half of it, each packet drawn on its own. Jitter
// over the gap between two packets reorders them, as netem's delay with
// jitter does; nothing is lost. netem (`tc qdisc ... netem delay 100ms
// 20ms`) is absent from this machine's kernel: the packets are queued
// (NFQUEUE) to a delayer of the project's own in user space, which lets
// each go when its time comes.
type linkDelay struct{}

// LinkDelay is the link-delay nemesis's name.
const LinkDelay = "link-delay"

func (linkDelay) Name() string { return LinkDelay }

// Effects: messages between members arrive late, and out of order.
func (linkDelay) Effects() []Effect { return []Effect{Delays} }

func (linkDelay) Applicable(env *Env) (bool, string) {
	if _, ok := env.Target.(LinkDelayer); !ok {
		return false, "the target cannot delay packets on the links between its nodes"
	}
	if len(delayNodes(env)) < 2 {
		return false, "the target can delay packets on links of fewer than two of its nodes"
	}
	return true, ""
}

// linkDelayParams: the packets between nodes of different groups wait
// DelayMS ± JitterMS milliseconds, each way; nodes in no group keep their
// links as they are.
type linkDelayParams struct {
	Mode     string     `json:"mode"`
	Groups   [][]string `json:"groups"`
	DelayMS  int64      `json:"delay_ms"`
	JitterMS int64      `json:"jitter_ms"`
}

func (linkDelay) Params() any { return &linkDelayParams{} }

// delayNodes are the target's nodes whose links can be delayed, in the
// order of Nodes.
func delayNodes(env *Env) []string {
	ld, ok := env.Target.(LinkDelayer)
	if !ok {
		return nil
	}
	var out []string
	for _, n := range nodesNamed(env, ld.DelayNodes()) {
		out = append(out, n.Name)
	}
	return out
}

func (linkDelay) Draw(_ context.Context, env *Env, rng *rand.Rand) (Plan, error) {
	names := delayNodes(env)
	if len(names) < 2 {
		return Plan{}, errors.New("no two nodes whose links can be delayed")
	}
	var dp linkDelayParams
	dp.Mode, dp.Groups = drawLinkGroups(env, names, rng)
	dp.DelayMS = 20 + rng.Int64N(231)
	dp.JitterMS = rng.Int64N(dp.DelayMS/2 + 1)
	return Plan{Nodes: groupNodes(dp.Groups), Outage: true, Params: &dp}, nil
}

func (linkDelay) CheckPlan(env *Env, p Plan) error {
	dp, err := paramsOf[linkDelayParams](p)
	if err != nil {
		return err
	}
	if dp.DelayMS <= 0 || dp.JitterMS < 0 || dp.JitterMS > dp.DelayMS || dp.DelayMS > 60_000 {
		return fmt.Errorf("delay_ms must be in (0, 60000] and jitter_ms in [0, delay_ms], got %d and %d", dp.DelayMS, dp.JitterMS)
	}
	if _, ok := env.Target.(LinkDelayer); !ok {
		return errors.New("the target cannot delay packets on the links between its nodes")
	}
	return checkLinkGroups(env, dp.Groups, delayNodes(env), "delay")
}

func (linkDelay) Start(ctx context.Context, env *Env, p Plan) (*Fault, error) {
	dp, err := paramsOf[linkDelayParams](p)
	if err != nil {
		return nil, err
	}
	ld, ok := env.Target.(LinkDelayer)
	if !ok {
		return nil, errors.New("the target cannot delay packets on the links between its nodes")
	}
	mean, jitter := time.Duration(dp.DelayMS)*time.Millisecond, time.Duration(dp.JitterMS)*time.Millisecond
	if err := ld.SetLinkDelay(ctx, linksOf(dp.Groups), mean, jitter); err != nil {
		return nil, applyFailed(dp.Mode, p.Nodes, errors.Join(err, ld.SetLinkDelay(context.WithoutCancel(ctx), nil, 0, 0)))
	}
	return &Fault{Nodes: p.Nodes,
		Details: map[string]any{history.ExtraMode: dp.Mode, "groups": dp.Groups, "delay_ms": dp.DelayMS, "jitter_ms": dp.JitterMS},
		Stop:    func(ctx context.Context) error { return ld.SetLinkDelay(ctx, nil, 0, 0) }}, nil
}

// Heal lifts every delay (the packets held are let go at once).
func (linkDelay) Heal(ctx context.Context, env *Env) error {
	if ld, ok := env.Target.(LinkDelayer); ok {
		return ld.SetLinkDelay(ctx, nil, 0, 0)
	}
	return nil
}
