package nemesis

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"time"
)

// The guided schedule's nemeses that start alone (a member replacement):
// when their first turn comes, and what may run beside them.

// wholeFor is how long a cluster must have been whole before it agrees to a
// membership change: etcd refuses to remove a member until every other has
// been connected to the leader for 5 s (its strict reconfiguration check).
// A nemesis that starts alone (Alone) has its first turn right after a calm
// phase at least this long, first thing, before the fault phase's own
// faults. Drawn in the first fault phase's extension instead, right after
// its faults (etcd, 3 members: a partition, a restart), its removal was
// refused for 5 s and then took 4 s more, 9 s of a 30 s run with no other
// fault, and the run had room for one more fault phase only.
const wholeFor = 5 * time.Second

// aloneAwaits is a nemesis that starts alone and never had a turn.
func (s *Scheduler) aloneAwaits(conducted []Nemesis) (Nemesis, bool) {
	tried := s.tried()
	i := slices.IndexFunc(conducted, func(n Nemesis) bool { return alone(n) && tried[n.Name()] == 0 })
	if i < 0 {
		return nil, false
	}
	return conducted[i], true
}

// aloneFirst is the nemesis that starts alone whose first turn comes now:
// it never had one, and the calm phase just ended lasted whole or more.
func (s *Scheduler) aloneFirst(conducted []Nemesis, calmBefore, whole time.Duration) (Nemesis, bool) {
	if calmBefore < whole {
		return nil, false
	}
	return s.aloneAwaits(conducted)
}

// notDeferred are the conducted nemeses but, with deferAlone, those that
// start alone: their first turn waits for a calm phase (aloneFirst).
func (s *Scheduler) notDeferred(conducted []Nemesis, deferAlone bool) []Nemesis {
	if !deferAlone {
		return conducted
	}
	return slices.DeleteFunc(slices.Clone(conducted), alone)
}

// aloneTurn gives n (which starts alone) its first turn, before a fault
// phase, and waits until its fault ended, meanwhile drawing the faults
// that keep the cluster whole (keepsWhole: free says which; and the
// clients' nemeses' aims at stateless nodes: statelessOnly) toward their
// situations; false when ctx ended first.
func (s *Scheduler) aloneTurn(ctx context.Context, rng *rand.Rand, n Nemesis, calmBefore time.Duration, conducted []Nemesis, launch func(aim, time.Time)) bool {
	pl := s.guide.lengths
	s.guide.set(false, time.Now().Add(pl.faultMax))
	// Its length from the shortest quarter, as an edge's: what it shows
	// shows as the member comes back (empty), and every other outage
	// waits for its end (etcd, 3 members: 4 s of a 30 s run).
	a := aim{nemesis: n, short: true, why: fmt.Sprintf("first turn, alone, after a calm phase of %s: the cluster whole", calmBefore.Round(100*time.Millisecond))}
	frng := rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64()))
	s.guide.starting(n.Name(), true)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer s.guide.starting(n.Name(), false)
		s.conductOne(ctx, frng, a, time.Now().Add(pl.faultMax))
	}()
	for {
		select {
		case <-done:
			return true
		case <-ctx.Done():
			<-done
			return false
		case <-time.After(between(rng, pl.gapMin, pl.gapMax)):
		}
		end := time.Now().Add(pl.faultMax)
		s.guide.set(false, end)
		// Aimed, and away from its node, once it is on: a clock on the
		// member being replaced waited for it to come back (etcd: 12 s).
		held := s.liveNodes(n.Name())
		if held == nil {
			continue
		}
		if b, ok := nextFault(s.Env, s.aimCoverage(), s.free(conducted), s.aimOnly(conducted), s.tried(), rng); ok && b.nodes != nil {
			if !slices.Contains(conducted, b.nemesis) && !statelessOnly(s.Env, b.nodes) {
				continue
			}
			b.nodes = maps.Clone(b.nodes)
			for _, node := range held {
				delete(b.nodes, node)
			}
			if len(b.nodes) > 0 {
				launch(b, end)
			}
		}
	}
}

// statelessOnly says whether every one of nodes keeps no state (an adapter
// the writes go through): a fault there leaves the cluster whole. Beside a
// member replacement, the freeze of an adapter aimed at a write overtaken
// (pause, a clients' nemesis: aimOnly) goes on; the newer write needs only
// a quorum, which the replacement keeps. Held back with the other outages,
// its turns came after the replacement, among crashes of the members: etcd
// (3 members, seed 1), a freeze from 23.5 s held its write 6 s while a
// power loss and a restart of two members left no quorum from 24.9 to
// 25.9 s, and nothing overtook it (write-overtaken: 2 in three runs).
func statelessOnly(env *Env, nodes map[string]bool) bool {
	stateless := map[string]bool{}
	for _, n := range nodesOf(env) {
		stateless[n.Name] = n.Stateless
	}
	for n := range nodes {
		if !stateless[n] {
			return false
		}
	}
	return len(nodes) > 0
}

// Alone is a nemesis whose fault needs the rest of the system whole, from
// its start to its end (a member replacement: etcd refuses to remove a
// member while another is cut off or down, and the new one catches up
// from the others), and otherwise holds a phase for many seconds (etcd, 3
// members: 19 s, most of it retrying the removal, which kept the run's
// only long calm phase from coming). The guided schedule starts it when
// no other fault on a node is live, and none while it is (but clock steps,
// keepsWhole, and freezes of stateless nodes, statelessOnly).
type Alone interface{ StartsAlone() bool }

func alone(n Nemesis) bool {
	a, ok := n.(Alone)
	return ok && a.StartsAlone()
}

// keepsWhole says whether n's faults leave every node up and connected,
// all a fault that starts alone needs of the others: a clock step (etcd
// times its elections and leases by the monotonic clock). Beside a member
// replacement, whose removal and catching up held every other fault back
// for 5-12 s of a 30 s run, clock faults go on (etcd, 3 members:
// issuer-clock-back-regrant stayed at 1).
func keepsWhole(n Nemesis) bool {
	e, ok := n.(Effector)
	return ok && slices.Equal(e.Effects(), []Effect{SkewsClocks})
}

// drainForAlone says whether the conductor should start nothing now so
// that a nemesis that starts alone (Alone) gets its first turn: it is the
// last one never tried, and other faults are live. Without it, faults drawn
// one after another kept one live at every moment, and etcd's member
// replacement never ran in a 30 s run.
func (s *Scheduler) drainForAlone(conducted, free []Nemesis) bool {
	tried := s.tried()
	waiting := false
	for _, n := range conducted {
		if tried[n.Name()] > 0 {
			continue
		}
		if !alone(n) || slices.Contains(free, n) {
			return false
		}
		waiting = true
	}
	return waiting
}
