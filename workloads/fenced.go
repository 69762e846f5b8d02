package workloads

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/fencecheck/fencecheck/fencing"
	"github.com/fencecheck/fencecheck/history"
)

// Config shapes the fenced-write workload.
type Config struct {
	// Clients is the number of writers; Readers the number of read-only
	// clients; Keys the number each profile scales its keys from
	// (profiles.go: steady uses "k0".."kN-1", lock kI fencing resource kI).
	Clients, Readers, Keys int
	// Namespace scopes every lock, key and value name the workload sends
	// (namespace.go): "" for none.
	Namespace string
	TTL       time.Duration
	OpTimeout time.Duration
	Seed      uint64
	// Issuers and Resources are the connections clients spread over.
	Issuers, Resources []Conn
	// ReplayShare is the share of accepted writes the client sends again
	// with the same token (a retry): a strict resource must reject it.
	ReplayShare float64
	// ReadShare is the share of writer iterations followed by a read.
	ReadShare float64
	// Profile is the traffic: a profile name, a comma-separated list (the
	// writers take them in turn), or "all"/"" (a mix drawn from Seed;
	// profiles.go). "all", or a list naming "idle", adds the idle probes
	// (idle.go).
	Profile string
	// Duration is the main phase's length, which the idle probes' time
	// scales fit in (0: unknown; they run until the context ends).
	Duration time.Duration
}

// Fenced is the main workload: each writer loops acquire → write (→ replay)
// (→ read) → release over a few keys, with unique values; readers read.
// Before it writes, a writer checks its lease by its own wall clock, as a
// careful client does.
//
// It implements nemesis.HolderPauser (the next holders stall past their
// leases after that check, the GC pause fencing exists for, while another
// client takes each lock and writes: scenario.go) and nemesis.ClockSkewer
// for the clients' wall clock (node "client"). While that clock is off, some
// holders work slowly between acquire and the check, so a clock step lands
// inside their lease: stepped back, a holder still believes in an expired
// lease and writes with its old token; stepped forward, it gives up early.
type Fenced struct {
	cfg   Config
	procs *Processes
	pz    pauses
	seq   atomic.Int64
	// granted and late are what the run learned of the system's leases
	// (Lease), in ns.
	granted, late atomic.Int64
	// clock is the clients' wall clock.
	clock *fencing.OffsetClock
	// mix is each writer's profile, keys every key of the mix; stormers
	// are each storm writer's processes.
	mix      []Profile
	keys     []string
	stormers [][]*recorder
	// idle are the idle probes (idle.go), none unless the profile asks;
	// calm the guided schedule's calm phases, which they follow.
	idle []idleSlot
	calm calmPhases
	// marks are the tokens accepted per key; runCtx and rec are the
	// running workload's, for the stragglers sent after a restart
	// (straggler.go), which Run waits for.
	marks      marks
	runMu      sync.Mutex
	runCtx     context.Context
	rec        *history.Recorder
	stragglers sync.WaitGroup
	// stalledHolders are the paused holders still at work, which Run
	// waits for.
	stalledHolders sync.WaitGroup
}

// newRecorder is a recorder of one of the workload's clients: its accepted
// writes are noted in the marks.
func (w *Fenced) newRecorder(rec *history.Recorder) *recorder {
	r := newRecorder(rec, w.procs, w.cfg.OpTimeout)
	r.marks = &w.marks
	return r
}

// ClientClockNode names the clients' wall clock for the clock nemesis.
const ClientClockNode = "client"

// NewFenced validates cfg and returns the workload.
func NewFenced(cfg Config) (*Fenced, error) {
	if cfg.Clients < 1 || cfg.Keys < 1 {
		return nil, fmt.Errorf("workload needs at least one client and one key")
	}
	if len(cfg.Issuers) == 0 || len(cfg.Resources) == 0 {
		return nil, fmt.Errorf("workload needs at least one issuer and one resource endpoint")
	}
	if cfg.ReplayShare == 0 {
		cfg.ReplayShare = 0.2
	}
	if cfg.ReadShare == 0 {
		cfg.ReadShare = 0.3
	}
	names, err := ParseProfile(cfg.Profile)
	if err != nil {
		return nil, err
	}
	writers, idle := splitIdle(names)
	mix := Mix(writers, cfg.Clients, cfg.Seed)
	w := &Fenced{cfg: cfg, procs: &Processes{}, clock: fencing.NewOffsetClock(), mix: mix,
		keys: keyNames(cfg.Namespace, mix, cfg.Keys), stormers: make([][]*recorder, cfg.Clients)}
	if idle {
		w.idle = idleSlots(cfg.Namespace, cfg.Duration)
		for _, s := range w.idle {
			w.keys = append(w.keys, s.key)
		}
	}
	return w, nil
}

