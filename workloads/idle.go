package workloads

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/fencecheck/fencecheck/fencing"
	"github.com/fencecheck/fencecheck/history"
)

// Idle probes reach the time scales the traffic does not: a server that
// forgets a key's high-water mark once the key has had no write for a few
// seconds, or a free lock's counter after some seconds without a holder,
// passes every run whose keys and locks are never left alone that long and
// then used with an older token. The writers' profiles keep their keys busy
// (even skewed's cold keys see a write every few seconds), so beside them
// the idler, a client of its own on keys of its own ("i0", "i1", ...), runs
// probes at each scale: two holders write their tokens in turn (acquire,
// write, release), the key and its lock are then left alone for the idle
// time, the first holder writes late with its older token (the resource
// must still reject it as stale), and the lock is granted again (the issuer
// must still hand out a newer token). The idle times span whatever faults
// the nemeses inject meanwhile, and none under --nemesis none.

// Under the guided schedule (nemesis.CalmFollower) the probes of the
// scales a calm phase can hold start their rounds when one begins, so that
// their idle time falls where no fault touches a node: a server that
// rebuilds its idle timers when it starts (most do) shows an idle-time flaw
// only in an idle period it lived through, and faults of their own timing
// spoiled nearly every such period. The longer scales keep their own
// times: no calm phase of a run's is that long.

// idleScale is one idle time and how many probes run it side by side.
type idleScale struct {
	idle  time.Duration
	slots int
}

// idleScales are the probes' idle times for a main phase of length main: a
// little over 1 s, 5 s and 20 s (coverage's scales, analysis.IdleScales),
// and two thirds of a run of a minute or more; each only when a round fits
// in the run (main 0: unknown, all three).
func idleScales(main time.Duration) []idleScale {
	all := []idleScale{{1250 * time.Millisecond, 2}, {5500 * time.Millisecond, 4}, {20500 * time.Millisecond, 5}}
	if main >= time.Minute {
		all = append(all, idleScale{main * 2 / 3, 2})
	}
	var out []idleScale
	for _, s := range all {
		if main == 0 || s.idle+idleMargin <= main {
			out = append(out, s)
		}
	}
	return out
}

// idleMargin is what a probe's round needs besides its idle time: the two
// holders' cycles before it and the late write and new grant after it, with
// room for a fault to slow them.
const idleMargin = 2 * time.Second

// ProfileIdle names the idle probes in --profile: on under "all", and in a
// list that names it; it takes no writer.
const ProfileIdle = "idle"

// idleSlot is one probe: its key (and lock), its idle time, when its first
// round starts, and whether its late writes climb a ladder (lateTimes).
type idleSlot struct {
	key    string
	idle   time.Duration
	offset time.Duration
	ladder bool
}

// idleSlots lays the probes out: each scale's slots staggered across the
// room the run leaves beside their idle time, so their late writes land
// among different faults.
func idleSlots(ns string, main time.Duration) []idleSlot {
	var out []idleSlot
	all := idleScales(main)
	for _, s := range all {
		// The room is halved: a fault (a restart, a strip of the first
		// cycles' tokens) may hold a probe's first round for seconds, and a
		// round that starts too late does not fit.
		room := s.idle
		if main > 0 {
			room = min(room, (main-s.idle-idleMargin)/2)
		}
		for j := range s.slots {
			off := 200*time.Millisecond + time.Duration(j)*max(room, 0)/time.Duration(s.slots)
			// Each scale longer than the shortest has one ladder, its
			// first slot, the soonest to start.
			ladder := j == 0 && s.idle > all[0].idle
			out = append(out, idleSlot{key: Scoped(ns, fmt.Sprintf("i%d", len(out))), idle: s.idle, offset: off, ladder: ladder})
		}
	}
	return out
}

