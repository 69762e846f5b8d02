package nemesis

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/fencecheck/fencecheck/history"
	"github.com/fencecheck/fencecheck/nemesis/lazyfs"
)

// crashOnAck crashes the node that just answered: it waits for the next
// acknowledgement (an ok completion recorded in the history) of an acquire,
// a write or a release on its node, then, a drawn delay of 0 to a few
// milliseconds after it reached the client, kills the node (kill -9) or cuts
// its power. A system that answers before its data is on disk loses what it
// answered only in those few milliseconds, which faults started at random
// times rarely hit; this one aims at them, as LazyFS's crash "on a matching
// operation" and etcd's failpoints do from inside, but from what a client
// sees. The node starts again when the fault ends, as after restart or
// power-loss.
type crashOnAck struct{}

// CrashOnAck is the crash-on-ack nemesis's name.
const CrashOnAck = "crash-on-ack"

// Crash modes of crash-on-ack.
const (
	CrashKill  = "kill"
	CrashPower = "power-loss"
)

// AckWaiter is the run's feed of acknowledgements (history.Acks): Next waits
// for the next one match accepts, recorded after the call began.
type AckWaiter interface {
	Next(ctx context.Context, match func(history.Ack) bool) (history.Ack, error)
}

// ackCrash is a crash-on-ack plan's parameters: the trigger (an ok After on
// the plan's node), the delay after it, and the crash.
type ackCrash struct {
	Crash   string `json:"crash"`
	After   string `json:"after"`
	DelayUS int64  `json:"delay_us"`
	// AnyNode: the trigger is the acknowledgement of any node, not only
	// the crashed one's: a store's member never answers clients itself
	// (an adapter does), and it is its layer that holds the unsynced
	// writes the acknowledgement was given for.
	AnyNode bool `json:"any_node,omitempty"`
	// SlowFsyncMS: a power cut's node has its fsyncs slowed by this much
	// from before the acknowledgement until the cut (0: not slowed).
	SlowFsyncMS int64 `json:"slow_fsync_ms,omitempty"`
}

// ackKinds are the operations whose acknowledgement may trigger a crash:
// what a fencing system must have made durable before it answered.
var ackKinds = []string{history.Acquire, history.Write, history.Release}

// ackDelayMax bounds the drawn delay: the window of a system that answers
// and then fsyncs is a few milliseconds (an fsync's time).
const ackDelayMax = 3 * time.Millisecond

// slowFsyncMin and slowFsyncSpan draw a power cut's slowed fsyncs: a
// system that answers while the fsync of what it answered is under way
// (etcd v3.5.0-3.5.4 with one member, #14370) has a window as long as that
// fsync, a millisecond or less on a fast disk: the acknowledgement reaches
// the client, and the cut armed from here reaches the layer, after it
// closed. Tens of milliseconds keep it open until the armed cut lands on
// that fsync (the layer meets a cut after a slow disk's delay). A system
// that answers after its fsync returns only answers later. Where the target
// says where a node's log is (LogPather), only the log's fsyncs are slowed.
const (
	slowFsyncMin  = 20
	slowFsyncSpan = 41
)

// armWindow is how long a cut armed on the layer waits for an fsync: the
// cut sent from here follows within the delay, so the window only has to
// outlast it.
const armWindow = time.Second

// ackWait bounds the wait for the trigger: a node that answers no such
// operation meanwhile (a member behind an adapter, an idle key space) is
// crashed anyway, and the event says the crash was not timed.
const ackWait = 2 * time.Second

func (crashOnAck) Name() string { return CrashOnAck }

// Effects: a node comes back with what it made durable (after a kill, what
// it wrote; after a power loss, what it fsynced).
func (crashOnAck) Effects() []Effect { return []Effect{LosesState} }

// NeedsDiskLayer: its power-loss mode needs the lazyfs layer; without it
// only the kill mode is drawn.
func (crashOnAck) NeedsDiskLayer() bool { return true }

func (crashOnAck) Params() any { return &ackCrash{} }

