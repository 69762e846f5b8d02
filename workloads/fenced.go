package workloads

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
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
	// clients; Keys the lock/resource names they share ("k0".."kN-1": lock
	// kI fences resource kI).
	Clients, Readers, Keys int
	TTL                    time.Duration
	OpTimeout              time.Duration
	Seed                   uint64
	// Issuers and Resources are the connections clients spread over.
	Issuers, Resources []Conn
	// ReplayShare is the share of accepted writes the client sends again
	// with the same token (a retry): a strict resource must reject it.
	ReplayShare float64
	// ReadShare is the share of writer iterations followed by a read.
	ReadShare float64
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
	return &Fenced{cfg: cfg, procs: &Processes{}, clock: fencing.NewOffsetClock()}, nil
}

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

// Key names the i-th key.
func Key(i int) string { return fmt.Sprintf("k%d", i) }

// Run drives the clients until ctx ends.
func (w *Fenced) Run(ctx context.Context, rec *history.Recorder) error {
	g, ctx := errgroup.WithContext(ctx)
	for i := 0; i < w.cfg.Clients; i++ {
		g.Go(func() error { w.writer(ctx, rec, i); return nil })
	}
	for i := 0; i < w.cfg.Readers; i++ {
		g.Go(func() error { w.reader(ctx, rec, w.cfg.Clients+i); return nil })
	}
	err := g.Wait()
	w.endPauses()
	return err
}

func (w *Fenced) rng(worker int) *rand.Rand {
	return rand.New(rand.NewPCG(w.cfg.Seed, uint64(worker)+1))
}

func (w *Fenced) value(r *recorder) string {
	return fmt.Sprintf("c%d-%d", r.proc, w.seq.Add(1))
}

func (w *Fenced) writer(ctx context.Context, rec *history.Recorder, worker int) {
	rng := w.rng(worker)
	r := newRecorder(rec, w.procs, w.cfg.OpTimeout)
	issuer := w.cfg.Issuers[worker%len(w.cfg.Issuers)]
	resource := w.cfg.Resources[worker%len(w.cfg.Resources)]
	for ctx.Err() == nil {
		key := Key(rng.IntN(w.cfg.Keys))
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
		paused := w.claimPause(key)
		if paused != nil {
			// The GC pause: the lease runs out meanwhile and another client
			// takes the lock. The holder decided to write before it, so it
			// still believes in the lease it checked when it wakes.
			t0 := time.Now()
			w.stallHolder(ctx, rec, worker, paused, key, sent, granted)
			belief = stalledExtra(left, time.Since(t0))
		}
		if ctx.Err() != nil {
			if paused != nil {
				w.unclaim(paused, key)
			}
			return
		}
		v := w.value(r)
		wr := r.do(ctx, history.Event{F: history.Write, Key: key, Token: token, Value: v, Node: resource.Node(), Extra: belief},
			func(c context.Context) Reply { return resource.Write(c, key, token, []byte(v)) })
		// A woken holder writes again with its token (its work goes on, as
		// it believes it holds the lock); others sometimes retry an
		// accepted write (a replay).
		if ctx.Err() == nil && wr.Type != history.Info && (paused != nil || wr.Type == history.Ok && rng.Float64() < w.cfg.ReplayShare) {
			v2 := w.value(r)
			r.do(ctx, history.Event{F: history.Write, Key: key, Token: token, Value: v2, Node: resource.Node(), Extra: belief},
				func(c context.Context) Reply { return resource.Write(c, key, token, []byte(v2)) })
		}
		if paused != nil {
			w.unclaim(paused, key)
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

func (w *Fenced) reader(ctx context.Context, rec *history.Recorder, worker int) {
	rng := w.rng(worker)
	r := newRecorder(rec, w.procs, w.cfg.OpTimeout)
	resource := w.cfg.Resources[worker%len(w.cfg.Resources)]
	for ctx.Err() == nil {
		key := Key(rng.IntN(w.cfg.Keys))
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
	for i := 0; i < w.cfg.Keys; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			key := Key(i)
			res := w.cfg.Resources[i%len(w.cfg.Resources)]
			r := newRecorder(rec, w.procs, w.cfg.OpTimeout)
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