// idler runs one probe's rounds until the run ends or no round fits.
func (w *Fenced) idler(ctx context.Context, rec *history.Recorder, n int, slot idleSlot, deadline time.Time) {
	issuer := w.cfg.Issuers[n%len(w.cfg.Issuers)]
	resource := w.cfg.Resources[n%len(w.cfg.Resources)]
	// Two holders, processes of their own; their writes are not noted in
	// the marks: stragglers would write to these keys and end the idle
	// time early.
	older := newRecorder(rec, w.procs, w.cfg.OpTimeout)
	newer := newRecorder(rec, w.procs, w.cfg.OpTimeout)
	follows := w.calm.following() && slot.idle <= calmIdleMax
	if !follows {
		sleepCtx(ctx, slot.offset)
	}
	fits := func() bool {
		return ctx.Err() == nil && (deadline.IsZero() || time.Until(deadline) > slot.idle+idleMargin)
	}
	for fits() {
		if follows && !w.calm.await(ctx, slot.idle+calmRoundMargin) {
			return
		}
		// A round that failed starts again soon, sooner in a calm phase,
		// whose time is short.
		retry := 200 * time.Millisecond
		if follows {
			retry = 50 * time.Millisecond
		}
		t1, ok := w.idleCycle(ctx, older, issuer, resource, slot.key, n)
		if !ok {
			sleepCtx(ctx, retry)
			continue
		}
		if _, ok := w.idleCycle(ctx, newer, issuer, resource, slot.key, n); !ok {
			sleepCtx(ctx, retry)
			continue
		}
		if !fits() {
			return // the first cycles took too long: the late write would miss the run
		}
		if follows && !w.calm.holdFor(time.Now().Add(slot.idle+calmLateMargin)) {
			continue // the calm phase ended during the cycles: wait for the next
		}
		w.lateWrites(ctx, older, resource, slot, t1)
		if ctx.Err() != nil {
			return
		}
		// The lock, free since the newer holder's release, is granted
		// again.
		w.idleCycle(ctx, newer, issuer, resource, slot.key, n)
	}
}

// ladderStep is how often a ladder probe writes late while its key sits
// idle: a server that forgets a key's mark after some idle time within the
// probe's is found at most this long after that time.
const ladderStep = 250 * time.Millisecond

// lateTimes are the idle times after which a probe's older holder writes
// late: its whole idle time, or on a ladder every ladderStep from two steps
// on, up to its whole idle time. A server that forgets a key's mark after
// 3 s (or 8 s) without an accepted write is then found soon after 3 s (8 s),
// not only after the next scale's idle time; the ladder's writes are
// rejected and change nothing, so the key is still idle since its last
// accepted write. A server that counts idle time from any request would
// never forget under a ladder: its scale's other probes stay untouched.
func lateTimes(slot idleSlot) []time.Duration {
	if !slot.ladder {
		return []time.Duration{slot.idle}
	}
	var out []time.Duration
	for d := 2 * ladderStep; d < slot.idle; d += ladderStep {
		out = append(out, d)
	}
	return append(out, slot.idle)
}

// lateWrites sends the older holder's late writes with token t1, at the
// slot's lateTimes after now. A late write that found nothing listening
// (the server restarting) is tried again, as a stalled holder's is: it then
// meets the restarted server's state. So is one whose token the strip
// proxy took (a rejection that changed nothing: the key is still idle). A
// ladder's step does that until its next step is due, and the ladder stops
// at a write that was taken: the key is idle no more. It goes on after one
// whose outcome is unknown (a node crashed under it): taken, it would be a
// violation the checkers find; not taken, it left the key idle.
func (w *Fenced) lateWrites(ctx context.Context, older *recorder, resource Conn, slot idleSlot, t1 string) {
	start := time.Now()
	times := lateTimes(slot)
	for i, idle := range times {
		sleepCtx(ctx, time.Until(start.Add(idle)))
		if ctx.Err() != nil {
			return
		}
		until := time.Now().Add(refusedRetries)
		if i+1 < len(times) {
			if time.Since(start) >= times[i+1] {
				continue // a slow step took this one's time
			}
			until = start.Add(times[i+1])
		}
		extra := map[string]json.RawMessage{history.ExtraIdle: json.RawMessage(strconv.FormatInt(idle.Milliseconds(), 10))}
		late := func() Reply {
			v := w.value(older)
			return older.do(ctx, history.Event{F: history.Write, Key: slot.key, Token: t1, Value: v, Node: resource.Node(), Extra: extra},
				func(c context.Context) Reply { return resource.Write(c, slot.key, t1, []byte(v)) })
		}
		rep := late()
		for wait := 300 * time.Millisecond; retryable(rep) && ctx.Err() == nil && time.Now().Add(wait).Before(until); wait *= 2 {
			sleepCtx(ctx, wait)
			rep = late()
		}
		if rep.Type == history.Ok {
			return
		}
	}
}

// cycleWriteRetries bounds the retries of a cycle's write that met no check.
const cycleWriteRetries = 2 * time.Second

// retryable says whether a write was rejected without meeting the
// resource's check: nothing listened, or its token was taken on the way.
func retryable(r Reply) bool {
	if r.Type != history.Fail {
		return false
	}
	switch r.Error {
	case fencing.ErrWordRefused, fencing.ErrWordMissingToken, fencing.ErrWordMalformedToken:
		return true
	}
	return false
}

