package workloads

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencecheck/fencecheck/history"
)

// The seeds' scenario, on purpose: a holder checks its lease, stalls (the GC
// pause) past the lease the system granted; meanwhile a second client takes
// the same lock and writes with its newer token; the first holder wakes and
// writes with its old one. Only the resource's check can stop that write.
//
// The stall is sized by the pause nemesis from Lease: the longest lease an
// acquire answer granted and how late after a lease's end a takeover got the
// lock, both learned during the run (etcd raises a 1 s lease to its minimum
// of about 2 s and expires leases on its leader's ticks; Redis expires to
// the millisecond). The paused holder also waits, bounded, for its taker to
// finish, so a takeover that came later than learned still lands before the
// late write.

// holderPause is one pause request: n holders, each stalling d (and idle
// more after the taker's write; see HolderPauser).
type holderPause struct {
	d, idle time.Duration
	left    int // holders still to be paused
	active  int // holders paused now
	done    chan struct{}
	closed  bool
}

// pauses is the workload's pause bookkeeping.
type pauses struct {
	mu    sync.Mutex
	queue []*holderPause
	keys  map[string]bool // locks whose holder is paused now
	ended bool
}

// PauseHolders makes the next n clients that acquire a lock, each on a lock
// no other paused holder has, stall for d before writing; see HolderPauser.
func (w *Fenced) PauseHolders(n int, d, idle time.Duration) (<-chan struct{}, func()) {
	p := &holderPause{d: d, idle: idle, left: max(n, 1), done: make(chan struct{})}
	w.pz.mu.Lock()
	defer w.pz.mu.Unlock()
	drop := func() {
		w.pz.mu.Lock()
		defer w.pz.mu.Unlock()
		p.left = 0
		if p.active == 0 {
			p.close()
		}
	}
	if w.pz.ended {
		p.left = 0
		p.close()
		return p.done, drop
	}
	w.pz.queue = append(w.pz.queue, p)
	return p.done, drop
}

// MaxPaused is how many holders can stall at once: one per lock, at most
// maxStalled. A stalled holder is a process of its own (its writer goes on
// as a new one), so the bound is the locks, not the writers. Storm writers
// never stall (their holders are processes of their own too, all on one
// lock); profiles' keys are their own, so a mix stalls more holders than
// --keys.
func (w *Fenced) MaxPaused() int {
	keys := 0
	seen := map[string]bool{}
	for _, p := range w.mix {
		if p.storm <= 1 && !seen[p.Name] {
			seen[p.Name] = true
			keys += p.keys(w.cfg.Keys)
		}
	}
	return max(1, min(keys, maxStalled))
}

// maxStalled bounds the holders one pause stalls (each with its taker).
const maxStalled = 8

// takerLeases is how many granted leases past the lease's end a taker goes
// on asking for the lock.
const takerLeases = 5

// Lease reports the longest granted lease and the latest takeover seen.
func (w *Fenced) Lease() (granted, late time.Duration) {
	return time.Duration(w.granted.Load()), time.Duration(w.late.Load())
}

func (p *holderPause) close() {
	if !p.closed {
		p.closed = true
		close(p.done)
	}
}

// claim takes a pause slot for a holder of key, or returns nil.
func (w *Fenced) claimPause(key string) *holderPause {
	w.pz.mu.Lock()
	defer w.pz.mu.Unlock()
	if w.pz.keys[key] || len(w.pz.keys) >= maxStalled {
		return nil // one holder per lock; holders of earlier pauses may still stall
	}
	for len(w.pz.queue) > 0 && w.pz.queue[0].left == 0 {
		w.pz.queue = w.pz.queue[1:]
	}
	if len(w.pz.queue) == 0 {
		return nil
	}
	p := w.pz.queue[0]
	p.left--
	p.active++
	if w.pz.keys == nil {
		w.pz.keys = map[string]bool{}
	}
	w.pz.keys[key] = true
	return p
}

// claimLongPause pauses the holder of key for d and idle more after the
// taker's write, on its own (a profile's stalled holder), or returns nil
// when key's holder is paused already.
func (w *Fenced) claimLongPause(key string, d, idle time.Duration) *holderPause {
	w.pz.mu.Lock()
	defer w.pz.mu.Unlock()
	if w.pz.keys[key] {
		return nil
	}
	if w.pz.keys == nil {
		w.pz.keys = map[string]bool{}
	}
	w.pz.keys[key] = true
	return &holderPause{d: d, idle: idle, active: 1, done: make(chan struct{})}
}

// unclaim ends a paused holder's part in p.
func (w *Fenced) unclaim(p *holderPause, key string) {
	w.pz.mu.Lock()
	defer w.pz.mu.Unlock()
	p.active--
	delete(w.pz.keys, key)
	if p.left == 0 && p.active == 0 {
		p.close()
	}
}

// endPauses drops the pauses no holder took (the run is over) and closes
// each once its paused holders are done.
func (w *Fenced) endPauses() {
	w.pz.mu.Lock()
	defer w.pz.mu.Unlock()
	w.pz.ended = true
	for _, p := range w.pz.queue {
		p.left = 0
		if p.active == 0 {
			p.close()
		}
	}
	w.pz.queue = nil
}

// learnGranted notes a lease the system granted (its answer's ttl_ms).
func (w *Fenced) learnGranted(d time.Duration) {
	for {
		old := w.granted.Load()
		if int64(d) <= old || w.granted.CompareAndSwap(old, int64(d)) {
			return
		}
	}
}

