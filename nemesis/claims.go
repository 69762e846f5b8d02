package nemesis

import (
	"errors"
	"sync"
)

// ErrBusy means every node a nemesis could act on is held by another
// nemesis's live fault (a node being restarted cannot also be paused). The
// scheduler retries soon instead of counting a failure, so a short run does
// not lose its only pause to a restart that happened to come first.
var ErrBusy = errors.New("every node is held by another live fault")

// claims says which fault holds which node. The scheduler claims the nodes
// of a plan that takes them over (Plan.TakesOver) before it starts the
// fault, and releases them when the fault stops or fails to start.
type claims struct {
	mu sync.Mutex
	by map[string]int64 // node -> holding fault
}

func newClaims() *claims { return &claims{by: map[string]int64{}} }

func (c *claims) free(node string) bool {
	if c == nil {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	_, held := c.by[node]
	return !held
}

// claimAll claims every node for fault, or none when one is held.
func (c *claims) claimAll(nodes []string, fault int64) bool {
	if c == nil {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range nodes {
		if holder, ok := c.by[n]; ok && holder != fault {
			return false
		}
	}
	for _, n := range nodes {
		c.by[n] = fault
	}
	return true
}

func (c *claims) release(fault int64) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for node, holder := range c.by {
		if holder == fault {
			delete(c.by, node)
		}
	}
}

func hasNode(nodes []Node, name string) bool {
	for _, n := range nodes {
		if n.Name == name {
			return true
		}
	}
	return false
}