// Mix names each writer's profile, in writer order.
func (w *Fenced) Mix() []string {
	out := make([]string, len(w.mix))
	for i, p := range w.mix {
		out[i] = p.Name
	}
	return out
}

// Keys lists every key the run's profiles use.
func (w *Fenced) Keys() []string { return slices.Clone(w.keys) }

// Namespace is the namespace of every name the workload sends.
func (w *Fenced) Namespace() string { return w.cfg.Namespace }

// Processes is the process allocator, shared with other workloads of the run
// so process numbers stay unique.
func (w *Fenced) Processes() *Processes { return w.procs }

// ClockNodes offers the clients' wall clock to the clock nemesis.
func (w *Fenced) ClockNodes() []string { return []string{ClientClockNode} }

// SetClockOffset steps the clients' wall clock to real time plus offset.
func (w *Fenced) SetClockOffset(_ context.Context, node string, offset time.Duration) error {
	if node != ClientClockNode {
		return fmt.Errorf("the workload has no clock %q (it has %q)", node, ClientClockNode)
	}
	w.clock.Set(offset)
	return nil
}

// Run drives the clients until ctx ends.
func (w *Fenced) Run(ctx context.Context, rec *history.Recorder) error {
	g, ctx := errgroup.WithContext(ctx)
	w.runMu.Lock()
	w.runCtx, w.rec = ctx, rec
	w.runMu.Unlock()
	defer func() {
		w.runMu.Lock()
		w.runCtx = nil
		w.runMu.Unlock()
		w.stragglers.Wait()
	}()
	for i := 0; i < w.cfg.Clients; i++ {
		g.Go(func() error { w.writer(ctx, rec, i); return nil })
	}
	for i := 0; i < w.cfg.Readers; i++ {
		g.Go(func() error { w.reader(ctx, rec, w.cfg.Clients+i); return nil })
	}
	var deadline time.Time
	if w.cfg.Duration > 0 {
		deadline = time.Now().Add(w.cfg.Duration)
	}
	for i, s := range w.idle {
		g.Go(func() error { w.idler(ctx, rec, i, s, deadline); return nil })
	}
	err := g.Wait()
	w.endPauses()
	w.stalledHolders.Wait()
	return err
}

func (w *Fenced) rng(worker int) *rand.Rand {
	return rand.New(rand.NewPCG(w.cfg.Seed, uint64(worker)+1))
}

func (w *Fenced) value(r *recorder) string {
	return Scoped(w.cfg.Namespace, fmt.Sprintf("c%d-%d", r.proc, w.seq.Add(1)))
}