// idleCycle is one holder's acquire, write and release of key, the
// acquire tried for a few seconds (a fault may hold the issuer). It returns
// the token written when the write was accepted.
func (w *Fenced) idleCycle(ctx context.Context, r *recorder, issuer, resource Conn, key string, n int) (string, bool) {
	owner := fmt.Sprintf("i%d-p%d", n, r.proc)
	var acq Reply
	for t0 := time.Now(); ctx.Err() == nil; {
		acq = r.do(ctx, history.Event{F: history.Acquire, Key: key, Node: issuer.Node(), Extra: ttlExtra(w.cfg.TTL)},
			func(c context.Context) Reply { return issuer.Acquire(c, key, owner, w.cfg.TTL) })
		if acq.Type == history.Ok || time.Since(t0) > 4*time.Second {
			break
		}
		owner = fmt.Sprintf("i%d-p%d", n, r.proc)
		sleepCtx(ctx, 100*time.Millisecond)
	}
	if acq.Type != history.Ok || ctx.Err() != nil {
		return "", false
	}
	w.learnGranted(acq.TTL)
	token := acq.Token
	var wr Reply
	for t0 := time.Now(); ctx.Err() == nil; {
		// A write whose token the strip proxy took is sent again, for
		// as long as a strip fault may last at its shortest: the round
		// needs both holders' tokens written.
		v := w.value(r)
		wr = r.do(ctx, history.Event{F: history.Write, Key: key, Token: token, Value: v, Node: resource.Node()},
			func(c context.Context) Reply { return resource.Write(c, key, token, []byte(v)) })
		if !retryable(wr) || time.Since(t0) > cycleWriteRetries {
			break
		}
		sleepCtx(ctx, 100*time.Millisecond)
	}
	if wr.Type == history.Info || ctx.Err() != nil {
		return "", false // retired: a process that saw info does nothing more
	}
	r.do(ctx, history.Event{F: history.Release, Key: key, Token: token, Node: issuer.Node()},
		func(c context.Context) Reply { return issuer.Release(c, key, owner, token) })
	return token, wr.Type == history.Ok
}

// calmIdleMax is the longest idle time whose probes follow calm phases
// (the guide holds calm phases for its 1 s and 5 s scales).
const calmIdleMax = 10 * time.Second

// calmRoundMargin is what a probe's round needs of a calm phase besides
// its idle time: the two holders' cycles before it and the late write.
const calmRoundMargin = 1500 * time.Millisecond

// calmLateMargin is what a probe's round needs after its idle time: the
// late write and the new grant.
const calmLateMargin = 700 * time.Millisecond

// calmPhases is what the workload knows of the guided schedule's calm
// phases: whether they come, and the current one's end; began is closed
// and replaced when one begins; needed is until when the rounds begun in
// it need it.
type calmPhases struct {
	mu     sync.Mutex
	follow bool
	until  time.Time
	began  chan struct{}
	needed time.Time
}

// holdFor notes that a round needs the calm phase until t, unless the
// phase already ended (false).
func (c *calmPhases) holdFor(t time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !time.Now().Before(c.until) {
		return false
	}
	if t.After(c.needed) {
		c.needed = t
	}
	return true
}

// CalmNeeded is until when the rounds begun in the current calm phase need
// it (nemesis.CalmFollower).
func (w *Fenced) CalmNeeded() time.Time {
	w.calm.mu.Lock()
	defer w.calm.mu.Unlock()
	return w.calm.needed
}

// FollowCalm says calm phases will come (nemesis.CalmFollower): call it
// before Run.
func (w *Fenced) FollowCalm() {
	w.calm.mu.Lock()
	defer w.calm.mu.Unlock()
	w.calm.follow = true
}

// Calm says a calm phase began and lasts until then (nemesis.CalmFollower).
func (w *Fenced) Calm(until time.Time) {
	w.calm.mu.Lock()
	defer w.calm.mu.Unlock()
	w.calm.until = until
	if w.calm.began != nil {
		close(w.calm.began)
	}
	w.calm.began = make(chan struct{})
}

func (c *calmPhases) following() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.follow
}

// await waits until a calm phase has at least need left (at once when the
// current one has); false when ctx ends first.
func (c *calmPhases) await(ctx context.Context, need time.Duration) bool {
	for {
		c.mu.Lock()
		if c.began == nil {
			c.began = make(chan struct{})
		}
		until, began := c.until, c.began
		c.mu.Unlock()
		if time.Until(until) >= need {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-began:
		}
	}
}
