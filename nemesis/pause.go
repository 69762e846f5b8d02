package nemesis

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/fencecheck/fencecheck/history"
)

// pause freezes a lock holder past its lease (the GC pause that fencing
// exists for) or freezes a whole node. A frozen holder wakes with an expired
// lease and writes with its old token: only the resource's check can stop it.
type pause struct {
	// holderPauses counts the holder pauses drawn: every other one, the
	// first included, is quiet (Draw runs on the nemesis's own goroutine).
	holderPauses int
}

// holderNode is the node a holder pause names: the workload's clients.
const holderNode = "client"

// pauseParams: mode "holder" (the next Holders clients to acquire a lock,
// one per lock, stall for StallMS while another client takes each lock) or
// "node" (the plan's node is frozen).
type pauseParams struct {
	Mode    string `json:"mode"`
	StallMS int64  `json:"stall_ms,omitempty"`
	// Holders is how many holders stall at once (0: one, as in schedules
	// written before it existed).
	Holders int `json:"holders,omitempty"`
	// IdleMS is how long the stalled holders sleep on after the second
	// client's write, the key idle meanwhile (0: they wake within a quarter
	// lease, while it still holds the lock).
	IdleMS int64 `json:"idle_ms,omitempty"`
	// Quiet holds other nemeses' outages (kills, freezes, partitions)
	// back from just before the holders stall until their takers had
	// time to take the locks: the scenario with the lock service whole.
	// The other holder pauses land among the faults, as drawn.
	Quiet bool `json:"quiet,omitempty"`
	// OnWrite (mode node): the node is frozen AfterWriteUS after the next
	// write sent to it (within ackWait), while it serves that write: a
	// resource that reads the mark and then writes, in two steps, is
	// held between them (the GC pause of the resource itself).
	OnWrite      bool  `json:"on_write,omitempty"`
	AfterWriteUS int64 `json:"after_write_us,omitempty"`
}

// Pause is the pause nemesis's name; PauseHolders the mode of its pauses
// of lock holders (the seeds' scenario), as its start events' extra.mode
// says, beside the freeze of a node.
const (
	Pause        = "pause"
	PauseHolders = "holder"
	PauseNode    = "node"
)

func (*pause) Name() string { return Pause }

// Effects: a paused holder's write arrives after its lease ran out.
func (*pause) Effects() []Effect { return []Effect{Delays} }

func (*pause) Params() any { return &pauseParams{} }

// OnClientsOnly: a holder pause stalls a client; a node pause freezes a
// node.
func (*pause) OnClientsOnly(p Plan) bool {
	pp, err := paramsOf[pauseParams](p)
	return err == nil && pp.Mode == PauseHolders
}

func (*pause) Applicable(env *Env) (bool, string) {
	_, node := env.Target.(Pauser)
	if env.Holders == nil && !node {
		return false, "neither the workload's lock holders nor the target's nodes can be paused"
	}
	return true, ""
}

// Timing: a fault must outlast the lease the system granted, and the
// lateness of takeovers seen so far, so a paused holder really wakes up
// late and a write held in a frozen node is overtaken by the next holder's.
// From the lease asked for alone, the freezes of etcd's adapters (which
// grant 2 s for the 1 s asked) thawed before the frozen holder's lease had
// run out: no write was overtaken in 4 freezes of two 3-member runs.
func (*pause) Timing(env *Env) Timing {
	t := DefaultTiming
	// Short quiet periods: a holder pause is the seeds' scenario, and a
	// run of 30 s should see it many times.
	t.QuietMin, t.QuietMax = 500*time.Millisecond, 1500*time.Millisecond
	lease := leaseToOutlast(env)
	t.FaultMin = lease + env.TTL/2
	t.FaultMax = lease + env.TTL + env.TTL/2
	return t
}