// Timing: as restart's.
func (crashOnAck) Timing(env *Env) Timing { return restart{}.Timing(env) }

func (crashOnAck) Applicable(env *Env) (bool, string) {
	if env.Acks == nil {
		return false, "the run publishes no acknowledgements to time a crash by"
	}
	return restart{}.Applicable(env)
}

func (crashOnAck) Draw(ctx context.Context, env *Env, rng *rand.Rand) (Plan, error) {
	// An acquire or a write two times in five each, a release one time in
	// five: a lost release is no anomaly (the lock stays held until its
	// lease ends), a lost grant or write is.
	after := ackKinds[[]int{0, 0, 1, 1, 2}[rng.IntN(5)]]
	params := &ackCrash{Crash: CrashKill, After: after,
		DelayUS: rng.Int64N(ackDelayMax.Microseconds() + 1)}
	// Where a node's layer holds unsynced writes now, the power goes there,
	// right after the next acknowledgement of any node: the writes
	// predate it, and a system that answered before they were durable
	// loses what it answered (LazyFS's crash on a matching operation,
	// seen from outside).
	// One time in three the draw is as below all the same, so the kill
	// mode (which finds what was never written) keeps its share.
	if _, ok := env.Target.(PowerCutter); ok && rng.IntN(3) != 0 {
		if at := unsyncedNodes(ctx, env, powerNodes(env)); len(at) > 0 {
			node, err := pickFree(ctx, env, rng, at)
			if err != nil {
				return Plan{}, err
			}
			if grantless(env, node) {
				return Plan{}, ErrBusy
			}
			params.Crash, params.AnyNode = CrashPower, true
			params.After = powerTrigger(env, node, rng)
			params.SlowFsyncMS = drawSlowFsync(env, node, rng)
			return Plan{Nodes: []string{node}, TakesOver: true, Outage: true, Params: params}, nil
		}
	}
	p, err := restart{}.Draw(ctx, env, rng)
	if err != nil {
		return Plan{}, err
	}
	if grantless(env, p.Nodes[0]) {
		return Plan{}, ErrBusy
	}
	// A store behind adapters never answers a client itself: its crash is
	// timed by the acknowledgement the adapter gave for it. Waiting for its
	// own spent the whole wait (redis, etcd: every such crash untimed, 2 s
	// of a fault phase each, and no power cut on an acknowledgement).
	params.AnyNode = behindFront(env, p.Nodes[0])
	if !params.AnyNode {
		params.After = answeredBy(env, p.Nodes[0], params.After)
	}
	// Power loss whenever the node's data is on the layer, two times in
	// three: kill -9 keeps the page cache, so it finds only what was never
	// written.
	if _, ok := env.Target.(PowerCutter); ok && hasNode(powerNodes(env), p.Nodes[0]) && rng.IntN(3) != 0 {
		params.Crash = CrashPower
		params.After = powerTrigger(env, p.Nodes[0], rng)
		params.SlowFsyncMS = drawSlowFsync(env, p.Nodes[0], rng)
	}
	p.Params = params
	return p, nil
}