func (w *Fenced) writer(ctx context.Context, rec *history.Recorder, worker int) {
	rng := w.rng(worker)
	prof := w.mix[worker]
	keys := newPicker(prof, w.cfg.Keys, rng)
	r := w.newRecorder(rec)
	route := worker
	var retry *failover
	first := true
	for ctx.Err() == nil {
		if !first && prof.think[1] > 0 && retry == nil {
			sleepCtx(ctx, between(rng, prof.think[0], prof.think[1]))
		}
		first = false
		issuer := w.cfg.Issuers[route%len(w.cfg.Issuers)]
		resource := w.cfg.Resources[route%len(w.cfg.Resources)]
		ki := keys.pick(rng)
		if retry != nil && time.Now().Before(retry.until) {
			ki = retry.key
		} else {
			retry = nil
		}
		key := Scoped(w.cfg.Namespace, prof.key(ki))
		if prof.storm > 1 {
			w.storm(ctx, rec, worker, prof, key, rng)
			continue
		}
		owner := fmt.Sprintf("w%d-p%d", worker, r.proc)
		leaseEnd := w.clock.Now().Add(w.cfg.TTL) // reckoned from the send: the safe start
		sent := time.Now()
		acq := r.do(ctx, history.Event{F: history.Acquire, Key: key, Node: issuer.Node(), Extra: ttlExtra(w.cfg.TTL)},
			func(c context.Context) Reply { return issuer.Acquire(c, key, owner, w.cfg.TTL) })
		if acq.Type != history.Ok {
			backoff(ctx, rng)
			continue
		}
		token := acq.Token
		granted := max(acq.TTL, w.cfg.TTL)
		w.learnGranted(acq.TTL)
		writes := betweenInt(rng, prof.writes[0], prof.writes[1])
		if rng.Float64() < prof.crash {
			// The holder crashes while holding: maybe after a write, never
			// releasing. Its process is gone; the lock is free once the
			// lease runs out.
			if writes > 0 && ctx.Err() == nil {
				v := w.value(r)
				r.do(ctx, history.Event{F: history.Write, Key: key, Token: token, Value: v, Node: resource.Node()},
					func(c context.Context) Reply { return resource.Write(c, key, token, []byte(v)) })
			}
			r.proc = w.procs.Next()
			continue
		}
		clockWasOff := w.clock.Offset() != 0
		if clockWasOff && rng.IntN(4) == 0 {
			// Slow work while the clock is off: a step during it moves
			// the lease's end as this client sees it.
			sleepCtx(ctx, w.cfg.TTL/2+time.Duration(rng.Int64N(int64(w.cfg.TTL)+1)))
		}
		left := leaseEnd.Sub(w.clock.Now())
		// The client's belief is recorded only when its clock was off, so
		// lease overlaps follow it; otherwise the TTL says the same.
		var belief map[string]json.RawMessage
		if clockWasOff || w.clock.Offset() != 0 {
			belief = leaseExtra(left)
		}
		if left <= 0 {
			// The lease ran out by this client's clock: it does not write.
			if ctx.Err() == nil {
				r.do(ctx, history.Event{F: history.Release, Key: key, Token: token, Node: issuer.Node()},
					func(c context.Context) Reply { return issuer.Release(c, key, owner, token) })
			}
			continue
		}
		// A holder failing over writes at once: stalled, it held the
		// key's lock from its own next cycle (a cold key's stall).
		var paused *holderPause
		if retry == nil {
			paused = w.claimPause(key)
		}
		if paused == nil && retry == nil && keys.cold(ki) && rng.Float64() < prof.coldStall {
			// A holder of a cold key stalls long: its key sits idle after
			// the taker's write until this holder's late one.
			_, late := w.Lease()
			d := granted + late + w.cfg.TTL/2
			paused = w.claimLongPause(key, d, max(between(rng, 3*time.Second, 15*time.Second)-d, time.Second))
		}
		if paused != nil {
			// The GC pause: the holder (this process) stalls in a goroutine
			// of its own, and the writer goes on as a new process, so a
			// pause freezes holders, not the traffic the other faults act
			// on, and stalls as many holders as it has locks for.
			h := stalled{r: r, p: paused, issuer: issuer, resource: resource, worker: worker,
				key: key, owner: owner, token: token, sent: sent, granted: granted, left: left}
			w.stalledHolders.Add(1)
			go func() { defer w.stalledHolders.Done(); w.stalledHolder(ctx, rec, h) }()
			r = w.newRecorder(rec)
			continue
		}
		if ctx.Err() != nil {
			return
		}
		v := w.value(r)
		wr := r.do(ctx, history.Event{F: history.Write, Key: key, Token: token, Value: v, Node: resource.Node(), Extra: belief},
			func(c context.Context) Reply { return resource.Write(c, key, token, []byte(v)) })
		switch {
		case wr.Type == history.Info && len(w.cfg.Resources) > 1:
			// Nothing more through the node that did not answer (a
			// read there waited out its timeout too).
			route, retry = route+1, w.failOver(ki, granted)
			continue
		case wr.Type == history.Ok:
			retry = nil
		}
		// Others sometimes retry an accepted write (a replay).
		if ctx.Err() == nil && writes == 1 && wr.Type == history.Ok && rng.Float64() < w.cfg.ReplayShare {
			v2 := w.value(r)
			r.do(ctx, history.Event{F: history.Write, Key: key, Token: token, Value: v2, Node: resource.Node(), Extra: belief},
				func(c context.Context) Reply { return resource.Write(c, key, token, []byte(v2)) })
		}
		if writes > 1 && wr.Type != history.Info {
			if wr = w.holdLong(ctx, r, issuer, resource, key, owner, token, granted, writes-1, rng); wr.Type == history.Info {
				if len(w.cfg.Resources) > 1 {
					route, retry = route+1, w.failOver(ki, granted)
				}
				continue // retired: a process that saw info does nothing more
			}
		}
		if rng.Float64() < w.cfg.ReadShare && ctx.Err() == nil {
			r.do(ctx, history.Event{F: history.Read, Key: key, Node: resource.Node()},
				func(c context.Context) Reply { return resource.Read(c, key) })
		}
		if ctx.Err() != nil {
			return
		}
		if wr.Type != history.Info {
			r.do(ctx, history.Event{F: history.Release, Key: key, Token: token, Node: issuer.Node()},
				func(c context.Context) Reply { return issuer.Release(c, key, owner, token) })
		}
	}
}

