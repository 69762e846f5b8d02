package nemesis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencecheck/fencecheck/history"
)

// Scheduler runs each active nemesis on its own seeded schedule, records
// every start and stop in the history, and heals everything at the end.
// The schedule of a nemesis depends only on the seed and its name, so
// --seed reproduces it.
type Scheduler struct {
	Env      *Env
	Rec      *history.Recorder
	Seed     uint64
	Nemeses  []Nemesis
	nextID   atomic.Int64
	mu       sync.Mutex
	active   map[int64]*live
	Counts   map[string]*Count
	countsMu sync.Mutex
}

type live struct {
	nem   Nemesis
	fault *Fault
}

// Count is how often a nemesis acted, for the gate ("every requested fault
// actually took effect") and the report.
type Count struct {
	Started int    `json:"started"`
	Failed  int    `json:"failed"`
	Error   string `json:"last_error,omitempty"`
	// Waited counts tries that found every node held by another fault.
	Waited int `json:"waited_for_a_node,omitempty"`
}

// NewScheduler prepares a scheduler.
func NewScheduler(env *Env, rec *history.Recorder, seed uint64, nemeses []Nemesis) *Scheduler {
	s := &Scheduler{Env: env, Rec: rec, Seed: seed, Nemeses: nemeses, active: map[int64]*live{}, Counts: map[string]*Count{}}
	env.claims = &claims{by: map[string]string{}}
	for _, n := range nemeses {
		s.Counts[n.Name()] = &Count{}
	}
	return s
}

// Waited maps each nemesis that ever found every node it could act on held
// by another fault to how often.
func (s *Scheduler) Waited() map[string]int {
	s.countsMu.Lock()
	defer s.countsMu.Unlock()
	out := map[string]int{}
	for n, c := range s.Counts {
		if c.Waited > 0 {
			out[n] = c.Waited
		}
	}
	return out
}

// Active lists the names of the faults live right now (for progress lines).
func (s *Scheduler) Active() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, l := range s.active {
		out = append(out, l.nem.Name())
	}
	return out
}

// Run drives every nemesis until ctx ends. Faults still live then stay live
// until Heal.
func (s *Scheduler) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, n := range s.Nemeses {
		wg.Add(1)
		go func(n Nemesis) {
			defer wg.Done()
			s.loop(ctx, n)
		}(n)
	}
	wg.Wait()
}

func (s *Scheduler) loop(ctx context.Context, n Nemesis) {
	h := fnv.New64a()
	h.Write([]byte(n.Name()))
	rng := rand.New(rand.NewPCG(s.Seed, h.Sum64()))
	t := DefaultTiming
	if tn, ok := n.(Timed); ok {
		t = tn.Timing(s.Env)
	}
	for {
		if !sleep(ctx, between(rng, t.QuietMin, t.QuietMax)) {
			return
		}
		id := s.start(ctx, n, rng)
		// Every node it could take is held by another fault (a restart
		// in progress): try again shortly rather than skip a whole cycle.
		for id == busy {
			if !sleep(ctx, busyRetry) {
				return
			}
			id = s.start(ctx, n, rng)
		}
		if id < 0 {
			continue
		}
		if !sleep(ctx, between(rng, t.FaultMin, t.FaultMax)) {
			return // left live: Heal stops it
		}
		s.stop(context.WithoutCancel(ctx), id)
	}
}

// busy is start's answer when every node the nemesis could act on is held
// by another live fault; busyRetry is how soon it tries again.
const (
	busy      = -2
	busyRetry = 250 * time.Millisecond
)

func (s *Scheduler) start(ctx context.Context, n Nemesis, rng *rand.Rand) int64 {
	f, err := n.Start(ctx, s.Env, rng)
	if err != nil {
		s.Env.claims.releaseAll(n.Name())
	}
	s.countsMu.Lock()
	c := s.Counts[n.Name()]
	if errors.Is(err, ErrBusy) {
		c.Waited++
		s.countsMu.Unlock()
		return busy
	}
	if err != nil {
		c.Failed++
		c.Error = err.Error()
	} else {
		c.Started++
	}
	s.countsMu.Unlock()
	if err != nil {
		if ctx.Err() == nil {
			s.record(n.Name(), "error", -1, nil, map[string]any{"error": err.Error()})
		}
		return -1
	}
	id := s.nextID.Add(1)
	s.mu.Lock()
	s.active[id] = &live{nem: n, fault: f}
	s.mu.Unlock()
	s.record(n.Name(), "start", id, f.Nodes, f.Details)
	return id
}

func (s *Scheduler) stop(ctx context.Context, id int64) {
	s.mu.Lock()
	l, ok := s.active[id]
	delete(s.active, id)
	s.mu.Unlock()
	if !ok {
		return
	}
	var details map[string]any
	if l.fault.Stop != nil {
		if err := l.fault.Stop(ctx); err != nil {
			details = map[string]any{"error": err.Error()}
		}
	}
	s.Env.claims.releaseAll(l.nem.Name())
	s.record(l.nem.Name(), "stop", id, l.fault.Nodes, details)
}

// Heal stops every live fault and asks every nemesis that can to undo all
// faults of its kind. It is the final phase's first step.
func (s *Scheduler) Heal(ctx context.Context) error {
	s.mu.Lock()
	var ids []int64
	for id := range s.active {
		ids = append(ids, id)
	}
	s.mu.Unlock()
	for _, id := range ids {
		s.stop(ctx, id)
	}
	var errs []string
	for _, n := range s.Nemeses {
		if h, ok := n.(Healer); ok {
			if err := h.Heal(ctx, s.Env); err != nil {
				errs = append(errs, fmt.Sprintf("%s: %v", n.Name(), err))
			}
		}
	}
	s.record("heal", "stop", 0, nil, nil)
	if len(errs) > 0 {
		return fmt.Errorf("heal: %s", strings.Join(errs, "; "))
	}
	return nil
}

func (s *Scheduler) record(name, action string, id int64, nodes []string, details map[string]any) {
	extra := map[string]json.RawMessage{}
	put := func(k string, v any) {
		if b, err := json.Marshal(v); err == nil {
			extra[k] = b
		}
	}
	put("action", action)
	if id > 0 {
		put("id", id)
	}
	for k, v := range details {
		put(k, v)
	}
	s.Rec.Record(history.Event{Process: history.NemesisProcess, Type: history.Info, F: name,
		Node: strings.Join(nodes, ","), Extra: extra})
}

func between(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(rng.Int64N(int64(hi-lo)))
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