func (c crashOnAck) Start(ctx context.Context, env *Env, p Plan) (*Fault, error) {
	params, err := paramsOf[ackCrash](p)
	if err != nil {
		return nil, err
	}
	if err := c.CheckPlan(env, p); err != nil {
		return nil, err
	}
	rs, _ := env.Target.(Restarter)
	node := p.Nodes[0]
	details := map[string]any{history.ExtraMode: params.Crash, "after": params.After, "delay_us": params.DelayUS}
	// The fsyncs are slowed before the acknowledgement is waited for, so
	// that the fsync of what it answers is slowed too.
	var slowed DiskFaulter
	if params.Crash == CrashPower && params.SlowFsyncMS > 0 {
		df := env.Target.(DiskFaulter)
		f := lazyfs.Faults{FsyncDelay: time.Duration(params.SlowFsyncMS) * time.Millisecond}
		if lp, ok := env.Target.(LogPather); ok {
			f.FsyncDelayOnly = lp.LogPaths(node)
		}
		if err := df.SetDiskFaults(ctx, node, f); err == nil {
			slowed = df
			details["slow_fsync_ms"] = params.SlowFsyncMS
			if len(f.FsyncDelayOnly) > 0 {
				details["slow_fsync_of"] = strings.Join(f.FsyncDelayOnly, ",")
			}
		}
	}
	// With slowed fsyncs the trigger is an operation sent after they were
	// slowed: one sent before may have had its fsync made at full speed.
	sentSince := map[int]bool{}
	wctx, cancel := context.WithTimeout(ctx, ackWait)
	ack, werr := env.Acks.Next(wctx, func(a history.Ack) bool {
		if a.Sent {
			sentSince[a.Process] = true
			return false
		}
		return a.F == params.After && (params.AnyNode || a.Node == node) && (slowed == nil || sentSince[a.Process])
	})
	cancel()
	if werr != nil && ctx.Err() != nil {
		if slowed != nil {
			slowed.SetDiskFaults(context.WithoutCancel(ctx), node, lazyfs.Faults{})
		}
		return nil, ctx.Err()
	}
	delay := time.Duration(params.DelayUS) * time.Microsecond
	details["timed"] = werr == nil
	if params.AnyNode {
		details["any_node"] = true
	}
	// A power cut armed on the layer lands on the node's first fsync
	// from now, which in a system that answers before it syncs is the one
	// that was to make what it answered durable; the cut sent at the
	// delay's end takes the power if no fsync came first.
	if fc, ok := env.Target.(FsyncCutter); ok && params.Crash == CrashPower {
		if err := fc.ArmPowerCut(ctx, node, armWindow); err == nil {
			details["armed"] = true
		}
	}
	// What the layer held at the acknowledgement: the proof the crash
	// landed where durability was at stake (0: it tested nothing). Read
	// within the delay, not after it.
	if dp, ok := env.Target.(DurabilityProber); ok && params.Crash == CrashPower {
		if held, err := dp.UnsyncedWrites(ctx, node); err == nil {
			details["unsynced_files"], details["unsynced_entries"] = held.Files, held.Entries
		}
	}
	if werr == nil {
		time.Sleep(time.Until(ack.At.Add(delay)))
		details["ack_index"] = ack.Index
		details["ack_key"] = ack.Key
	}
	// How long after the acknowledgement the crash was sent: the delay,
	// plus the scheduling of this goroutine.
	sent := time.Now()
	switch params.Crash {
	case CrashPower:
		pc := env.Target.(PowerCutter)
		loss, err := pc.CutPower(ctx, node)
		if slowed != nil {
			// The disk is well again for the node's next start.
			slowed.SetDiskFaults(ctx, node, lazyfs.Faults{})
		}
		if err != nil {
			return nil, applyFailed(params.Crash, []string{node}, err)
		}
		details["lost_files"], details["lost_entries"] = loss.Files, loss.Entries
		if loss.AtFsync {
			details["at_fsync"] = true
		}
	default:
		if err := rs.KillNode(ctx, node); err != nil {
			return nil, applyFailed(params.Crash, []string{node}, err)
		}
	}
	if werr == nil {
		details["sent_after_ack_us"] = sent.Sub(ack.At).Microseconds()
	}
	return &Fault{Nodes: p.Nodes, Details: details,
		Stop: func(ctx context.Context) error { return startedAgain(ctx, env, rs, node, false) }}, nil
}

