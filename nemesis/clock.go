package nemesis

import (
	"context"
	"errors"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"time"
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

func (clock) Name() string { return "clock" }

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
func pickClocks(env *Env, rng *rand.Rand) []clockTarget {
	nodes, clients := nodeClocks(env), clocksOf(env.ClientClock)
	if len(nodes) == 0 {
		return nil
	}
	out := []clockTarget{nodes[rng.IntN(len(nodes))]}
	if len(clients) > 0 && rng.IntN(3) == 0 {
		out = append(out, clients[rng.IntN(len(clients))])
	}
	return out
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

func (clock) Start(ctx context.Context, env *Env, rng *rand.Rand) (*Fault, error) {
	clocks := pickClocks(env, rng)
	if len(clocks) == 0 {
		return nil, errors.New("no node has a skewable clock")
	}
	names := make([]string, len(clocks))
	for i, c := range clocks {
		names[i] = c.node
	}
	set := func(ctx context.Context, off time.Duration) error {
		var errs []error
		for _, c := range clocks {
			errs = append(errs, c.skewer.SetClockOffset(ctx, c.node, off))
		}
		return errors.Join(errs...)
	}
	if rng.IntN(2) == 0 {
		off := randomOffset(rng)
		if err := set(ctx, off); err != nil {
			return nil, errors.Join(err, set(context.WithoutCancel(ctx), 0))
		}
		return &Fault{Nodes: names, Details: map[string]any{"mode": "step", "offset_ms": off.Milliseconds()},
			Stop: func(ctx context.Context) error { return set(ctx, 0) }}, nil
	}

	// Strobe: flip between two offsets (one of them often 0, i.e. real
	// time) every 50-200 ms until Stop, so the clock keeps jumping back and
	// forth while leases are taken and tokens made.
	a, b := randomOffset(rng), time.Duration(0)
	if rng.IntN(2) == 0 {
		b = randomOffset(rng)
	}
	period := between(rng, 50*time.Millisecond, 200*time.Millisecond).Round(time.Millisecond)
	if err := set(ctx, a); err != nil {
		return nil, errors.Join(err, set(context.WithoutCancel(ctx), 0))
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
	return &Fault{Nodes: names,
		Details: map[string]any{"mode": "strobe", "offsets_ms": []int64{a.Milliseconds(), b.Milliseconds()}, "period_ms": period.Milliseconds()},
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
