package nemesis

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"time"
)

func init() { Register("clock", func() Nemesis { return clock{} }) }

// clock steps a node's wall clock forward or back by seconds to minutes, or
// strobes it between two offsets, through the target's injectable clock (and
// a client's, when the workload has one). Leases that follow the wall clock
// expire early or late, and tokens made from the wall clock stop growing.
// Stop and Heal set every offset back to zero, which is itself a step.
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

func clockTargets(env *Env) []clockTarget {
	var out []clockTarget
	for _, v := range []any{env.Target, env.Workload} {
		if cs, ok := v.(ClockSkewer); ok {
			for _, n := range cs.ClockNodes() {
				out = append(out, clockTarget{skewer: cs, node: n})
			}
		}
	}
	return out
}

func (clock) Applicable(env *Env) (bool, string) {
	if len(clockTargets(env)) == 0 {
		if _, ok := env.Target.(ClockSkewer); ok {
			return false, "none of the target's nodes has a clock that can be skewed"
		}
		return false, "neither the target nor the workload has an injectable clock"
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
	targets := clockTargets(env)
	if len(targets) == 0 {
		return nil, errors.New("no skewable clock")
	}
	t := targets[rng.IntN(len(targets))]
	if rng.IntN(2) == 0 {
		off := randomOffset(rng)
		if err := t.skewer.SetClockOffset(ctx, t.node, off); err != nil {
			return nil, err
		}
		return &Fault{Nodes: []string{t.node}, Details: map[string]any{"mode": "step", "offset_ms": off.Milliseconds()},
			Stop: func(ctx context.Context) error { return t.skewer.SetClockOffset(ctx, t.node, 0) }}, nil
	}

	// Strobe: flip between two offsets (one of them often 0, i.e. real
	// time) every 50-200 ms until Stop, so the clock keeps jumping back and
	// forth while leases are taken and tokens made.
	a, b := randomOffset(rng), time.Duration(0)
	if rng.IntN(2) == 0 {
		b = randomOffset(rng)
	}
	period := between(rng, 50*time.Millisecond, 200*time.Millisecond).Round(time.Millisecond)
	if err := t.skewer.SetClockOffset(ctx, t.node, a); err != nil {
		return nil, err
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
			if err := t.skewer.SetClockOffset(sctx, t.node, cur); err != nil && sctx.Err() == nil {
				mu.Lock()
				strobeErr = err
				mu.Unlock()
			}
		}
	}()
	var once sync.Once
	return &Fault{Nodes: []string{t.node},
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
			return errors.Join(err, t.skewer.SetClockOffset(ctx, t.node, 0))
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
