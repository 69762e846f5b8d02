package nemesis

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/fencecheck/fencecheck/history"
)

// delay makes the proxies between clients and the resource hold a share of
// writes in flight until a newer token has been accepted for the same key
// (or a bound elapses), then deliver them: the write that was sent while its
// lease was valid and arrives after the next holder's. Only the resource's
// token check can reject it; a resource that accepts equal tokens, forgot its
// high-water mark, or checks nothing lets it through.
type delay struct{}

// Delay is the delay nemesis's name.
const Delay = "delay"

func (delay) Name() string { return Delay }

// Effects: a write arrives after a newer token's.
func (delay) Effects() []Effect { return []Effect{Delays} }

// ActsOnLinks: the proxies hold the writes.
func (delay) ActsOnLinks() bool { return true }

// OnClientsOnly: the proxy holds the clients' writes; every node runs on.
func (delay) OnClientsOnly(Plan) bool { return true }

func (delay) Applicable(env *Env) (bool, string) {
	if len(clientLinks(env)) == 0 {
		return false, noClientLinks
	}
	return true, ""
}

// delayBound is how long a write may be held when no newer token comes: long
// enough for the holder's lease to run out and the next holder to write.
func delayBound(env *Env, rng *rand.Rand) time.Duration {
	ttl := env.TTL
	if ttl <= 0 {
		ttl = history.DefaultTTL
	}
	return ttl + time.Duration(rng.Int64N(int64(2*ttl)+1))
}

// delayParams: the share of writes held on each of the links, and how long
// a held write waits at most for a newer token.
type delayParams struct {
	Share   float64  `json:"share"`
	BoundMS int64    `json:"bound_ms"`
	Links   []string `json:"links"`
}

func (delay) Params() any { return &delayParams{} }

func (delay) Draw(_ context.Context, env *Env, rng *rand.Rand) (Plan, error) {
	links := linkNames(clientLinks(env))
	share := round2(0.2 + 0.3*rng.Float64())
	bound := delayBound(env, rng)
	return Plan{Nodes: linkTargets(env, links), Params: &delayParams{Share: share, BoundMS: bound.Milliseconds(), Links: links}}, nil
}

func (delay) CheckPlan(env *Env, p Plan) error {
	dp, err := paramsOf[delayParams](p)
	if err != nil {
		return err
	}
	if dp.Share <= 0 || dp.Share > 1 || dp.BoundMS <= 0 {
		return fmt.Errorf("share must be in (0, 1] and bound_ms positive, got %g and %d", dp.Share, dp.BoundMS)
	}
	return checkLinks(env, dp.Links)
}

func (delay) Start(ctx context.Context, env *Env, p Plan) (*Fault, error) {
	dp, err := paramsOf[delayParams](p)
	if err != nil {
		return nil, err
	}
	ls, ok := linkSet(env)
	if !ok {
		return nil, errors.New(noClientLinks)
	}
	bound := time.Duration(dp.BoundMS) * time.Millisecond
	if err := forEachLink(dp.Links, func(n string) error { return ls.SetDelay(n, dp.Share, bound) }); err != nil {
		forEachLink(dp.Links, func(n string) error { return ls.SetDelay(n, 0, 0) })
		return nil, err
	}
	return &Fault{Nodes: p.Nodes,
		Details: map[string]any{"share": dp.Share, "bound_ms": dp.BoundMS, "links": dp.Links},
		Stop: func(context.Context) error {
			// Held writes are released (delivered) when the mode ends.
			return forEachLink(dp.Links, func(n string) error { return ls.SetDelay(n, 0, 0) })
		}}, nil
}

// Heal turns delaying off on every link, delivering every held write.
func (delay) Heal(ctx context.Context, env *Env) error {
	ls, ok := linkSet(env)
	if !ok {
		return nil
	}
	return forEachLink(linkNames(ls.Links()), func(n string) error { return ls.SetDelay(n, 0, 0) })
}