// learnLate notes how late after a lease's end a takeover got the lock,
// bounded by one granted lease (a takeover delayed by a fault, or by another
// writer that got the lock first, is not the system's granularity). Older
// samples fade by half at each new one, so one slow takeover does not
// lengthen every later pause.
func (w *Fenced) learnLate(d, granted time.Duration) {
	d = min(max(d, 0), granted)
	for {
		old := w.late.Load()
		if w.late.CompareAndSwap(old, max(int64(d), old/2)) {
			return
		}
	}
}

// stallHolder is the pause of one holder of key whose acquire was sent at
// sent and granted granted: a taker is started that takes the lock once the
// lease ran out and writes; the holder sleeps d and then waits for the
// taker's write (bounded by the taker's own deadline). The taker keeps the
// lock until the holder calls the returned function after its late writes,
// as a new holder still at work when the old one wakes: the overlap of
// their beliefs then holds the late writes fencing must stop.
func (w *Fenced) stallHolder(ctx context.Context, rec *history.Recorder, worker int, p *holderPause, key string, sent time.Time, granted time.Duration) (woke func()) {
	wrote, done := make(chan struct{}), make(chan struct{})
	var took atomic.Bool
	go w.takeOver(ctx, rec, worker, key, sent.Add(granted), granted, &took, wrote, done)
	t0 := time.Now()
	select {
	case <-wrote:
	case <-ctx.Done():
	}
	if !took.Load() {
		// The taker gave up (the system granted it nothing for several
		// leases): the holder writes now, sleeping no idle time, so its
		// lock is not kept from the next pause.
		close(done)
		return func() {}
	}
	if p.idle > 0 {
		// The taker releases at once; the key sits idle until the stale
		// write.
		close(done)
		sleepCtx(ctx, max(time.Until(t0.Add(p.d)), 0)+p.idle)
		return func() {}
	}
	// The stall is d, but the holder wakes within a quarter lease of the
	// taker's write, while the taker still holds the lock.
	sleepCtx(ctx, min(time.Until(t0.Add(p.d)), granted/4))
	return func() { close(done) }
}

// takeOver is the second client of the scenario: from the lease's end (plus
// the lateness learned so far) it asks for the lock until it gets it, writes
// with its newer token and releases.
func (w *Fenced) takeOver(ctx context.Context, rec *history.Recorder, worker int, key string, expiry time.Time, granted time.Duration, took *atomic.Bool, wrote chan struct{}, holderDone <-chan struct{}) {
	wroteOnce := sync.OnceFunc(func() { close(wrote) })
	defer wroteOnce()
	r := w.newRecorder(rec)
	issuer := w.cfg.Issuers[(worker+1)%len(w.cfg.Issuers)]
	resource := w.cfg.Resources[(worker+1)%len(w.cfg.Resources)]
	_, late := w.Lease()
	sleepCtx(ctx, time.Until(expiry.Add(late)))
	// It keeps asking for several leases: under other faults a system may
	// grant nothing for seconds (etcd revokes no lease without a quorum,
	// and a new leader renews them all), and a holder that wakes before
	// any newer token was granted shows nothing.
	deadline := expiry.Add(late + takerLeases*granted + w.cfg.OpTimeout)
	for try := 0; ctx.Err() == nil && time.Now().Before(deadline); try++ {
		sentAt := time.Now()
		owner := fmt.Sprintf("t%d-p%d", worker, r.proc)
		acq := r.do(ctx, history.Event{F: history.Acquire, Key: key, Node: issuer.Node(), Extra: ttlExtra(w.cfg.TTL)},
			func(c context.Context) Reply { return issuer.Acquire(c, key, owner, w.cfg.TTL) })
		if acq.Type != history.Ok {
			sleepCtx(ctx, 40*time.Millisecond)
			continue
		}
		took.Store(true)
		g := max(acq.TTL, w.cfg.TTL)
		w.learnGranted(acq.TTL)
		// A lock that came after refusals came free between the last
		// refusal and this answer: a sample of the lateness. One got at
		// the first try was free by the time this taker chose to ask,
		// which is all it says: the lateness learned so far may be too
		// long (a takeover a restart delayed), so it halves and the next
		// taker asks sooner. (Taking the wait itself as the sample kept a
		// lateness once inflated by a fault for the rest of the run, every
		// later pause a lease longer than needed.)
		if try == 0 {
			w.learnLate(0, g)
		} else {
			w.learnLate(time.Since(expiry), g)
		}
		token := acq.Token
		v := w.value(r)
		wr := r.do(ctx, history.Event{F: history.Write, Key: key, Token: token, Value: v, Node: resource.Node()},
			func(c context.Context) Reply { return resource.Write(c, key, token, []byte(v)) })
		wroteOnce()
		// Still at work (within three quarters of its lease) when the old
		// holder wakes.
		t := time.NewTimer(time.Until(sentAt.Add(g * 3 / 4)))
		select {
		case <-holderDone:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
		if wr.Type != history.Info && ctx.Err() == nil {
			r.do(ctx, history.Event{F: history.Release, Key: key, Token: token, Node: issuer.Node()},
				func(c context.Context) Reply { return issuer.Release(c, key, owner, token) })
		}
		return
	}
}