// leaseToOutlast is the lease the system really granted (not the one asked
// for: etcd raises a 1 s lease to about 2 s), or the one asked for before
// any grant, plus how late takeovers succeeded after a lease's end so far.
func leaseToOutlast(env *Env) time.Duration {
	if env.Holders == nil {
		return env.TTL
	}
	granted, late := env.Holders.Lease()
	return max(granted, env.TTL) + late
}

// quietDrain bounds how long a quiet holder pause waits for live outages
// to end (a restart or partition lasts up to a few seconds).
const quietDrain = 3 * time.Second

// errHolderTooLate: no holder pause fits in what is left of the main phase.
var errHolderTooLate = errors.New("too late in the main phase for a holder pause")

func (pz *pause) Draw(ctx context.Context, env *Env, rng *rand.Rand) (Plan, error) {
	holder := env.Holders != nil
	_, canNode := env.Target.(Pauser)
	nodes := nodesOf(env)
	if env.guided {
		// The nodes that keep state are the conductor's under the guided
		// schedule (pause's own node pauses are unaimed): two members
		// frozen by turns held an etcd member's replacement, which
		// needs the others' quorum, 5 s of an 8.5 s fault phase.
		nodes = slices.DeleteFunc(slices.Clone(nodes), func(n Node) bool { return !n.Stateless })
	}
	canNode = canNode && len(nodes) > 0
	end, bounded := ctx.Deadline()
	pauseHolder := func() (Plan, error) {
		d, n := holderStall(env, rng)
		// A holder pause must end in the main phase: the stall, then the
		// taker's lease and write and the woken holder's. One that cannot
		// (the run's last seconds) would show no late write; a node pause
		// goes in its place, or none.
		if bounded && time.Until(end) < d+2*env.TTL+time.Second {
			return Plan{}, errHolderTooLate
		}
		var idle time.Duration
		if rng.IntN(3) == 0 {
			// One pause in three leaves the keys idle for seconds before
			// the stale writes.
			idle = 2*time.Second + time.Duration(rng.Int64N(int64(4*time.Second)))
			// Only where the stale writes still land in the main phase
			// (the stall, the taker's lease and write, the idle time): a
			// short run's holder would otherwise wake after it, and the
			// run would show no late write at all.
			if bounded && time.Until(end) < d+idle+2*env.TTL+time.Second {
				idle = 0
			}
		}
		quiet := pz.holderPauses%2 == 0
		pz.holderPauses++
		return Plan{Nodes: []string{holderNode}, Params: &pauseParams{Mode: PauseHolders, StallMS: d.Milliseconds(), Holders: n, IdleMS: idle.Milliseconds(), Quiet: quiet}}, nil
	}
	// Holder pauses are the seeds' scenario itself: three of four pauses
	// are of holders when nodes can be paused too (under "all" other
	// faults spoil some of them, and a node is frozen by no other nemesis
	// but is stopped by restart and power-loss).
	if holder && (!canNode || rng.IntN(4) > 0) {
		p, err := pauseHolder()
		if !errors.Is(err, errHolderTooLate) {
			return p, err
		}
		if !canNode {
			return Plan{}, errNotNow
		}
	}
	if !canNode {
		return Plan{}, errors.New("no pausable node")
	}
	node, err := pickFree(ctx, env, rng, nodes)
	if errors.Is(err, ErrBusy) && holder {
		// Every node is down or frozen: freeze a client instead.
		if p, err := pauseHolder(); !errors.Is(err, errHolderTooLate) {
			return p, err
		}
		return Plan{}, ErrBusy
	}
	if err != nil {
		return Plan{}, err
	}
	return Plan{Nodes: []string{node}, TakesOver: true, Outage: true, Params: &pauseParams{Mode: PauseNode}}, nil
}

