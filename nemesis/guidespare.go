package nemesis

import (
	"slices"
	"time"
)

// The stretch spared from crashes. A system whose idle timers start again
// when it starts (an eviction after 3 s without a write, kept in memory)
// shows its flaw only after that long uncrashed; where one node keeps all
// the state, every crash starts every timer again. The guided first fault
// phase gives every kind of crash its first turn in its first seconds, so
// such a flaw waited for the calm phase after it (the reference's
// forget-idle-since-start: 9.5 s median against random's 5.0 s; the
// example server's forget-idle: 9.5 against 5.3). So once the run's first
// fault that loses state has ended, no other starts for spareFor while an
// idle situation is short: the other faults go on (the clock, the cuts,
// the proxies), and the idle probes' ladders meet the forgetting. The first
// crash already shows what any crash shows (a counter or a mark not made
// durable), and a power cut on an acknowledgement, which goes first where
// it applies, what a power loss shows.

// spareFor is how long the stretch lasts: the 5 s idle scale's ladder
// reaches its last step in it.
const spareFor = 5500 * time.Millisecond

// losesState says whether n's faults may take state from a node.
func losesState(n Nemesis) bool {
	e, ok := n.(Effector)
	return ok && slices.Contains(e.Effects(), LosesState)
}

// oneStateNode says whether a single node of the target keeps state.
func oneStateNode(env *Env) bool {
	n := 0
	for _, node := range nodesOf(env) {
		if !node.Stateless {
			n++
		}
	}
	return n == 1
}

// idleShort says whether a quiet idle situation is below target in cov.
func idleShort(cov map[string]int) bool {
	if cov == nil {
		return false
	}
	for i := range deficits(cov) {
		if remedies[i].idle > 0 {
			return true
		}
	}
	return false
}

// crashEnded notes that a fault of n ended: the first that loses state
// begins the stretch.
func (s *Scheduler) crashEnded(n Nemesis) {
	if s.guide.lengths.spare > 0 && losesState(n) && oneStateNode(s.Env) {
		s.guide.spareFrom(time.Now())
	}
}

// spares says whether n's fault waits now: it loses state, and the stretch
// is on while an idle situation is short.
func (s *Scheduler) spares(n Nemesis) bool {
	return losesState(n) && s.guide.sparing() && idleShort(s.coverage())
}
