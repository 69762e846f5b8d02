package nemesis

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/fencecheck/fencecheck/history"
)

// clock steps a node's wall clock forward or back by seconds to minutes, or
// strobes it between two offsets, through the target's injectable clock; a
// third of the time the clients' clock (the workload's, by which they judge
// their leases) jumps with it. The clients' clock alone does not make the
// nemesis applicable: a gate that asked for clock faults must not pass a
// system whose own clocks were never touched. Leases
// that follow the wall clock expire early or late, clients believe in leases
// that ran out, and tokens made from the wall clock stop growing. Stop and
// Heal set every offset back to zero, which is itself a step.
type clock struct{}

// Clock is the clock nemesis's name.
const Clock = "clock"

func (clock) Name() string { return Clock }

// Effects: wall clocks jump or strobe.
func (clock) Effects() []Effect { return []Effect{SkewsClocks} }

// Timing: skews last long enough that the skewed node hands out leases and
// tokens meanwhile even when other faults (restart, partition) keep it
// unreachable part of the time; both the start and the stop are steps.
func (clock) Timing(*Env) Timing {
	return Timing{QuietMin: 1 * time.Second, QuietMax: 3 * time.Second, FaultMin: 2 * time.Second, FaultMax: 5 * time.Second}
}

// clockTarget is one skewable clock: a node of the target or of the workload.
type clockTarget struct {
	skewer ClockSkewer
	node   string
}

// clocksOf lists the clocks cs can skew (none for nil).
func clocksOf(cs ClockSkewer) []clockTarget {
	var out []clockTarget
	if cs != nil {
		for _, n := range cs.ClockNodes() {
			out = append(out, clockTarget{skewer: cs, node: n})
		}
	}
	return out
}

// nodeClocks lists the target's skewable clocks.
func nodeClocks(env *Env) []clockTarget {
	cs, _ := env.Target.(ClockSkewer)
	return clocksOf(cs)
}

func clockTargets(env *Env) []clockTarget {
	return append(nodeClocks(env), clocksOf(env.ClientClock)...)
}

// pickClocks chooses the clocks one fault steps together: a node's, with the
// clients' a third of the time.
func pickClocks(env *Env, rng *rand.Rand) []string {
	nodes, clients := nodeClocks(env), clocksOf(env.ClientClock)
	if len(nodes) == 0 {
		return nil
	}
	out := []string{nodes[rng.IntN(len(nodes))].node}
	if len(clients) > 0 && rng.IntN(3) == 0 {
		out = append(out, clients[rng.IntN(len(clients))].node)
	}
	return out
}

// clockNamed finds the clock a plan names: a node's first, then the
// clients'.
func clockNamed(env *Env, name string) (clockTarget, bool) {
	for _, c := range clockTargets(env) {
		if c.node == name {
			return c, true
		}
	}
	return clockTarget{}, false
}

func (clock) Applicable(env *Env) (bool, string) {
	if len(nodeClocks(env)) == 0 {
		if _, ok := env.Target.(ClockSkewer); ok {
			why := "none of the target's nodes has a clock that can be skewed"
			if ce, ok := env.Target.(ClockExplainer); ok {
				var parts []string
				for node, reason := range ce.ClockUnreachable() {
					parts = append(parts, node+": "+reason)
				}
				sort.Strings(parts)
				if len(parts) > 0 {
					why += " (" + strings.Join(parts, "; ") + ")"
				}
			}
			return false, why
		}
		return false, "the target has no injectable clock (skewing only the clients' would not test it)"
	}
	return true, ""
}

// Clock offsets: 2 s to 2 min either way, so that a step is far beyond any
// lease and any tolerance for clock drift.
const (
	clockMinOffset = 2 * time.Second
	clockMaxOffset = 120 * time.Second
)

func randomOffset(rng *rand.Rand) time.Duration {
	d := between(rng, clockMinOffset, clockMaxOffset).Round(time.Millisecond)
	if rng.IntN(2) == 0 {
		return -d
	}
	return d
}

// clockParams: mode "step" (every clock of the plan to OffsetMS until the
// fault stops) or "strobe" (flip between OffsetsMS[0] and OffsetsMS[1]
// every PeriodMS).
type clockParams struct {
	Mode      string  `json:"mode"`
	OffsetMS  int64   `json:"offset_ms,omitempty"`
	OffsetsMS []int64 `json:"offsets_ms,omitempty"`
	PeriodMS  int64   `json:"period_ms,omitempty"`
	// OnGrant (a step only): the step is timed by a grant, as the guide's
	// aim at issuer-clock-back-regrant wants it (stepBackOnGrant).
	OnGrant bool `json:"on_grant,omitempty"`
}

func (clock) Params() any { return &clockParams{} }

