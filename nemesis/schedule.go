package nemesis

import (
	"context"
	"encoding/json"
	"errors"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencecheck/fencecheck/history"
)

// Scheduler runs the faults of a run and records every start and stop in
// the history. It either draws them (each active nemesis on its own seeded
// schedule, which depends only on the seed and the nemesis's name, so --seed
// reproduces it) or carries out a schedule given to it (Replay). Either way
// it records what it planned (Planned: the run's schedule.json), and it
// heals everything at the end.
type Scheduler struct {
	Env     *Env
	Rec     *history.Recorder
	Seed    uint64
	Nemeses []Nemesis
	// Replay, when set, is the schedule to carry out instead of drawing one
	// (NewReplay).
	Replay *Schedule
	// guide, when set, conducts the faults on nodes in fault and calm
	// phases (Guide, guide.go); nil: each nemesis draws on its own.
	guide  *guide
	nextID atomic.Int64
	// nextClaim numbers the claims on nodes (a fault that fails to start
	// has one too, but no id).
	nextClaim atomic.Int64
	mu        sync.Mutex
	active    map[int64]*live
	// planned are the faults started or tried, in start order.
	planned  []Scheduled
	Counts   map[string]*Count
	countsMu sync.Mutex
}

type live struct {
	nem       Nemesis
	fault     *Fault
	claim     int64 // what holds its nodes in Env.claims
	takesOver bool  // its plan took its nodes over (Plan.TakesOver)
	onClients bool  // it touches no node (OnClients)
}

// ApplyError is a fault that was chosen but did not apply (a rule that
// could not be set, a clock that could not be moved): its mode and nodes
// are recorded with the error event, so that a mode that never applied is
// seen even when other modes of the same nemesis did (the analysis's gate).
type ApplyError struct {
	Mode  string
	Nodes []string
	Err   error
}

func (e *ApplyError) Error() string { return e.Err.Error() }
func (e *ApplyError) Unwrap() error { return e.Err }

// applyFailed wraps err as the failure of a fault of mode on nodes.
func applyFailed(mode string, nodes []string, err error) error {
	return &ApplyError{Mode: mode, Nodes: nodes, Err: err}
}

// NewScheduler prepares a scheduler that draws faults from seed.
func NewScheduler(env *Env, rec *history.Recorder, seed uint64, nemeses []Nemesis) *Scheduler {
	s := &Scheduler{Env: env, Rec: rec, Seed: seed, Nemeses: nemeses, active: map[int64]*live{}, Counts: map[string]*Count{}}
	env.claims = newClaims()
	for _, n := range nemeses {
		s.Counts[n.Name()] = &Count{}
	}
	return s
}

// NewReplay prepares a scheduler that carries out sched with nemeses (one
// per nemesis the schedule names; Schedule.CheckTarget has said they apply).
// seed is the run's, recorded with what it carries out.
func NewReplay(env *Env, rec *history.Recorder, seed uint64, sched *Schedule, nemeses []Nemesis) *Scheduler {
	s := NewScheduler(env, rec, seed, nemeses)
	s.Replay = sched
	if len(sched.Calm) > 0 {
		s.followCalm()
	}
	return s
}

// Guide makes the scheduler draw by the guided schedule (guide.go): the
// nemeses that act on nodes in fault phases, each fault aimed by the live
// coverage, between calm phases. A replay ignores it.
func (s *Scheduler) Guide() {
	s.guide = &guide{lengths: defaultPhases}
	s.Env.guided = true
	if slices.ContainsFunc(s.Nemeses, func(n Nemesis) bool { _, ok := n.(OnClients); return !ok }) {
		s.followCalm() // some nemesis is conducted: calm phases will come
	}
}

// followCalm tells the workload that calm phases will come, so its idle
// probes wait for them (CalmFollower).
func (s *Scheduler) followCalm() {
	if cf, ok := s.Env.Holders.(CalmFollower); ok {
		cf.FollowCalm()
	}
}

// announceCalm tells the workload that a calm phase began, lasting until.
func (s *Scheduler) announceCalm(until time.Time) {
	if cf, ok := s.Env.Holders.(CalmFollower); ok {
		cf.Calm(until)
	}
}

