package nemesis

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/fencecheck/fencecheck/history"
)

// The ending of faults: each at its time in the main phase (endOrKeep), and
// every one still live at the final heal (Heal).

func (s *Scheduler) stop(ctx context.Context, id int64) error {
	return s.end(ctx, id, false)
}

// holdOn holds a live fault past its drawn length until it has made what
// it was aimed at (Fault.Made), at most its HoldFor more, with new outages
// held back meanwhile. It records the length the fault had in the schedule
// (a replay holds it that long), and in its stop event how long it was
// held and whether it made its situation. False when ctx ended first.
func (s *Scheduler) holdOn(ctx context.Context, id int64) bool {
	s.mu.Lock()
	l, ok := s.active[id]
	s.mu.Unlock()
	if !ok || l.fault.Made == nil {
		return true
	}
	began := time.Now()
	made := true
	select {
	case <-l.fault.Made:
	default:
		// Meanwhile no new outage: the store's crashes, restarts and
		// power losses back to back left no second for the newer write
		// (redis: three freezes of five held on 3 s for nothing).
		unhush, _, _ := s.Env.claims.hushIf(func() bool { return true })
		defer unhush()
		t := time.NewTimer(l.fault.HoldFor)
		defer t.Stop()
		select {
		case <-l.fault.Made:
		case <-ctx.Done():
			return false
		case <-t.C:
			made = false
		}
	}
	held := time.Since(began).Round(time.Millisecond)
	s.mu.Lock()
	defer s.mu.Unlock()
	if l.fault.StopDetails == nil {
		l.fault.StopDetails = map[string]any{}
	}
	l.fault.StopDetails["held_ms"], l.fault.StopDetails["made"] = held.Milliseconds(), made
	for i := range s.planned {
		if s.planned[i].ID == id {
			s.planned[i].Duration += held
		}
	}
	return true
}

// endOrKeep ends a fault in the main phase: one that cannot be undone now
// stays live, its nodes held, for the final heal to try again (a node that
// did not start may start a little later). The main phase's end (main's)
// does not cut the undoing short (a node's start goes on), but bounds it:
// undoGrace after that end it is given up and left live, and the heal,
// which lifts the faults that take no node over first, takes it again. An
// undoing can wait on another fault that only the heal lifts: a ZooKeeper
// member added back while every link lost 44% of its packets retried for
// 122 s past a 30 s main phase, and a Redis adapter's start waited 60 s
// behind a partition.
func (s *Scheduler) endOrKeep(main context.Context, id int64) {
	ctx, cancel := graceAfter(main, undoGrace)
	defer cancel()
	s.end(ctx, id, true)
}

// undoGrace is how long an undoing in progress may go on past the main
// phase's end: one can take seconds on its own (a ZooKeeper member's JVM
// started and synced, an etcd member catching up from a snapshot), and
// given up, it is done again from its start at the heal. A variable for
// the tests.
var undoGrace = 10 * time.Second

// errLeftToHeal is why an undoing was given up: undoGrace passed since the
// main phase's end.
var errLeftToHeal = errors.New("the main phase had ended: left to the final heal")

// graceAfter is a context that ctx's end does not end, but grace after it.
func graceAfter(ctx context.Context, grace time.Duration) (context.Context, context.CancelFunc) {
	out, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() { time.AfterFunc(grace, func() { cancel(errLeftToHeal) }) })
	return out, func() { stop(); cancel(nil) }
}

// end undoes a live fault and records its stop. When that fails and keep is
// set, the fault stays live and a stop-failed event records the error;
// otherwise the stop event carries it, and the error is returned.
func (s *Scheduler) end(ctx context.Context, id int64, keep bool) error {
	s.mu.Lock()
	l, ok := s.active[id]
	delete(s.active, id)
	s.mu.Unlock()
	if !ok {
		return nil
	}
	var err error
	if l.fault.Stop != nil {
		err = l.fault.Stop(ctx)
	}
	if err != nil && errors.Is(context.Cause(ctx), errLeftToHeal) {
		err = fmt.Errorf("%w (%w)", errLeftToHeal, err)
	}
	if err != nil && keep {
		s.mu.Lock()
		s.active[id] = l
		s.mu.Unlock()
		s.record(l.nem.Name(), history.FaultStopFailed, id, l.fault.Nodes, map[string]any{history.ExtraError: err.Error()})
		return err
	}
	details := maps.Clone(l.fault.StopDetails)
	if err != nil {
		details = map[string]any{history.ExtraError: err.Error()}
		err = fmt.Errorf("%s of %s could not be undone: %w", l.nem.Name(), strings.Join(l.fault.Nodes, ","), err)
	}
	s.Env.claims.release(l.claim)
	s.record(l.nem.Name(), history.FaultStop, id, l.fault.Nodes, details)
	return err
}

// Heal stops every live fault and asks every nemesis that can to undo all
// faults of its kind. It is the final phase's first step. Its error names
// every fault of the run that could not be undone, then or earlier.
func (s *Scheduler) Heal(ctx context.Context) error {
	s.mu.Lock()
	var takeovers, others []int64
	for id, l := range s.active {
		if l.takesOver {
			takeovers = append(takeovers, id)
		} else {
			others = append(others, id)
		}
	}
	s.mu.Unlock()
	sort.Slice(takeovers, func(i, j int) bool { return takeovers[i] < takeovers[j] })
	sort.Slice(others, func(i, j int) bool { return others[i] < others[j] })
	// The faults that take no node over (partitions, clock steps, the
	// proxies' faults) are undone first, in order: a node restarted behind
	// a cut could not answer its health check until the cut is lifted (a
	// spec's restarted node waited 60 s for a partition healed after it,
	// and a valid history ended unknown).
	var errs []string
	for _, id := range others {
		if err := s.stop(ctx, id); err != nil {
			errs = append(errs, err.Error())
		}
	}
	// The faults that took nodes over (restarts, power losses, node
	// pauses; each holds its own nodes) are undone together: one node's
	// start may wait for another's (a Redis adapter restarted answers its
	// health check only once the Redis that a power loss stopped is back:
	// undone one after the other, the adapter's wait timed out first and
	// the run was unknown).
	taken := make([]string, len(takeovers))
	var wg sync.WaitGroup
	for i, id := range takeovers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.stop(ctx, id); err != nil {
				taken[i] = err.Error()
			}
		}()
	}
	wg.Wait()
	errs = append(errs, slices.DeleteFunc(taken, func(e string) bool { return e == "" })...)
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
