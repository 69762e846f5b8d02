package nemesis

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"sync"
	"time"
)

// The guided schedule (docs/coverage.md, "Guided faults"): instead of every
// nemesis drawing on its own clock, which under --nemesis all leaves some
// fault on the one stateful node nearly all the time, a conductor
// alternates fault phases and calm phases. In a calm phase no fault touches
// a node (the clients' faults go on), so a key or a free lock can be idle
// quietly, as the idle situations ask. In a fault phase each next fault is
// drawn toward the failure situation furthest below GuideTarget in the
// run's live coverage (Env.Coverage). Every fault lands in schedule.json
// with why it was chosen, and the calm phases too, so --schedule replays
// what was applied.

// Scheduler modes (harness.Config.NemesisMode).
const (
	ModeGuided = "guided"
	ModeRandom = "random"
)

// GuideTarget is how many times the guided schedule wants each situation
// created before it stops aiming at it.
const GuideTarget = 3

// OnClients is a nemesis whose faults act on the clients or their traffic
// (the proxies' faults, a holder pause), not on a node, at least for some
// plans: under the guided schedule it keeps its own draws, and every plan
// but a holder pause (calmToo) waits for a fault phase.
type OnClients interface{ OnClientsOnly(p Plan) bool }

func onClientsOnly(n Nemesis, p Plan) bool {
	oc, ok := n.(OnClients)
	return ok && oc.OnClientsOnly(p)
}

// calmToo says whether a fault may run in a calm phase: a holder pause
// (the seeds' scenario acts on the workload's own clients, not on a node
// or on the traffic the idle probes need).
func calmToo(n Nemesis, p Plan) bool {
	pp, ok := p.Params.(*pauseParams)
	return onClientsOnly(n, p) && ok && pp.Mode == PauseHolders
}

// Phase is a calm phase of a guided schedule, as schedule.json records it.
type Phase struct {
	Start    time.Duration `json:"start_ns"`
	Duration time.Duration `json:"duration_ns"`
	Why      string        `json:"why,omitempty"`
}

// End is when the phase ends.
func (p Phase) End() time.Duration { return p.Start + p.Duration }

// Phase lengths. A fault phase holds a few faults; a calm phase for an
// idle time T lasts T plus calmMargin, so the idle probes (T plus a little,
// on a round of about that period) leave a key and its lock alone inside
// it, with writes before and after; a calm phase nothing asks for is brief,
// only to keep the alternation.
type phaseLengths struct {
	faultMin, faultMax time.Duration
	calmMargin, brief  time.Duration
	// The conductor draws its next fault this long after the last.
	gapMin, gapMax time.Duration
	// whole: the calm phase before the first turn of a nemesis that
	// starts alone lasts at least this long (wholeFor).
	whole time.Duration
	// spare: the stretch spared from crashes after the first (spareFor;
	// 0: none).
	spare time.Duration
}

var defaultPhases = phaseLengths{faultMin: 4 * time.Second, faultMax: 6 * time.Second,
	calmMargin: 3500 * time.Millisecond, brief: time.Second,
	gapMin: 300 * time.Millisecond, gapMax: 900 * time.Millisecond, whole: wholeFor, spare: spareFor}

const (
	// clientsGap is the conductor's pause after starting a fault of the
	// clients' own nemeses, which holds no node.
	clientsGap = 20 * time.Millisecond
	// minFault is the shortest fault worth starting before a phase ends.
	minFault = 300 * time.Millisecond
	// exploreOneIn: one draw in this many ignores coverage, so the
	// faults no situation asks for (disk, crash-on-ack) still run.
	exploreOneIn = 6
	// aimTries bounds the redraws of a plan until it hits the wanted node.
	aimTries = 20
)

// laterPhase says whether a whole fault phase still fits after the
// longest calm phase calmFor holds, left before the main phase ends.
func (pl phaseLengths) laterPhase(bounded bool, left time.Duration) bool {
	var calm time.Duration
	for _, r := range remedies {
		calm = max(calm, r.idle+pl.calmMargin)
	}
	return bounded && left > pl.faultMax+calm
}

// calmFor is the calm phase to hold now, and why: long enough for the
// longest idle time of a situation below target that fits in left (the
// first in the table among equals), or brief when none is short.
func (pl phaseLengths) calmFor(cov map[string]int, left time.Duration) (time.Duration, string) {
	short := deficits(cov)
	best := -1
	for i, r := range remedies {
		if r.nemesis != "" || short[i] == 0 || r.idle+pl.calmMargin > left {
			continue
		}
		if best < 0 || r.idle > remedies[best].idle {
			best = i
		}
	}
	if best < 0 {
		return min(pl.brief, max(left, 0)), "brief: no quiet idle situation is short"
	}
	r := remedies[best]
	return r.idle + pl.calmMargin, fmt.Sprintf("%s %d of %d", r.situation, GuideTarget-short[best], GuideTarget)
}