func (*pause) CheckPlan(env *Env, p Plan) error {
	pp, err := paramsOf[pauseParams](p)
	if err != nil {
		return err
	}
	switch pp.Mode {
	case PauseHolders:
		if env.Holders == nil {
			return errors.New("mode holder: the workload's lock holders cannot be paused")
		}
		if pp.StallMS <= 0 {
			return errors.New("mode holder needs a positive stall_ms")
		}
		if pp.Holders < 0 || pp.IdleMS < 0 {
			return errors.New("mode holder needs holders >= 0 (0 means one) and idle_ms >= 0")
		}
	case PauseNode:
		if _, ok := env.Target.(Pauser); !ok {
			return errors.New("mode node: the target's nodes cannot be paused")
		}
		if len(p.Nodes) != 1 {
			return fmt.Errorf("mode node pauses one node, the plan names %d", len(p.Nodes))
		}
		if pp.AfterWriteUS < 0 {
			return fmt.Errorf("after_write_us must be >= 0, got %d", pp.AfterWriteUS)
		}
	default:
		return fmt.Errorf("mode must be holder or node, got %q", pp.Mode)
	}
	return nil
}

func (*pause) Start(ctx context.Context, env *Env, p Plan) (*Fault, error) {
	pp, err := paramsOf[pauseParams](p)
	if err != nil {
		return nil, err
	}
	if pp.Mode == PauseHolders {
		if env.Holders == nil {
			return nil, errors.New("no lock holder can be paused")
		}
		n := max(pp.Holders, 1)
		d := time.Duration(pp.StallMS) * time.Millisecond
		idle := time.Duration(pp.IdleMS) * time.Millisecond
		details := map[string]any{history.ExtraMode: PauseHolders, "stall_ms": pp.StallMS, "holders": n, "idle_ms": pp.IdleMS}
		unhush := func() {}
		if pp.Quiet {
			t0 := time.Now()
			live, yielded, u := env.claims.hush(ctx, quietDrain)
			unhush = u
			details["quiet"] = !yielded
			details["quiet_wait_ms"] = time.Since(t0).Milliseconds()
			if yielded {
				// An outage was held back too long: this pause lands
				// among the faults, as a loud one does.
				details["quiet_yielded"] = true
			}
			if live > 0 {
				// Not whole after all: the pause goes on among them,
				// and says so.
				details["outages_live"] = live
			} else if !yielded && time.Since(t0) > time.Millisecond {
				// It waited for outages to end: a system is not
				// whole when its faults stop (etcd after a leader's
				// partition and a member's power loss timed out every
				// acquire for 1.7 s more, and its new leader renewed
				// every lease). One lease more, still hushed, before
				// the holders stall.
				settle, _ := env.Holders.Lease()
				settle = max(settle, env.TTL)
				sleep(ctx, settle)
				details["settle_ms"] = settle.Milliseconds()
			}
		}
		done, drop := env.Holders.PauseHolders(n, d, idle)
		// Outages are held back for the stall and half a lease more: by
		// then the takers had the lock (a takeover comes at the lease's
		// end plus the lateness learned, which the stall includes).
		time.AfterFunc(d+env.TTL/2, unhush)
		granted, late := env.Holders.Lease()
		// The fault lasts until the holders it paused woke and wrote, as
		// long as a system that grants locks takes for it. Holders not
		// reached by its drawn end (one and a half leases or more: such a
		// system reaches them within milliseconds) are dropped then, and
		// holders whose takers still wait for the lock (a system down or
		// partitioned by other faults may grant none for seconds) go on
		// after it: waiting for them held back the next pause (under
		// "all" a pause waited fifteen seconds for one holder).
		stop := func(ctx context.Context) error {
			// The hush outlives the fault's drawn end (shorter than the
			// stall) on its own timer, and ends here at the latest.
			defer unhush()
			drop()
			t := time.NewTimer(d + idle + granted + 2*time.Second)
			defer t.Stop()
			select {
			case <-done:
			case <-t.C:
			case <-ctx.Done():
			}
			return nil
		}
		details["granted_ttl_ms"], details["late_ms"] = granted.Milliseconds(), late.Milliseconds()
		return &Fault{Nodes: p.Nodes, Details: details, Stop: stop}, nil
	}
	pz, ok := env.Target.(Pauser)
	if !ok || len(p.Nodes) != 1 {
		return nil, errors.New("no pausable node")
	}
	node := p.Nodes[0]
	details := map[string]any{history.ExtraMode: PauseNode}
	var sent history.Ack
	if pp.OnWrite {
		var err error
		if sent, err = awaitWriteSent(ctx, env, node, time.Duration(pp.AfterWriteUS)*time.Microsecond, details); err != nil {
			return nil, err
		}
	}
	// A freeze on a write needs another node the newer write can go
	// through: one frozen or stopped while it waited for the write leaves
	// nothing to overtake it.
	if pp.OnWrite && !otherWritePathFree(env, node) {
		return nil, ErrRefusedNow
	}
	// The overtaking write is watched for from before the freeze: it may
	// come while the freeze is being applied.
	wctx, unwatch := context.WithCancel(context.WithoutCancel(ctx))
	var made <-chan struct{}
	if pp.OnWrite && env.Acks != nil {
		made = overtakenThrough(wctx, env, node, sent)
	}
	if err := pz.PauseNode(ctx, node); err != nil {
		unwatch()
		return nil, applyFailed(PauseNode, []string{node}, err)
	}
	return &Fault{Nodes: p.Nodes, Details: details, Made: made, HoldFor: overtakeHold,
		Stop: func(ctx context.Context) error { unwatch(); return pz.ResumeNode(ctx, node) }}, nil
}

