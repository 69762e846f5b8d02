package nemesis

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"
)

// ErrBusy means every node a nemesis could act on is held by another
// nemesis's live fault (a node being restarted cannot also be paused). The
// scheduler retries soon instead of counting a failure, so a short run does
// not lose its only pause to a restart that happened to come first.
var ErrBusy = errors.New("every node is held by another live fault")

// errNotNow means no fault of the nemesis fits now (a holder pause in the
// run's last seconds, where its stale writes would land after the main
// phase): it is neither a failure nor a wait for nodes, and the nemesis
// tries again after its next quiet period.
var errNotNow = errors.New("no fault fits now")

// ErrRefusedNow is a target's refusal that changed nothing and may pass (etcd
// refuses a membership change while a member reconnected in the last 5 s):
// a Start that returns it is, like errNotNow, neither a failure nor a
// fault; the nemesis tries again after its next quiet period.
var ErrRefusedNow = errors.New("refused for now")

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
	// starved is set when an outage held back by hushes has waited longer
	// than patience, and cleared when an outage starts: until then no new
	// hush begins. Under "all" quiet pauses come back to back, and a
	// nemesis that only ever finds the system hushed would never act (CI:
	// power-loss never started in an 8 s run).
	starved  bool
	patience time.Duration
	// waiters are the nemeses that found what they need held (by another
	// fault or a hush): a node freed goes to the one that waited longest.
	// Every waiter retries on the same tick, so without this whichever
	// tick came first won (CI: power-loss lost the memory reference's one
	// node to a restart, then to a node pause, for 5 s of an 8 s run).
	waiters map[string]*waiter
}

// waiter is one nemesis waiting since since for nodes;
// last is its latest try: one that stopped trying is not waited for.
type waiter struct {
	since, last time.Time
	nodes       []string
}

// waiterFresh is how recently a waiter must have tried to be yielded to
// (a few of the scheduler's busy retries).
const waiterFresh = time.Second

// outagePatience is how long an outage waits for quiet holder pauses
// before the next one yields to it: longer than two hushes back to back
// (on etcd one lasts about 4 s: a stall over its 2 s lease, half a lease,
// the wait for live outages), since a loud pause comes between two quiet
// ones. At 3 s every other quiet pause on etcd yielded and a 30 s run's
// late writes fell to 8.
const outagePatience = 10 * time.Second

func newClaims() *claims {
	return &claims{by: map[string]int64{}, outages: map[int64]bool{}, drained: make(chan struct{}), patience: outagePatience, waiters: map[string]*waiter{}}
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

// wait records that nemesis, trying since since, found nodes held (none:
// it waits for nothing a node's release could give it).
func (c *claims) wait(nemesis string, since time.Time, nodes []string) {
	if c == nil || len(nodes) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	w := c.waiters[nemesis]
	if w == nil || since.Before(w.since) {
		w = &waiter{since: since}
		c.waiters[nemesis] = w
	}
	w.last, w.nodes = time.Now(), nodes
}

// yields says whether nemesis, trying since since for nodes, must let a
// nemesis that has waited longer for one of them go first.
func (c *claims) yields(nemesis string, since time.Time, nodes []string) bool {
	if c == nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for name, w := range c.waiters {
		if name == nemesis || !w.since.Before(since) || time.Since(w.last) > waiterFresh {
			continue
		}
		if overlaps(w.nodes, nodes) {
			return true
		}
	}
	return false
}

// served says nemesis is no longer waiting (its fault started, or failed).
func (c *claims) served(nemesis string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.waiters, nemesis)
}

// held lists the nodes live faults hold.
func (c *claims) held() []string {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, 0, len(c.by))
	for n := range c.by {
		out = append(out, n)
	}
	return out
}

func overlaps(a, b []string) bool {
	for _, x := range a {
		for _, y := range b {
			if x == y {
				return true
			}
		}
	}
	return false
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
// holder pause holds outages back. waitedSince is when the outage first
// tried (zero on its first try): one held back longer than patience makes
// the next quiet pause yield to it.
func (c *claims) startOutage(fault int64, waitedSince time.Time) bool {
	if c == nil {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.hushes > 0 {
		if !waitedSince.IsZero() && time.Since(waitedSince) >= c.patience {
			c.starved = true
		}
		return false
	}
	c.outages[fault] = true
	c.starved = false
	return true
}

// hush holds new outages back until the returned function is called (once
// or more), and waits, at most max, for the live ones to end. It says how
// many were still live when it stopped waiting (0: the system is whole).
// It yields instead (holds nothing back, waits for nothing) while an outage
// has been held back too long.
//
// The seeds' scenario needs the lock service at the moment a lease runs
// out: a system that needs a quorum to expire a lease (etcd) grants no
// takeover while a member is down or cut off, and under "all" some such
// fault is live nearly all the time, so without a quiet moment its stalled
// holders wake to no newer token and show nothing.
func (c *claims) hush(ctx context.Context, max time.Duration) (live int, yielded bool, unhush func()) {
	if c == nil {
		return 0, false, func() {}
	}
	c.mu.Lock()
	if c.starved {
		live := len(c.outages)
		c.mu.Unlock()
		return live, true, func() {}
	}
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
			return 0, false, unhush
		}
		select {
		case <-drained:
		case <-t.C:
			return live, false, unhush
		case <-ctx.Done():
			return live, false, unhush
		}
	}
}

// hushFree holds new outages back, as hush does but without waiting, for
// a clock step timed by a grant, which needs only nodes up: when no live
// fault holds one of them, whatever else is live (a freeze of an adapter
// leaves the store granting through the other; waiting for it to end,
// the step went untimed, redis), and no one else holds outages back. A
// hush waits for a takeover (a quiet holder pause's), and a clock stepped
// back makes the leases the store times by it run on (redis: a lock
// granted before a step back of 73 s was refused to every taker for 2 s).
func (c *claims) hushFree(nodes []string) (unhush func(), ok, yielded bool) {
	return c.hushIf(func() bool {
		return c.hushes == 0 && !slices.ContainsFunc(nodes, func(n string) bool { _, held := c.by[n]; return held })
	})
}

// hushIf holds new outages back when now says so (called under c.mu).
func (c *claims) hushIf(now func() bool) (unhush func(), ok, yielded bool) {
	if c == nil {
		return func() {}, true, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !now() {
		return nil, false, false
	}
	if c.starved {
		return func() {}, true, true
	}
	c.hushes++
	return sync.OnceFunc(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.hushes--
	}), true, false
}

func hasNode(nodes []Node, name string) bool {
	for _, n := range nodes {
		if n.Name == name {
			return true
		}
	}
	return false
}
