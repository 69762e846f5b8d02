package nemesis

import (
	"context"
	"math/rand/v2"
	"time"
)

// delay makes the proxies between clients and the resource hold a share of
// writes in flight until a newer token has been accepted for the same key
// (or a bound elapses), then deliver them: the write that was sent while its
// lease was valid and arrives after the next holder's. Only the resource's
// token check can reject it; a resource that accepts equal tokens, forgot its
// high-water mark, or checks nothing lets it through.
type delay struct{}

func (delay) Name() string { return "delay" }

// ActsOnLinks: the proxies hold the writes.
func (delay) ActsOnLinks() bool { return true }

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
		ttl = time.Second
	}
	return ttl + time.Duration(rng.Int64N(int64(2*ttl)+1))
}

func (delay) Start(ctx context.Context, env *Env, rng *rand.Rand) (*Fault, error) {
	ls, _ := linkSet(env)
	links := linkNames(clientLinks(env))
	share := 0.2 + 0.3*rng.Float64()
	bound := delayBound(env, rng)
	if err := forEachLink(links, func(n string) error { return ls.SetDelay(n, share, bound) }); err != nil {
		forEachLink(links, func(n string) error { return ls.SetDelay(n, 0, 0) })
		return nil, err
	}
	return &Fault{Nodes: linkTargets(env, links),
		Details: map[string]any{"share": round2(share), "bound_ms": bound.Milliseconds(), "links": links},
		Stop: func(context.Context) error {
			// Held writes are released (delivered) when the mode ends.
			return forEachLink(links, func(n string) error { return ls.SetDelay(n, 0, 0) })
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