// coverage is the live coverage, nil without a feed.
func (s *Scheduler) coverage() map[string]int {
	if s.Env.Coverage == nil {
		return nil
	}
	return s.Env.Coverage()
}

// aimCoverage is the live coverage the aims go by: with the situations of
// the aimed faults that just ended counted in (guide.credited).
func (s *Scheduler) aimCoverage() map[string]int {
	return s.guide.credited(s.coverage())
}

// conduct runs the guided schedule of the nemeses that act on nodes until
// ctx ends: the opening calm phase, then a fault phase, a calm phase, and
// again.
func (s *Scheduler) conduct(ctx context.Context, conducted []Nemesis) {
	h := fnv.New64a()
	h.Write([]byte("guide"))
	rng := rand.New(rand.NewPCG(s.Seed, h.Sum64()))
	deadline, bounded := ctx.Deadline()
	var faults sync.WaitGroup
	defer faults.Wait()
	left := func() time.Duration {
		if !bounded {
			return time.Duration(1 << 62)
		}
		return time.Until(deadline)
	}
	// calmBefore is how long the calm phase before this fault phase lasted.
	var calmBefore time.Duration
	// launch starts a's fault on its own goroutine: a start can take
	// seconds (an etcd member replaced, a container restarted), and the
	// conductor drew nothing meanwhile (etcd, 3 members: 4 s without a
	// fault in the first phase). Its draws come from a generator of its
	// own.
	launch := func(a aim, end time.Time) {
		frng := rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64()))
		s.guide.starting(a.nemesis.Name(), true)
		faults.Add(1)
		go func() {
			defer faults.Done()
			defer s.guide.starting(a.nemesis.Name(), false)
			s.conductOne(ctx, frng, a, end)
		}()
	}
	if d := opening(s.Env, conducted); d > 0 {
		s.guide.set(true, time.Now().Add(d))
		s.announceCalm(time.Now().Add(d))
		s.guide.calmPhase(Phase{Start: time.Duration(s.Rec.Since(time.Now())).Round(time.Millisecond),
			Duration: d.Round(time.Millisecond), Why: "opening: the workload alone, as long as a random draw's first quiet"})
		if !sleep(ctx, d) {
			return
		}
		calmBefore = d
	}
	for {
		pl := s.guide.lengths
		pl.whole = settleFor(s.Env, pl.whole)
		if n, ok := s.aloneFirst(conducted, calmBefore, pl.whole); ok {
			if !s.aloneTurn(ctx, rng, n, calmBefore, conducted, launch) {
				return
			}
		}
		// Its first turn waits for a calm phase that leaves the cluster
		// whole while one can still come: it neither extends this phase
		// nor drains it.
		deferAlone := left() > pl.whole+pl.faultMax
		begun := time.Now()
		end := begun.Add(between(rng, pl.faultMin, pl.faultMax))
		s.guide.set(false, end)
		extended := false
		for {
			if time.Until(end) < minFault {
				// A nemesis that never had a turn (its node held
				// all phase) gets one before the calm: a short run
				// must still try every fault it asked for. Where
				// another fault phase will come after the longest calm,
				// its first turn goes first there instead (etcd, 3
				// members, under load: the first phase ran on to 13 s
				// for the last first turns, and with the long calm
				// after it the 30 s run had no second fault phase).
				if pl.laterPhase(bounded, left()) || !s.someUntried(s.notDeferred(conducted, deferAlone)) || time.Since(begun) >= 2*pl.faultMax {
					break
				}
				end = time.Now().Add(pl.gapMax + minFault)
				s.guide.set(false, end)
				extended = true
			}
			free := slices.DeleteFunc(s.free(conducted), s.spares)
			// In the phase's extension, no new fault while one that
			// starts alone awaits its first turn: the live ones end,
			// and its turn comes.
			drain := extended && !deferAlone && s.drainForAlone(conducted, free)
			holdsNoNode := false
			var applied chan struct{}
			if a, ok := nextFault(s.Env, s.aimCoverage(), free, s.aimOnly(conducted), s.tried(), rng); ok && !drain {
				// A fault of the clients' own nemeses (a strip) holds
				// no node: the next node fault need not wait a gap
				// for it (it took the second turn of many a run). Nor
				// does one that leaves its node serving (a clock step
				// back): after its first turn, the crashes' came a gap
				// later and the bugs they show 0.5-1 s later (memory).
				// That one is waited for until it is applied (the step
				// comes on the next grant), a gap at most: a crash
				// armed 20 ms after it held the node, and the step
				// waited out the crash (the python example, 1.3 s).
				holdsNoNode = !slices.Contains(conducted, a.nemesis) || a.keepsUp
				if a.keepsUp {
					applied = make(chan struct{})
					a.applied = applied
				}
				launch(a, end)
			}
			gap := between(rng, pl.gapMin, pl.gapMax)
			if applied != nil {
				select {
				case <-applied:
				case <-time.After(gap):
				case <-ctx.Done():
					return
				}
			}
			if holdsNoNode {
				gap = clientsGap
			}
			if !sleep(ctx, gap) {
				return
			}
		}
		if !sleep(ctx, time.Until(end)) {
			return
		}
		// A brief calm makes nothing the guide aims at: while a node fault
		// is still on at the phase's end (an adapter frozen past a lease,
		// a member starting again), the phase runs on instead of waiting
		// for it to end (etcd, 3 members: from 24 to 28.8 s of a 30 s run
		// no fault began, the brief calm waiting for a 4 s freeze).
		if d, _ := s.nextCalm(pl, conducted, left()); d <= pl.brief && s.nodeFaultOn() {
			calmBefore = 0
			continue
		}
		ended := s.nodeFaultsEnd(ctx, stuckFault)
		if ctx.Err() != nil {
			return
		}
		if !ended {
			continue // a fault that could not be undone waits for the heal: no calm then
		}
		d, why := s.nextCalm(pl, conducted, left())
		at := time.Duration(s.Rec.Since(time.Now())).Round(time.Millisecond)
		calmStart := time.Now()
		s.guide.set(true, time.Now().Add(d))
		s.guide.forIdle(d > pl.brief)
		s.announceCalm(time.Now().Add(d))
		s.guide.calmPhase(Phase{Start: at, Duration: d.Round(time.Millisecond), Why: why})
		if !sleep(ctx, d) {
			return
		}
		if !s.extendCalm(ctx, time.Now().Add(-d), d) {
			return
		}
		calmBefore = time.Since(calmStart)
	}
}