func (clock) Draw(_ context.Context, env *Env, rng *rand.Rand) (Plan, error) {
	names := pickClocks(env, rng)
	if len(names) == 0 {
		return Plan{}, errors.New("no node has a skewable clock")
	}
	if rng.IntN(2) == 0 {
		return Plan{Nodes: names, Params: &clockParams{Mode: "step", OffsetMS: randomOffset(rng).Milliseconds()}}, nil
	}
	// Strobe: flip between two offsets (one of them often 0, i.e. real
	// time) every 50-200 ms until Stop, so the clock keeps jumping back and
	// forth while leases are taken and tokens made.
	a, b := randomOffset(rng), time.Duration(0)
	if rng.IntN(2) == 0 {
		b = randomOffset(rng)
	}
	period := between(rng, 50*time.Millisecond, 200*time.Millisecond).Round(time.Millisecond)
	return Plan{Nodes: names, Params: &clockParams{Mode: "strobe",
		OffsetsMS: []int64{a.Milliseconds(), b.Milliseconds()}, PeriodMS: period.Milliseconds()}}, nil
}

// stepsBackAtOnce: a clock fault on one of nodes that sets the clock back
// as it starts (a step back) or within a period (a strobe between two
// offsets), not only when it heals (a step forward goes back at its end,
// seconds later).
func stepsBackAtOnce(p Plan, nodes map[string]bool) bool {
	cp, ok := p.Params.(*clockParams)
	if !ok || !actsOn(p, nodes) {
		return false
	}
	switch cp.Mode {
	case "step":
		return cp.OffsetMS < 0
	case "strobe":
		return len(cp.OffsetsMS) == 2 && cp.OffsetsMS[0] != cp.OffsetsMS[1]
	}
	return false
}

func (clock) CheckPlan(env *Env, p Plan) error {
	cp, err := paramsOf[clockParams](p)
	if err != nil {
		return err
	}
	if len(p.Nodes) == 0 {
		return errors.New("a clock fault names at least one clock")
	}
	for _, n := range p.Nodes {
		if _, ok := clockNamed(env, n); !ok {
			return fmt.Errorf("%s has no clock that can be skewed", n)
		}
	}
	switch cp.Mode {
	case "step":
	case "strobe":
		if len(cp.OffsetsMS) != 2 || cp.PeriodMS <= 0 {
			return errors.New("mode strobe needs two offsets_ms and a positive period_ms")
		}
		if cp.OnGrant {
			return errors.New("on_grant times a step, not a strobe")
		}
	default:
		return fmt.Errorf("mode must be step or strobe, got %q", cp.Mode)
	}
	return nil
}

func (clock) Start(ctx context.Context, env *Env, p Plan) (*Fault, error) {
	cp, err := paramsOf[clockParams](p)
	if err != nil {
		return nil, err
	}
	var clocks []clockTarget
	for _, n := range p.Nodes {
		c, ok := clockNamed(env, n)
		if !ok {
			return nil, fmt.Errorf("%s has no clock that can be skewed", n)
		}
		clocks = append(clocks, c)
	}
	if len(clocks) == 0 {
		return nil, errors.New("no node has a skewable clock")
	}
	set := func(ctx context.Context, off time.Duration) error {
		var errs []error
		for _, c := range clocks {
			errs = append(errs, c.skewer.SetClockOffset(ctx, c.node, off))
		}
		return errors.Join(errs...)
	}
	ms := func(v int64) time.Duration { return time.Duration(v) * time.Millisecond }
	if cp.Mode == "step" {
		off := ms(cp.OffsetMS)
		details := map[string]any{history.ExtraMode: "step", "offset_ms": cp.OffsetMS}
		if !cp.OnGrant {
			if err := set(ctx, off); err != nil {
				return nil, applyFailed("step", p.Nodes, errors.Join(err, set(context.WithoutCancel(ctx), 0)))
			}
			return &Fault{Nodes: p.Nodes, Details: details, Stop: func(ctx context.Context) error { return set(ctx, 0) }}, nil
		}
		return stepOnGrant(ctx, env, p, off, set, details)
	}
	if cp.Mode != "strobe" || len(cp.OffsetsMS) != 2 || cp.PeriodMS <= 0 {
		return nil, fmt.Errorf("clock mode %q with offsets %v and period %d ms is not a step or a strobe", cp.Mode, cp.OffsetsMS, cp.PeriodMS)
	}
	a, b, period := ms(cp.OffsetsMS[0]), ms(cp.OffsetsMS[1]), ms(cp.PeriodMS)
	if err := set(ctx, a); err != nil {
		return nil, applyFailed("strobe", p.Nodes, errors.Join(err, set(context.WithoutCancel(ctx), 0)))
	}
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	var mu sync.Mutex
	var strobeErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(period)
		defer tick.Stop()
		cur := a
		for {
			select {
			case <-sctx.Done():
				return
			case <-tick.C:
			}
			if cur == a {
				cur = b
			} else {
				cur = a
			}
			if err := set(sctx, cur); err != nil && sctx.Err() == nil {
				mu.Lock()
				strobeErr = err
				mu.Unlock()
			}
		}
	}()
	var once sync.Once
	return &Fault{Nodes: p.Nodes,
		Details: map[string]any{history.ExtraMode: "strobe", "offsets_ms": []int64{cp.OffsetsMS[0], cp.OffsetsMS[1]}, "period_ms": cp.PeriodMS},
		Stop: func(ctx context.Context) error {
			var err error
			once.Do(func() {
				cancel()
				wg.Wait()
				mu.Lock()
				err = strobeErr
				mu.Unlock()
			})
			return errors.Join(err, set(ctx, 0))
		}}, nil
}

