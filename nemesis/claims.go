package nemesis

import (
	"context"
	"errors"
	"sync"
	"time"
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
	// outages are the live faults whose plans are outages; while hushes
	// is above zero no new one starts, and drained is closed (and
	// replaced) whenever the last one ends.
	outages map[int64]bool
	hushes  int
	drained chan struct{}
}

func newClaims() *claims {
	return &claims{by: map[string]int64{}, outages: map[int64]bool{}, drained: make(chan struct{})}
}

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
	if c.outages[fault] {
		delete(c.outages, fault)
		if len(c.outages) == 0 {
			close(c.drained)
			c.drained = make(chan struct{})
		}
	}
}

// startOutage records fault as a live outage, or says false while a quiet
// holder pause holds outages back.
func (c *claims) startOutage(fault int64) bool {
	if c == nil {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.hushes > 0 {
		return false
	}
	c.outages[fault] = true
	return true
}

// hush holds new outages back until the returned function is called (once
// or more), and waits, at most max, for the live ones to end. It says how
// many were still live when it stopped waiting (0: the system is whole).
//
// The seeds' scenario needs the lock service at the moment a lease runs
// out: a system that needs a quorum to expire a lease (etcd) grants no
// takeover while a member is down or cut off, and under "all" some such
// fault is live nearly all the time, so without a quiet moment its stalled
// holders wake to no newer token and show nothing.
func (c *claims) hush(ctx context.Context, max time.Duration) (live int, unhush func()) {
	if c == nil {
		return 0, func() {}
	}
	c.mu.Lock()
	c.hushes++
	c.mu.Unlock()
	unhush = sync.OnceFunc(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.hushes--
	})
	t := time.NewTimer(max)
	defer t.Stop()
	for {
		c.mu.Lock()
		live, drained := len(c.outages), c.drained
		c.mu.Unlock()
		if live == 0 {
			return 0, unhush
		}
		select {
		case <-drained:
		case <-t.C:
			return live, unhush
		case <-ctx.Done():
			return live, unhush
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