// nextCalm is the calm phase to hold after a fault phase, left before the
// main phase ends, and why: as long as a short idle situation asks
// (calmFor), or the cluster whole for a nemesis that starts alone.
func (s *Scheduler) nextCalm(pl phaseLengths, conducted []Nemesis, left time.Duration) (time.Duration, string) {
	d, why := pl.calmFor(s.coverage(), left)
	if n, ok := s.aloneAwaits(conducted); ok && d < pl.whole && left > pl.whole+pl.faultMin {
		d, why = pl.whole, fmt.Sprintf("%s; whole for %s's first turn", why, n.Name())
	}
	return d, why
}

// liveNodes are the nodes of the named nemesis's live fault; nil when none
// is live.
func (s *Scheduler) liveNodes(name string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range s.active {
		if l.nem.Name() == name {
			return append([]string{}, l.fault.Nodes...)
		}
	}
	return nil
}

// maxCalmExtension bounds how long a calm phase is held past its end for
// the idle probes' late writes.
const maxCalmExtension = 5 * time.Second

// extendCalm holds the calm phase begun at begun (planned to last d) on
// while the workload's idle probes still need it (CalmFollower.CalmNeeded:
// a probe whose holders' cycles took seconds on a system still recovering
// from the fault phase, whose late write would come after the phase's
// end), at most maxCalmExtension; the recorded phase says so. False when
// ctx ended.
func (s *Scheduler) extendCalm(ctx context.Context, begun time.Time, d time.Duration) bool {
	cf, ok := s.Env.Holders.(CalmFollower)
	if !ok {
		return true
	}
	need := cf.CalmNeeded()
	if latest := begun.Add(d + maxCalmExtension); need.After(latest) {
		need = latest
	}
	if !time.Now().Before(need) {
		return true
	}
	s.guide.set(true, need)
	s.announceCalm(need)
	s.guide.extendLast(need.Sub(begun).Round(time.Millisecond))
	return sleep(ctx, time.Until(need))
}