func (crashOnAck) CheckPlan(env *Env, p Plan) error {
	if len(p.Nodes) != 1 {
		return errors.New("a crash on an acknowledgement acts on exactly one node")
	}
	params, err := paramsOf[ackCrash](p)
	if err != nil {
		return err
	}
	if !slices.Contains(ackKinds, params.After) {
		return fmt.Errorf("a crash is timed by an acknowledged %v, not %q", ackKinds, params.After)
	}
	if params.DelayUS < 0 {
		return fmt.Errorf("a crash's delay after the acknowledgement is negative (%d us)", params.DelayUS)
	}
	if params.SlowFsyncMS < 0 {
		return fmt.Errorf("a crash's slowed fsync is negative (%d ms)", params.SlowFsyncMS)
	}
	if params.SlowFsyncMS > 0 && (params.Crash != CrashPower || !hasNode(diskNodes(env), p.Nodes[0])) {
		return fmt.Errorf("only a power cut of a node whose disk can be slowed has its fsyncs slowed (node %s)", p.Nodes[0])
	}
	if _, ok := env.Target.(Restarter); !ok {
		return errors.New("the target's nodes cannot be killed and restarted")
	}
	switch params.Crash {
	case CrashKill:
	case CrashPower:
		if _, ok := env.Target.(PowerCutter); !ok || !hasNode(powerNodes(env), p.Nodes[0]) {
			return fmt.Errorf("node %s's data is not on the lazyfs layer", p.Nodes[0])
		}
	default:
		return fmt.Errorf("a crash is %q or %q, not %q", CrashKill, CrashPower, params.Crash)
	}
	return nil
}

// powerTrigger draws the acknowledgement that times a power cut of node,
// so that what the cut takes shows: a lost write shows at the read-back
// once the node is back, a lost grant only when its token is handed out
// again (a counter that goes back does so at the next grant; an etcd
// revision may go to a resource's write instead), a lost release never.
// A node that holds only issuer state answers grants; one that holds
// only resource state, writes: it answers no grant, and keeps none to lose
// (two SSH hosts, issuer and resource: half the resource's cuts waited 2 s
// for a grant it never answers and went untimed).
func powerTrigger(env *Env, node string, rng *rand.Rand) string {
	for _, n := range nodesOf(env) {
		if n.Name != node {
			continue
		}
		is, res := strings.Contains(n.Role, "issuer"), strings.Contains(n.Role, "resource")
		switch {
		case is && !res:
			return history.Acquire
		case res && !is:
			return history.Write
		}
	}
	return []string{history.Acquire, history.Write, history.Write}[rng.IntN(3)]
}

// answeredBy is kind, or the kind node answers where it keeps one half's
// state only: a node that only issues answers no write (a grant instead),
// one that only keeps the resource answers nothing but writes. A kill
// timed by what its node never answers waits out ackWait, 2 s of the
// node's fault phase, untimed.
func answeredBy(env *Env, node, kind string) string {
	for _, n := range nodesOf(env) {
		if n.Name != node {
			continue
		}
		is, res := strings.Contains(n.Role, "issuer"), strings.Contains(n.Role, "resource")
		switch {
		case is && !res && kind == history.Write:
			return history.Acquire
		case res && !is:
			return history.Write
		}
	}
	return kind
}

// grantless says whether node keeps only the resource while every node
// keeping the issuer's state is held by a fault (restarted, powered off,
// frozen): its writes need fresh grants, so it answers none, and a crash
// waiting for one goes untimed after 2 s (two SSH hosts: each of the
// resource's untimed cuts once it was timed by writes). The draw waits
// for the issuer instead.
func grantless(env *Env, node string) bool {
	if answeredBy(env, node, history.Acquire) != history.Write {
		return false
	}
	issuers := stateNodes(env, issuerState)
	return len(issuers) > 0 && !issuers[node] && !slices.ContainsFunc(slices.Collect(maps.Keys(issuers)), env.free)
}

// drawSlowFsync draws how much a power cut's node has its fsyncs slowed,
// where its disk can be slowed.
func drawSlowFsync(env *Env, node string, rng *rand.Rand) int64 {
	if !hasNode(diskNodes(env), node) {
		return 0
	}
	return slowFsyncMin + rng.Int64N(slowFsyncSpan)
}

// behindFront says whether node keeps state behind stateless front nodes
// (adapters) that answer the clients for it: the acknowledgements of its
// writes are theirs.
func behindFront(env *Env, node string) bool {
	nodes := nodesOf(env)
	return slices.ContainsFunc(nodes, func(n Node) bool { return n.Name == node && !n.Stateless }) &&
		slices.ContainsFunc(nodes, func(n Node) bool { return n.Stateless })
}
