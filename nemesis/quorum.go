package nemesis

import (
	"maps"
	"slices"
)

// Aimed faults on a quorum's members: the guided schedule draws outages
// of one replica group's members side by side (a restart, a power loss,
// each made its situation when the members came back), but a fault that
// waits, as it starts, for the system to answer needs a majority up until
// it has its answer. A power cut timed by an acknowledgement was armed on
// one etcd member, a power loss and a restart of the other two came 50
// and 250 ms later, no acknowledgement came, and the cut went untimed
// (etcd, 3 members, a 30 s run: 6 of its 12 member outages overlapped
// another).

// AnswerAwaiter is a nemesis whose fault waits, as it starts, for the
// system to answer (a power cut timed by an acknowledgement).
type AnswerAwaiter interface{ AwaitsAnswer() bool }

func awaitsAnswer(n Nemesis) bool {
	aa, ok := n.(AnswerAwaiter)
	return ok && aa.AwaitsAnswer()
}

// keepsQuorum says whether p may be claimed as fault with c.mu held. An
// aimed fault that awaits an answer starts only while a majority of each
// of its groups stays up with it (a plan that alone takes a majority down
// goes when no other outage is on the group); an aimed outage waits while
// such a fault on one of its groups still awaits its answer. Unaimed
// draws (no groups) keep their freedom.
func (c *claims) keepsQuorum(p Plan, fault int64) bool {
	for _, g := range p.keep {
		if p.Outage {
			for holder, groups := range c.awaiting {
				if holder != fault && slices.ContainsFunc(groups, func(o []string) bool { return overlaps(o, g) }) {
					return false
				}
			}
		}
		if !p.awaits {
			continue
		}
		others, mine := 0, 0
		for _, n := range g {
			if holder, ok := c.by[n]; ok && holder != fault && c.down[holder] {
				others++
			}
			if p.Outage && slices.Contains(p.Nodes, n) {
				mine++
			}
		}
		if others > 0 && others+mine > (len(g)-1)/2 {
			return false
		}
	}
	return true
}

// begun says fault has started (or failed to): it awaits no answer now.
func (c *claims) begun(fault int64) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.awaiting, fault)
}

// replicaGroups are the groups of three or more nodes keeping one half's
// state (the issuer's, the resource's) that nodes act on: a quorum of
// them serves while a majority is up.
func replicaGroups(env *Env, nodes []string) [][]string {
	var out [][]string
	for _, h := range []half{issuerState, resourceState} {
		g := slices.Sorted(maps.Keys(stateNodes(env, h)))
		if len(g) >= 3 && overlaps(g, nodes) && !slices.ContainsFunc(out, func(o []string) bool { return slices.Equal(o, g) }) {
			out = append(out, g)
		}
	}
	return out
}