// opening is the calm phase a guided run begins with: the shortest quiet
// that the conducted nemeses' own draws would begin with (Timing.QuietMin),
// so no fault touches a node earlier than the random draw would let it.
// A bug the workload shows with no fault at all (a resource that accepts an
// equal token, a forged one, or no token) shows in its first cycles, a
// tenth of a second or so; a run whose first fault phase began at once
// started a restart, a crash on the first acknowledgement or a clock step
// on the clients within milliseconds, and faults then followed each other
// on the node, so those cycles ran against a node that was down or a
// client whose lease had run out by its own clock, and the find waited
// for one that slipped between faults (seconds later, measured in
// docs/coverage.md).
func opening(env *Env, conducted []Nemesis) time.Duration {
	var out time.Duration
	for i, n := range conducted {
		t := DefaultTiming
		if tn, ok := n.(Timed); ok {
			t = tn.Timing(env)
		}
		if i == 0 || t.QuietMin < out {
			out = t.QuietMin
		}
	}
	return out
}

// conductOne starts a's fault in a fault phase ending at end, and stops
// it when its time is up. While the nodes it needs are held (another
// fault, a quiet holder pause's hush) it tries again shortly, as a
// nemesis's own loop does, so the claims hand it the node when its turn
// comes.
func (s *Scheduler) conductOne(ctx context.Context, rng *rand.Rand, a aim, end time.Time) {
	isApplied := func() {}
	if a.applied != nil {
		isApplied = sync.OnceFunc(func() { close(a.applied) })
	}
	defer isApplied()
	n := a.nemesis
	t := DefaultTiming
	if tn, ok := n.(Timed); ok {
		t = tn.Timing(s.Env)
	}
	shortest, longest := t.FaultMin, t.FaultMax
	switch {
	case a.short:
		// The shortest quarter: an edge situation is made however long
		// the fault, and each tenth of a second a node is down is one
		// the next fault waits (a restart's 0.3-1.5 s: 0.3-0.6 s).
		longest = t.FaultMin + (t.FaultMax-t.FaultMin)/4
	case a.long:
		shortest = (t.FaultMin + t.FaultMax) / 2
	}
	// A fault cut by the phase's end still gets its shortest length (up to
	// a second): a partition of a tenth of a second cut nothing (etcd, 3
	// members, a start that ran past the end).
	floor := max(minFault, min(t.FaultMin, time.Second))
	if a.long {
		// A situation made while the fault lasts needs its length even
		// where the phase ends sooner (a node frozen 1 s, cut by the
		// phase's end, held no write past its lease: etcd, four such
		// pauses, no write overtaken).
		floor = max(floor, shortest)
	}
	// A situation made at the fault's end (a node back from a crash, a
	// clock stepped back) needs the run to go on after it, the node
	// serving again and a lock granted: an edge fault ends edgeRoom before
	// the main phase does, or is not started (etcd, redis: the last clock
	// step or crash of a run ended after the main phase, and made nothing).
	runEnd, bounded := ctx.Deadline()
	lateEdge := func() bool { return a.short && bounded && time.Until(runEnd)-edgeRoom < floor }
	length := func() time.Duration {
		d := min(between(rng, shortest, longest), time.Until(end))
		if a.short && bounded {
			d = min(d, time.Until(runEnd)-edgeRoom)
		}
		return max(d, floor)
	}
	var waitedSince time.Time
	for {
		if lateEdge() || s.spares(n) {
			s.Env.claims.served(n.Name())
			return
		}
		p, err := s.drawAimed(ctx, a, rng)
		switch {
		case errors.Is(err, ErrBusy):
			waitedSince = orNow(waitedSince)
			s.waits(n, waitedSince, s.Env.claims.held())
		case errors.Is(err, errNotNow):
			s.Env.claims.served(n.Name())
			return
		case err != nil:
			s.Env.claims.served(n.Name())
			s.failed(ctx, n, err)
			return
		default:
			id, d := s.start(ctx, n, p, length, waitedSince)
			if id != busy {
				isApplied()
			}
			if id == busy {
				waitedSince = orNow(waitedSince)
				break
			}
			if id < 0 {
				return
			}
			if a.situation != "" {
				if cov := s.coverage(); cov != nil {
					s.guide.awaiting(a.situation, cov[a.situation], time.Now().Add(d))
				}
			}
			if sleep(ctx, d) && s.holdOn(ctx, id) {
				s.endOrKeep(ctx, id)
			}
			s.crashEnded(n)
			return
		}
		if time.Until(end) < minFault+busyRetry || !sleep(ctx, busyRetry) {
			s.Env.claims.served(n.Name())
			return
		}
	}
}