// replayCalm tells the workload of a replayed schedule's calm phases at
// their times, as the guided run that drew them did: its idle probes then
// leave their keys alone where they did, between the same faults.
func (s *Scheduler) replayCalm(ctx context.Context) {
	origin := s.Rec.Start()
	for _, p := range s.Replay.Calm {
		if !sleep(ctx, time.Until(origin.Add(p.Start))) {
			return
		}
		s.announceCalm(origin.Add(p.End()))
	}
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

// Planned is the schedule the run carried out so far: every fault it
// started or tried to start, with its plan, start and length (as
// schedule.json records it). mainPhase and nemesis describe the run.
func (s *Scheduler) Planned(mainPhase time.Duration, nemesis string) *Schedule {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := &Schedule{Version: ScheduleVersion, Seed: s.Seed, Nemesis: nemesis, MainPhase: mainPhase,
		Faults: append([]Scheduled(nil), s.planned...)}
	sort.SliceStable(out.Faults, func(i, j int) bool { return out.Faults[i].Start < out.Faults[j].Start })
	if s.guide != nil && s.Replay == nil {
		out.Mode = ModeGuided
		s.guide.mu.Lock()
		out.Calm = append([]Phase(nil), s.guide.phases...)
		s.guide.mu.Unlock()
	}
	if s.Replay != nil {
		out.Calm = s.Replay.Calm // announced to the workload as they were
	}
	return out
}

// Run drives every nemesis until ctx ends: each draws its faults, or, with
// Replay, carries out its faults of the schedule in order. Faults still live
// then stay live until Heal.
func (s *Scheduler) Run(ctx context.Context) {
	var wg sync.WaitGroup
	nemeses := s.Nemeses
	if s.guide != nil && s.Replay == nil {
		// The nemeses that act on nodes are the conductor's; the clients'
		// faults keep their own draws (a node pause of theirs waits for
		// a fault phase: drawAndStart).
		var conducted []Nemesis
		nemeses = nil
		for _, n := range s.Nemeses {
			if _, ok := n.(OnClients); ok {
				nemeses = append(nemeses, n)
			} else {
				conducted = append(conducted, n)
			}
		}
		wg.Add(1)
		go func() { defer wg.Done(); s.conduct(ctx, conducted) }()
	}
	if s.Replay != nil && len(s.Replay.Calm) > 0 {
		wg.Add(1)
		go func() { defer wg.Done(); s.replayCalm(ctx) }()
	}
	for _, n := range nemeses {
		wg.Add(1)
		go func(n Nemesis) {
			defer wg.Done()
			if s.Replay != nil {
				s.replay(ctx, n)
			} else {
				s.loop(ctx, n)
			}
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
		// The guide may have aimed this nemesis meanwhile (aimOnly): one
		// fault of it at a time, as its own draws have.
		if !s.awaitOwnTurn(ctx, n) {
			return
		}
		first := time.Now()
		id, d := s.drawAndStart(ctx, n, rng, t, time.Time{})
		// Every node it could take is held by another fault (a restart
		// in progress): try again shortly rather than skip a whole cycle.
		for id == busy {
			if !sleep(ctx, busyRetry) {
				return
			}
			id, d = s.drawAndStart(ctx, n, rng, t, first)
		}
		// Under the guided schedule a fault drawn outside a fault phase
		// waits for the next one and is drawn again as it begins: a
		// whole quiet period more would leave the clients' link faults
		// a fraction of each phase.
		for id == outsidePhase {
			if !s.guide.awaitFaultPhase(ctx, clientFault{on: onClientsOnly(n, Plan{}), spoils: spoilsProbes(n)}) || !s.awaitOwnTurn(ctx, n) {
				return
			}
			id, d = s.drawAndStart(ctx, n, rng, t, time.Time{})
		}
		if id < 0 {
			continue
		}
		if !sleep(ctx, d) {
			return // left live: Heal stops it
		}
		s.endOrKeep(ctx, id)
	}
}

// awaitOwnTurn waits while the guide has aimed n (one fault of it at a
// time, as its own draws have), also after a wait for a fault phase: a
// node pause drawn as one began froze the other redis adapter 50 ms after
// an aimed freeze had taken the first, and nothing could overtake the
// frozen write. False when ctx ended.
func (s *Scheduler) awaitOwnTurn(ctx context.Context, n Nemesis) bool {
	for s.guide != nil && (s.live(n.Name()) || s.guide.isStarting(n.Name())) {
		if !sleep(ctx, busyRetry) {
			return false
		}
	}
	return true
}

// drawAndStart draws one fault of n and its length, and starts it: the
// fault's id and length, busy when every node it could take is held, or -1
// when it could not be drawn or started. waitedSince is when the nemesis
// first tried, when it had to wait (zero otherwise).
func (s *Scheduler) drawAndStart(ctx context.Context, n Nemesis, rng *rand.Rand, t Timing, waitedSince time.Time) (int64, time.Duration) {
	p, err := n.Draw(ctx, s.Env, rng)
	if errors.Is(err, ErrBusy) {
		// It waits for whichever held node is freed first.
		s.waits(n, orNow(waitedSince), s.Env.claims.held())
		return busy, 0
	}
	if errors.Is(err, errNotNow) {
		s.Env.claims.served(n.Name())
		return -1, 0
	}
	if err != nil {
		s.Env.claims.served(n.Name())
		s.failed(ctx, n, err)
		return -1, 0
	}
	// Under the guided schedule a quiet holder pause goes in a calm phase
	// that outlasts its hush (the stall and half a lease), where no outage
	// comes anyway: in a fault phase its hush held the
	// conductor's faults back for seconds (a fifth of a 30 s run's fault
	// time, measured).
	if stall, quiet := quietHolderPause(p); s.guide != nil && quiet && s.guide.calmLeft() < stall+s.Env.TTL/2 {
		s.Env.claims.served(n.Name())
		return -1, 0
	}
	// Under the guided schedule a fault waits for a fault phase and ends
	// with it, but for holder pauses, which go on through calm phases, and
	// the clients' link faults, which go on through calm phases not held
	// for the idle probes (guide.clientWindow).
	window := time.Duration(math.MaxInt64)
	if s.guide != nil && !calmToo(n, p) {
		left, ok := s.guide.faultWindow()
		if onClientsOnly(n, p) {
			left, ok = s.guide.clientWindow(spoilsProbes(n))
		}
		if !ok {
			s.Env.claims.served(n.Name())
			return outsidePhase, 0
		}
		window = left
	}
	// The length is drawn only once the fault started (as it always was):
	// a failed start leaves the rest of the schedule as the seed had it.
	return s.start(ctx, n, p, func() time.Duration { return min(between(rng, t.FaultMin, t.FaultMax), window) }, waitedSince)
}

// replay carries out n's faults of the schedule in start order, each at its
// start time (history time), for its length. A fault whose node is still
// held (the fault before it stopped a little late) waits for it.
func (s *Scheduler) replay(ctx context.Context, n Nemesis) {
	origin := s.Rec.Start()
	for _, f := range s.Replay.Faults {
		if f.Nemesis != n.Name() {
			continue
		}
		if !sleep(ctx, time.Until(origin.Add(f.Start))) {
			return
		}
		first := time.Now()
		length := func() time.Duration { return f.Duration }
		id, _ := s.start(ctx, n, f.Plan(), length, time.Time{})
		for id == busy {
			if !sleep(ctx, busyRetry/5) {
				return
			}
			id, _ = s.start(ctx, n, f.Plan(), length, first)
		}
		if id < 0 {
			continue
		}
		if !sleep(ctx, f.Duration) {
			return
		}
		s.endOrKeep(ctx, id)
	}
}

type mainPhaseKey struct{}

// withMainPhase gives a start's context the main phase's: a fault that
// waits for its moment (a freeze for a write) gives up at its end, before
// it acts.
func withMainPhase(start, main context.Context) context.Context {
	return context.WithValue(start, mainPhaseKey{}, main)
}

// mainPhase is the main phase's context a start was given, or ctx itself.
func mainPhase(ctx context.Context) context.Context {
	if m, ok := ctx.Value(mainPhaseKey{}).(context.Context); ok {
		return m
	}
	return ctx
}

// startTimeout bounds a fault's start once the main phase's end no longer
// does (a kill waits for the death; a power loss also remounts).
const startTimeout = time.Minute

// busy is start's answer when every node the nemesis could act on is held
// by another live fault; busyRetry is how soon it tries again.
const (
	busy = -2
	// outsidePhase is drawAndStart's answer, under the guided schedule,
	// for a fault that must wait for a fault phase.
	outsidePhase = -3
	busyRetry    = 250 * time.Millisecond
)

// orNow is when a nemesis began to wait: since, or now on its first try.
func orNow(since time.Time) time.Time {
	if since.IsZero() {
		return time.Now()
	}
	return since
}

// waits counts that n found nodes held, and queues it for them.
func (s *Scheduler) waits(n Nemesis, since time.Time, nodes []string) {
	s.Env.claims.wait(n.Name(), since, nodes)
	s.count(n, func(c *Count) { c.Waited++ })
}

func (s *Scheduler) count(n Nemesis, fn func(*Count)) {
	s.countsMu.Lock()
	defer s.countsMu.Unlock()
	fn(s.Counts[n.Name()])
}

// failed counts and records a fault that could not be drawn or started. A
// try cut off by the end of the main phase (its context ended while the
// engine was still applying it) is neither: the history does not record it,
// and the count, which the gate and the tests read beside the history's,
// must say the same.
func (s *Scheduler) failed(ctx context.Context, n Nemesis, err error) {
	if ctx.Err() != nil {
		return
	}
	var ae *ApplyError
	mode, nodes := "", []string(nil)
	if errors.As(err, &ae) {
		mode, nodes = ae.Mode, ae.Nodes
	}
	details := map[string]any{history.ExtraError: err.Error()}
	if mode != "" {
		details[history.ExtraMode] = mode
	}
	s.record(n.Name(), history.FaultError, -1, nodes, details)
}

// start claims p's nodes when it takes them over, starts the fault and
// records it: in the history (start event) and in the planned schedule, with
// the length that length gives once the fault started. It returns the
// fault's id and length, busy when a node is held, or -1 when Start failed.
// waitedSince is when the nemesis first tried, when it had to wait.
func (s *Scheduler) start(ctx context.Context, n Nemesis, p Plan, length func() time.Duration, waitedSince time.Time) (int64, time.Duration) {
	claim := s.nextClaim.Add(1)
	since := orNow(waitedSince)
	if p.TakesOver && (s.Env.claims.yields(n.Name(), since, p.Nodes) || !s.Env.claims.claimAll(p.Nodes, claim)) {
		s.waits(n, since, p.Nodes)
		return busy, 0
	}
	if p.Outage && !s.Env.claims.startOutage(claim, waitedSince) {
		s.Env.claims.release(claim)
		s.waits(n, since, p.Nodes)
		return busy, 0
	}
	s.Env.claims.served(n.Name())
	// Times to the millisecond: finer would only record jitter.
	at := time.Duration(s.Rec.Since(time.Now())).Round(time.Millisecond)
	planned := Scheduled{Nemesis: n.Name(), Nodes: p.Nodes, TakesOver: p.TakesOver, Outage: p.Outage, Params: p.Params, Start: at, Why: p.why}
	if !waitedSince.IsZero() {
		planned.Waited = time.Since(waitedSince).Round(time.Millisecond)
	}
	// The main phase's end does not cut a start short: one that already
	// acted (a node killed, its death not yet seen) but returned the
	// context's error left the system faulted with nothing recorded to
	// undo it (CI: PostgreSQL killed at the end of a 5 s run, never
	// started again, every later run on that cluster failed). It finishes,
	// is recorded, and the heal undoes it.
	sctx, cancel := context.WithTimeout(withMainPhase(context.WithoutCancel(ctx), ctx), startTimeout)
	defer cancel()
	f, err := n.Start(sctx, s.Env, p)
	if errors.Is(err, ErrRefusedNow) {
		s.Env.claims.release(claim)
		return -1, 0
	}
	if err != nil {
		s.Env.claims.release(claim)
		s.failed(ctx, n, err)
		if ctx.Err() == nil {
			planned.Error = err.Error()
			s.plan(planned)
		}
		return -1, 0
	}
	id := s.nextID.Add(1)
	planned.ID, planned.Duration = id, length().Round(time.Millisecond)
	s.mu.Lock()
	s.active[id] = &live{nem: n, fault: f, claim: claim, takesOver: p.TakesOver, onClients: onClientsOnly(n, p)}
	s.mu.Unlock()
	s.plan(planned)
	s.record(n.Name(), history.FaultStart, id, f.Nodes, f.Details)
	return id, planned.Duration
}

func (s *Scheduler) plan(f Scheduled) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.planned = append(s.planned, f)
}

func (s *Scheduler) record(name, action string, id int64, nodes []string, details map[string]any) {
	extra := map[string]json.RawMessage{}
	put := func(k string, v any) {
		if b, err := json.Marshal(v); err == nil {
			extra[k] = b
		}
	}
	put(history.ExtraAction, action)
	if id > 0 {
		put(history.ExtraFaultID, id)
	}
	for k, v := range details {
		put(k, v)
	}
	e := history.Event{Process: history.NemesisProcess, Type: history.Info, F: name,
		Node: strings.Join(nodes, ","), Extra: extra}
	s.Rec.Record(e)
	// The count is read from the events, as the analysis reads a history's.
	s.countsMu.Lock()
	defer s.countsMu.Unlock()
	if c := s.Counts[name]; c != nil {
		c.Add(e)
	}
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
