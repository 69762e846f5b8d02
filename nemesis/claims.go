package nemesis

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
)

// ErrBusy means every node a nemesis could act on is held by another
// nemesis's live fault (a node being restarted cannot also be paused). The
// scheduler retries soon instead of counting a failure, so a short run does
// not lose its only pause to a restart that happened to come first.
var ErrBusy = errors.New("every node is held by another live fault")

// claims says which nemesis holds which node. Faults that take a node over
// (pause of a node, restart) claim it; the scheduler releases the claims of a
// nemesis when its fault stops or fails to start.
type claims struct {
	mu sync.Mutex
	by map[string]string // node -> nemesis name
}

func (c *claims) claim(node, owner string) bool {
	if c == nil {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if holder, ok := c.by[node]; ok && holder != owner {
		return false
	}
	c.by[node] = owner
	return true
}

func (c *claims) releaseAll(owner string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for node, holder := range c.by {
		if holder == owner {
			delete(c.by, node)
		}
	}
}

// claimNode chooses one of nodes for owner and claims it: the leader a third
// of the time when the target can name it (and it is among nodes),
// otherwise a random free node.
func claimNode(ctx context.Context, env *Env, rng *rand.Rand, nodes []Node, owner string) (string, error) {
	if l, ok := env.Target.(Leaderer); ok && rng.IntN(3) == 0 {
		if name, err := l.Leader(ctx); err == nil && name != "" && hasNode(nodes, name) && env.claims.claim(name, owner) {
			return name, nil
		}
	}
	for _, i := range rng.Perm(len(nodes)) {
		if env.claims.claim(nodes[i].Name, owner) {
			return nodes[i].Name, nil
		}
	}
	return "", ErrBusy
}

func hasNode(nodes []Node, name string) bool {
	for _, n := range nodes {
		if n.Name == name {
			return true
		}
	}
	return false
}
