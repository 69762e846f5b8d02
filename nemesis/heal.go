package nemesis

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/fencecheck/fencecheck/history"
)

// defaultStopGrace is how long the heal lets the stops the main phase began
// finish before it lifts the faults that take no node over beside them. A
// member's restart takes seconds (etcd: 2-6 s here); a stop that needs
// more is waiting for another fault's end.
const defaultStopGrace = 10 * time.Second

// endInTime ends a fault in the main phase as endOrKeep does, and returns
// when the main phase ends (ctx) even if the stop goes on: Heal waits for
// it. A stop that waits for another fault's end held the main phase's end
// until it gave up (ZooKeeper, random: a member added back while every
// link lost 44% of its packets, 122 s past the 30 s main phase, the loss
// lifted only then).
func (s *Scheduler) endInTime(ctx context.Context, id int64) {
	done := make(chan struct{})
	s.stopping.Add(1)
	go func() {
		defer s.stopping.Done()
		defer close(done)
		s.endOrKeep(context.WithoutCancel(ctx), id)
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// stopsDone waits up to d (or ctx's end) for the stops the main phase
// began, and says whether they are done.
func (s *Scheduler) stopsDone(ctx context.Context, d time.Duration) bool {
	done := make(chan struct{})
	go func() { s.stopping.Wait(); close(done) }()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	return false
}

// Heal stops every live fault and asks every nemesis that can to undo all
// faults of its kind. It is the final phase's first step. Its error names
// every fault of the run that could not be undone, then or earlier.
//
// It first lets the stops the main phase began finish, as a node started
// beside another's start can break a cluster (two etcd members joining at
// once). One that is not done within the grace is waiting for another
// fault: the faults that take no node over are lifted then, and the heal
// waits for it before it starts any node.
func (s *Scheduler) Heal(ctx context.Context) error {
	var errs []string
	if !s.stopsDone(ctx, cmp.Or(s.stopGrace, defaultStopGrace)) {
		errs = append(errs, s.liftOthers(ctx)...)
		s.stopsDone(ctx, time.Duration(1<<62))
	}
	errs = append(errs, s.liftOthers(ctx)...)
	errs = append(errs, s.liftTakeovers(ctx)...)
	for _, n := range s.Nemeses {
		if h, ok := n.(Healer); ok {
			if err := h.Heal(ctx, s.Env); err != nil {
				errs = append(errs, fmt.Sprintf("%s: %v", n.Name(), err))
			}
		}
	}
	s.record(history.FaultHeal, history.FaultStop, 0, nil, nil)
	if len(errs) > 0 {
		return fmt.Errorf("heal: %s", strings.Join(errs, "; "))
	}
	return nil
}

// liveFaults are the live faults that took nodes over (takeovers) or not,
// each in start order.
func (s *Scheduler) liveFaults(takeovers bool) []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []int64
	for id, l := range s.active {
		if l.takesOver == takeovers {
			ids = append(ids, id)
		}
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}

// liftOthers undoes the faults that take no node over (partitions, clock
// steps, the proxies' faults), in order, before any node is started: a
// node restarted behind a cut could not answer its health check until the
// cut is lifted (a spec's restarted node waited 60 s for a partition
// healed after it, and a valid history ended unknown).
func (s *Scheduler) liftOthers(ctx context.Context) []string {
	var errs []string
	for _, id := range s.liveFaults(false) {
		if err := s.stop(ctx, id); err != nil {
			errs = append(errs, err.Error())
		}
	}
	return errs
}

// liftTakeovers undoes the faults that took nodes over (restarts, power
// losses, node pauses; each holds its own nodes) together: one node's start
// may wait for another's (a Redis adapter restarted answers its health
// check only once the Redis that a power loss stopped is back: undone one
// after the other, the adapter's wait timed out first and the run was
// unknown).
func (s *Scheduler) liftTakeovers(ctx context.Context) []string {
	ids := s.liveFaults(true)
	errs := make([]string, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.stop(ctx, id); err != nil {
				errs[i] = err.Error()
			}
		}()
	}
	wg.Wait()
	return slices.DeleteFunc(errs, func(e string) bool { return e == "" })
}