// edgeRoom is how long before the main phase's end a fault aimed at a
// situation made at its end must end: a node's start (an etcd member's
// takes a second or more) and a grant after it.
const edgeRoom = 1500 * time.Millisecond

// drawAimed draws a's nemesis's plan until it hits a's nodes as its
// situation needs (a few tries; ErrBusy otherwise).
func (s *Scheduler) drawAimed(ctx context.Context, a aim, rng *rand.Rand) (Plan, error) {
	var p Plan
	var err error
	for range aimTries {
		err = errOwnDraw
		if a.plan != nil {
			p, err = a.plan(ctx, s.Env, rng, a.nodes)
		}
		if errors.Is(err, errOwnDraw) {
			p, err = a.nemesis.Draw(ctx, s.Env, rng)
		}
		if err != nil {
			return p, err
		}
		if a.nodes == nil || a.hits(p, a.nodes) {
			p.why = a.why
			return p, nil
		}
	}
	// Every node it should hit is held (by another fault, in its
	// start, or hushed): wait for one, as for a busy node, rather than
	// spend the turn where the situation cannot be made (redis: a restart
	// aimed at the issuer's state went to an adapter, twice in one phase,
	// while a power loss held the one node keeping it).
	return p, ErrBusy
}

// free are the conducted nemeses that may have a fault now: none live or
// being started, and none that must be alone while another is on.
func (s *Scheduler) free(conducted []Nemesis) []Nemesis {
	busy := map[string]bool{}
	for _, n := range conducted {
		if s.live(n.Name()) || s.guide.isStarting(n.Name()) {
			busy[n.Name()] = true
		}
	}
	breaks := slices.ContainsFunc(conducted, func(o Nemesis) bool { return busy[o.Name()] && !keepsWhole(o) })
	aloneOn := slices.ContainsFunc(conducted, func(o Nemesis) bool { return busy[o.Name()] && alone(o) })
	var out []Nemesis
	for _, n := range conducted {
		if busy[n.Name()] {
			continue
		}
		if alone(n) && breaks || aloneOn && !keepsWhole(n) {
			continue
		}
		out = append(out, n)
	}
	return out
}

// aimOnly are the nemeses that draw on their own (not conducted) whose
// node faults a remedy names, with no fault live or being started.
func (s *Scheduler) aimOnly(conducted []Nemesis) []Nemesis {
	var out []Nemesis
	for _, n := range s.Nemeses {
		named := slices.ContainsFunc(remedies, func(r remedy) bool { return r.nemesis == n.Name() })
		if named && !slices.Contains(conducted, n) && !s.live(n.Name()) && !s.guide.isStarting(n.Name()) {
			out = append(out, n)
		}
	}
	return out
}

// tried counts each nemesis's faults so far, started or failed.
func (s *Scheduler) tried() map[string]int {
	s.countsMu.Lock()
	defer s.countsMu.Unlock()
	out := map[string]int{}
	for name, c := range s.Counts {
		out[name] = c.Started + c.Failed
	}
	return out
}

// someUntried reports whether one of nemeses has had no fault yet.
func (s *Scheduler) someUntried(nemeses []Nemesis) bool {
	tried := s.tried()
	return slices.ContainsFunc(nemeses, func(n Nemesis) bool { return tried[n.Name()] == 0 })
}

// live reports whether a fault of the named nemesis is live.
func (s *Scheduler) live(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range s.active {
		if l.nem.Name() == name {
			return true
		}
	}
	return false
}

// stuckFault bounds the wait for faults on nodes to end before a calm
// phase: one that could not be undone stays live until the final heal.
const stuckFault = 10 * time.Second

// nodeFaultsEnd waits, at most max, until no fault touching a node is live
// (one whose stop, a node starting again, takes longer than planned), so
// a calm phase is calm from its first instant; false when one still is,
// or ctx ended first.
func (s *Scheduler) nodeFaultsEnd(ctx context.Context, max time.Duration) bool {
	for t0 := time.Now(); time.Since(t0) < max; {
		if !s.nodeFaultOn() {
			return true
		}
		if !sleep(ctx, 50*time.Millisecond) {
			return false
		}
	}
	return false
}

// nodeFaultOn says whether a fault touching a node is live or starting.
func (s *Scheduler) nodeFaultOn() bool {
	s.mu.Lock()
	busy := slices.ContainsFunc(mapValues(s.active), func(l *live) bool { return !l.onClients })
	s.mu.Unlock()
	return busy || s.guide.anyStarting()
}

func mapValues[K comparable, V any](m map[K]V) []V {
	out := make([]V, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}