// otherWritePathFree says whether a node writes go through, other than
// node, is held by no fault.
func otherWritePathFree(env *Env, node string) bool {
	path := stateNodes(env, writePath)
	return slices.ContainsFunc(nodesOf(env), func(n Node) bool {
		return n.Name != node && (path == nil || path[n.Name]) && env.free(n.Name)
	})
}

// overtakeHold is how much longer than drawn a freeze holding a write may
// last for a newer write on its key to be accepted: the store's own
// faults take that second (redis, seeds 1 and 3: of 10 freezes, 6 met a
// crash, a restart or a clock step back of the one store, which held the
// lease or failed the newer write, and ended first). A crash, a restart
// and a clock step each end within about 2 s.
const overtakeHold = 3 * time.Second

// overtakenThrough is closed once a write held in node (sent, when it was
// timed by one, or one sent to node since) is overtaken: a write on its key
// with a newer token is accepted through another node, as the analysis
// counts it. Its writer's own retry through another node, with the same
// token, is not: closed on any write on the key, it ended freezes that the
// run's coverage then did not count (etcd, 3 members: a freeze "made" in
// a run with no write overtaken). Never when ctx ends first.
func overtakenThrough(ctx context.Context, env *Env, node string, sent history.Ack) <-chan struct{} {
	made := make(chan struct{})
	held := map[string]uint64{} // key -> the newest token held in node
	hold := func(a history.Ack) {
		if n, _, err := history.SplitToken(a.Token); err == nil && a.Key != "" {
			held[a.Key] = max(held[a.Key], n)
		}
	}
	hold(sent)
	go func() {
		// The filter runs under the recorder's lock, one call at a time.
		_, err := env.Acks.Next(ctx, func(a history.Ack) bool {
			if a.F != history.Write {
				return false
			}
			if a.Sent {
				if a.Node == node && !a.Late {
					hold(a)
				}
				return false
			}
			h, ok := held[a.Key]
			n, _, err := history.SplitToken(a.Token)
			return a.Node != node && ok && err == nil && n > h
		})
		if err == nil {
			close(made)
		}
	}()
	return made
}