// failover is a writer's next cycles after a write whose answer it never
// got (a timeout: the node it went through may still hold the request):
// the same key again, through the next node, until a write on it is
// accepted (one whose token a strip proxy took is refused) or the lease it
// wrote under has run out and one more has passed. A client does this when an
// endpoint stops answering; it is also what lets a write held in a frozen
// node be overtaken (write-overtaken): the newer token's write on its key
// comes through another node while the old one waits. Without it each
// key had its writer on one node, and the guide's freezes of a node
// found no newer write on their key (redis: 0-2 a run).
type failover struct {
	key   int
	until time.Time
}

func (w *Fenced) failOver(key int, granted time.Duration) *failover {
	return &failover{key: key, until: time.Now().Add(granted + w.cfg.TTL)}
}

// stalled is a paused holder: its process (r) and lease, handed over by its
// writer.
type stalled struct {
	r                *recorder
	p                *holderPause
	issuer, resource Conn
	worker           int
	key, owner       string
	token            string
	sent             time.Time
	granted, left    time.Duration
}

// stalledHolder is the rest of a paused holder's cycle: the stall (while a
// taker takes the lock and writes: scenario.go), then its late writes with
// its old token, and its release.
func (w *Fenced) stalledHolder(ctx context.Context, rec *history.Recorder, h stalled) {
	r, key, token, resource := h.r, h.key, h.token, h.resource
	// The holder decided to write before the stall, so it still believes
	// in the lease it checked when it wakes.
	t0 := time.Now()
	woke := w.stallHolder(ctx, rec, h.worker, h.p, key, h.sent, h.granted)
	// Once it wrote, the taker may release, and the pause counts this
	// holder as done.
	ended := sync.OnceFunc(func() { woke(); w.unclaim(h.p, key) })
	defer ended()
	belief := stalledExtra(h.left, time.Since(t0))
	if ctx.Err() != nil {
		return
	}
	write := func() Reply {
		v := w.value(r)
		return r.do(ctx, history.Event{F: history.Write, Key: key, Token: token, Value: v, Node: resource.Node(), Extra: belief},
			func(c context.Context) Reply { return resource.Write(c, key, token, []byte(v)) })
	}
	wr := write()
	// A woken holder whose write found nothing listening (the server
	// restarting) tries again, as a client with work to do does, for as
	// long as a restart takes (a few seconds, waiting twice as long each
	// time): the write then meets the restarted server's state, the one a
	// resource that forgets its high-water marks on a restart gets wrong.
	for t0, wait := time.Now(), 300*time.Millisecond; time.Since(t0) < refusedRetries && wr.Type == history.Fail && wr.Error == fencing.ErrWordRefused && ctx.Err() == nil; wait *= 2 {
		sleepCtx(ctx, wait)
		wr = write()
	}
	if wr.Type == history.Info || ctx.Err() != nil {
		return // retired: a process that saw info does nothing more
	}
	// Its work goes on, as it believes it holds the lock: a second write.
	wr = write()
	ended()
	if wr.Type != history.Info && ctx.Err() == nil {
		r.do(ctx, history.Event{F: history.Release, Key: key, Token: token, Node: h.issuer.Node()},
			func(c context.Context) Reply { return h.issuer.Release(c, key, h.owner, token) })
	}
}

// holdLong is a long holder's tenure: n more writes with its token, a fifth
// of a lease apart, renewing whenever a third of the granted lease has gone
// by since the last grant, and checking its lease by its own clock before
// each write, as a careful client does. It stops when a renew says the
// lease is lost or an operation's outcome is unknown; the last reply says
// which.
func (w *Fenced) holdLong(ctx context.Context, r *recorder, issuer, resource Conn, key, owner, token string, granted time.Duration, n int, rng *rand.Rand) Reply {
	last := Reply{Type: history.Ok}
	grantedAt := time.Now()
	for i := 0; i < n && ctx.Err() == nil; i++ {
		sleepCtx(ctx, w.cfg.TTL/5+time.Duration(rng.Int64N(int64(w.cfg.TTL/10)+1)))
		if time.Since(grantedAt) > granted/3 {
			sent := time.Now()
			rn := r.do(ctx, history.Event{F: history.Renew, Key: key, Token: token, Node: issuer.Node(), Extra: ttlExtra(w.cfg.TTL)},
				func(c context.Context) Reply { return issuer.Renew(c, key, owner, token, w.cfg.TTL) })
			if rn.Type != history.Ok {
				return rn
			}
			grantedAt = sent
			granted = max(rn.TTL, w.cfg.TTL)
		}
		if time.Since(grantedAt) >= min(granted, w.cfg.TTL) || ctx.Err() != nil {
			return last // the lease ran out by this client's clock
		}
		v := w.value(r)
		last = r.do(ctx, history.Event{F: history.Write, Key: key, Token: token, Value: v, Node: resource.Node()},
			func(c context.Context) Reply { return resource.Write(c, key, token, []byte(v)) })
		if last.Type == history.Info {
			return last
		}
	}
	return last
}