// Heal sets every clock back to real time.
func (clock) Heal(ctx context.Context, env *Env) error {
	var errs []error
	for _, t := range clockTargets(env) {
		errs = append(errs, t.skewer.SetClockOffset(ctx, t.node, 0))
	}
	return errors.Join(errs...)
}

// stepBackOnGrant is the guide's plan for issuer-clock-back-regrant: a
// step back on one of nodes' clocks (with the clients' a third of the
// time, as drawn), timed by a grant (OnGrant). A strobe, which the draw
// gives one time in two, makes the situation only with two grants of one
// lock inside it at least two periods apart, and under --nemesis all the
// one node of redis or the reference is down or cut off for much of a
// fault phase: 1-2 grants a second there, so of a run's 4-6 aimed clock
// faults, all strobes but one or two, 0-2 made it (redis, seeds 1 and 2).
func stepBackOnGrant(_ context.Context, env *Env, rng *rand.Rand, nodes map[string]bool) (Plan, error) {
	var at []string
	for _, c := range nodeClocks(env) {
		if nodes[c.node] {
			at = append(at, c.node)
		}
	}
	if len(at) == 0 {
		return Plan{}, errors.New("no node to aim at has a skewable clock")
	}
	names := []string{at[rng.IntN(len(at))]}
	if clients := clocksOf(env.ClientClock); len(clients) > 0 && rng.IntN(3) == 0 {
		names = append(names, clients[rng.IntN(len(clients))].node)
	}
	off := -between(rng, clockMinOffset, clockMaxOffset).Round(time.Millisecond)
	return Plan{Nodes: names, Params: &clockParams{Mode: "step", OffsetMS: off.Milliseconds(), OnGrant: true}}, nil
}

// stepOnGrant steps p's clocks to off right after the system grants a
// lock while no fault holds the node (a crash, a power loss), and starts
// no outage until a lock sent for after the step is granted (ackWait at
// most): so the step back falls between two grants, with the node serving
// on both sides, and the grant after it is made while the clock is still
// back. A step at a drawn time is followed by a grant only when no crash
// or partition of the node takes the time after it. New outages are held
// back from the step to that grant only, milliseconds on a serving
// system: held while the step waited for the system to be whole, they
// waited seconds and the crash situations fell to 2 (redis); held for the
// whole fault, to 1-2 (docs/coverage.md).
func stepOnGrant(ctx context.Context, env *Env, p Plan, off time.Duration, set func(context.Context, time.Duration) error, details map[string]any) (*Fault, error) {
	details["on_grant"] = true
	node := p.Nodes[0]
	anyNode := behindFront(env, node)
	grant := func(a history.Ack) bool { return a.F == history.Acquire && (anyNode || a.Node == node) }
	unhush, whole := func() {}, false
	details["timed"] = false
	if env.Acks != nil {
		wctx, cancel := context.WithTimeout(ctx, ackWait)
		for !whole {
			ack, err := env.Acks.Next(wctx, func(a history.Ack) bool { return grant(a) && !a.Sent })
			if err != nil {
				break
			}
			var yielded bool
			if unhush, whole, yielded = env.claims.hushFree(p.Nodes); whole {
				details["timed"], details["grant_index"] = true, ack.Index
				if yielded {
					details["hush_yielded"] = true
				}
			}
		}
		cancel()
		if ctx.Err() != nil {
			if whole {
				unhush()
			}
			return nil, ctx.Err()
		}
	}
	if !whole {
		// No grant with the system whole: stepped all the same, and
		// outages held off for the grant after it if none is live.
		if unhush, whole, _ = env.claims.hushFree(p.Nodes); !whole {
			unhush = func() {}
		}
	}
	if err := set(ctx, off); err != nil {
		unhush()
		return nil, applyFailed("step", p.Nodes, errors.Join(err, set(context.WithoutCancel(ctx), 0)))
	}
	f := &Fault{Nodes: p.Nodes, Details: details}
	// The grant after the step: an acquire sent after it, then granted.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ackWait)
	regrant := make(chan history.Ack, 1)
	go func() {
		defer close(regrant)
		defer unhush()
		if env.Acks == nil {
			return
		}
		sent := map[string]bool{} // Acks calls the match one at a time
		ack, err := env.Acks.Next(wctx, func(a history.Ack) bool {
			if !grant(a) {
				return false
			}
			if a.Sent {
				sent[a.Key] = true
				return false
			}
			return sent[a.Key]
		})
		if err == nil {
			regrant <- ack
		}
	}()
	f.Stop = func(ctx context.Context) error {
		cancel()
		if ack, ok := <-regrant; ok {
			f.StopDetails = map[string]any{"regrant_index": ack.Index}
		}
		return set(ctx, 0)
	}
	return f, nil
}