// awaitWriteSent waits for the next write sent to node (at most ackWait:
// a node that serves none meanwhile is frozen anyway, and the details say
// the freeze was not timed), then until after has passed since, passing
// over a write answered or stripped of its token meanwhile. The frozen
// write is overtaken by its writer's own newer one once it failed over
// (workloads' failover), so any write will do: it used to wait half its
// time for a write on a key granted through another node (most keys had
// one writer, on one node). Holding new outages back from the freeze until
// the write was overtaken, and starting the freeze first in a fault phase
// with the store whole, were tried and dropped: they cost the crash
// situations on redis more than they gave (docs/coverage.md); so were,
// with the freeze held until overtaken, holding new outages back from the
// frozen holder's lease end, and passing over writes sent while most
// nodes keeping state were held (with no untimed freeze): redis seeds
// 1-10, fewer writes overtaken and the crash situations short more often
// (docs/guided-measured.md, stop 50). A write sent
// late by intent (a straggler's, a woken holder's: history.Ack.Late) is
// passed over: its client goes no further with the key, so nothing newer
// of its own follows it through another node (redis, seeds 1 and 2: 5 of
// 8 timed freezes held one, and none of those was overtaken).
func awaitWriteSent(ctx context.Context, env *Env, node string, after time.Duration, details map[string]any) (history.Ack, error) {
	details["on_write"] = true
	details["timed"] = false
	if env.Acks == nil {
		return history.Ack{}, nil
	}
	main := mainPhase(ctx)
	wctx, cancel := context.WithTimeout(main, ackWait)
	defer cancel()
	for {
		sent, err := env.Acks.Next(wctx, func(a history.Ack) bool {
			return a.Sent && a.F == history.Write && a.Node == node && !a.Late
		})
		if err != nil {
			if ctx.Err() != nil {
				return history.Ack{}, ctx.Err()
			}
			if main.Err() != nil {
				// The main phase ended first: a freeze now would hold
				// a write no newer one can overtake in it.
				return history.Ack{}, ErrRefusedNow
			}
			return history.Ack{}, nil
		}
		if answeredOrStripped(ctx, env, sent, after) {
			continue
		}
		details["timed"] = true
		details["write_index"], details["write_key"] = sent.Index, sent.Key
		details["frozen_after_us"] = time.Since(sent.At).Microseconds()
		return sent, nil
	}
}

// answeredOrStripped waits until after has passed since the write sent was
// sent, and says whether it was answered meanwhile (an ok) or the strip
// proxy took its token on the way: a freeze then holds no valid write.
// Of the timed freezes of twelve redis runs, a third froze a write
// stripped on its way and a sixth one already answered.
func answeredOrStripped(ctx context.Context, env *Env, sent history.Ack, after time.Duration) bool {
	wctx, cancel := context.WithDeadline(ctx, sent.At.Add(after))
	defer cancel()
	_, err := env.Acks.Next(wctx, func(a history.Ack) bool {
		return a.Key == sent.Key && a.Node == sent.Node && (a.F == history.Tamper || a.F == history.Write && !a.Sent)
	})
	return err == nil
}

// holderStall sizes a holder pause from the lease the system really granted
// (not the one asked for: etcd raises a 1 s lease to about 2 s) plus how
// late takeovers succeeded after a lease's end so far, plus a margin of half
// to one and a half asked-for leases for the second client to take the lock
// and write; and draws how many holders stall at once (most of the locks).
func holderStall(env *Env, rng *rand.Rand) (time.Duration, int) {
	d := leaseToOutlast(env) + env.TTL/2 + time.Duration(rng.Int64N(int64(env.TTL)+1))
	most := max(env.Holders.MaxPaused(), 1)
	n := most
	if most > 1 {
		n = most - rng.IntN(2)
	}
	return d, n
}

// quietHolderPause says whether p is a holder pause that hushes outages,
// and its stall.
func quietHolderPause(p Plan) (time.Duration, bool) {
	pp, ok := p.Params.(*pauseParams)
	if !ok || pp.Mode != PauseHolders || !pp.Quiet {
		return 0, false
	}
	return time.Duration(pp.StallMS) * time.Millisecond, true
}