// storm is one acquire storm: prof.storm processes ask for key at the same
// instant; whoever gets it writes and releases.
func (w *Fenced) storm(ctx context.Context, rec *history.Recorder, worker int, prof Profile, key string, rng *rand.Rand) {
	if w.stormers[worker] == nil {
		for i := 0; i < prof.storm; i++ {
			w.stormers[worker] = append(w.stormers[worker], w.newRecorder(rec))
		}
	}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, r := range w.stormers[worker] {
		issuer := w.cfg.Issuers[(worker+i)%len(w.cfg.Issuers)]
		resource := w.cfg.Resources[(worker+i)%len(w.cfg.Resources)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			owner := fmt.Sprintf("x%d-p%d", worker, r.proc)
			acq := r.do(ctx, history.Event{F: history.Acquire, Key: key, Node: issuer.Node(), Extra: ttlExtra(w.cfg.TTL)},
				func(c context.Context) Reply { return issuer.Acquire(c, key, owner, w.cfg.TTL) })
			if acq.Type != history.Ok || ctx.Err() != nil {
				return
			}
			w.learnGranted(acq.TTL)
			token := acq.Token
			v := w.value(r)
			wr := r.do(ctx, history.Event{F: history.Write, Key: key, Token: token, Value: v, Node: resource.Node()},
				func(c context.Context) Reply { return resource.Write(c, key, token, []byte(v)) })
			if wr.Type != history.Info && ctx.Err() == nil {
				r.do(ctx, history.Event{F: history.Release, Key: key, Token: token, Node: issuer.Node()},
					func(c context.Context) Reply { return issuer.Release(c, key, owner, token) })
			}
		}()
	}
	close(start)
	wg.Wait()
	backoff(ctx, rng)
}

func (w *Fenced) reader(ctx context.Context, rec *history.Recorder, worker int) {
	rng := w.rng(worker)
	r := w.newRecorder(rec)
	resource := w.cfg.Resources[worker%len(w.cfg.Resources)]
	for ctx.Err() == nil {
		key := w.keys[rng.IntN(len(w.keys))]
		r.do(ctx, history.Event{F: history.Read, Key: key, Node: resource.Node()},
			func(c context.Context) Reply { return resource.Read(c, key) })
		sleepCtx(ctx, time.Duration(5+rng.IntN(20))*time.Millisecond)
	}
}

// FinalReads reads every key once after the heal, each from a fresh process,
// retrying a read that timed out a few times so the final state is known.
// The error names the keys whose state stayed unknown.
func (w *Fenced) FinalReads(ctx context.Context, rec *history.Recorder) error {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var unknown []string
	for i, key := range w.keys {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			res := w.cfg.Resources[i%len(w.cfg.Resources)]
			r := w.newRecorder(rec)
			for try := 0; try < 5 && ctx.Err() == nil; try++ {
				rep := r.do(ctx, history.Event{F: history.Read, Key: key, Node: res.Node()},
					func(c context.Context) Reply { return res.Read(c, key) })
				if rep.Type != history.Info {
					return
				}
				sleepCtx(ctx, 200*time.Millisecond)
			}
			mu.Lock()
			unknown = append(unknown, key)
			mu.Unlock()
		}(i)
	}
	wg.Wait()
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return fmt.Errorf("no definite answer for key(s) %s", strings.Join(unknown, ", "))
	}
	return nil
}

// refusedRetries is how long a woken holder goes on trying a write that
// found nothing listening (a node's restart and start-up).
const refusedRetries = 4 * time.Second

func backoff(ctx context.Context, rng *rand.Rand) {
	sleepCtx(ctx, time.Duration(5+rng.IntN(30))*time.Millisecond)
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
