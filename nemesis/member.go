package nemesis

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"time"
)

// MemberReplacer is a cluster whose membership can change while it serves,
// the way an operator replaces a failed machine (etcd's robustness suite's
// MemberReplace): RemoveMember takes a member out of the cluster through the
// others (their member list no longer has it), stops it and empties its data
// folder; AddMember adds it back as a new member and starts it on the empty
// folder, returning once it has caught up with the others (it may serve
// clients only later: MemberSettler).
// RemoveMember that the cluster declined now wraps ErrRefusedNow: refused
// with nothing changed (a cluster that cannot prove the change safe now),
// or not committed in time while other faults keep its quorum away (it may
// still commit once they end: the member stays marked, and the heal's
// AddMember adds it back if it is out).
// AddMember of a member already back only waits for it to serve. Each says
// the member's id as the cluster names it (the one removed, the new one),
// for the history. ReplaceableMembers are the members either may name: a
// cluster of one has none (removing its only member ends it).
type MemberReplacer interface {
	ReplaceableMembers() []string
	RemoveMember(ctx context.Context, node string) (id string, err error)
	AddMember(ctx context.Context, node string) (id string, err error)
}

// MemberSettler is a MemberReplacer whose AddMember returns before the new
// member serves clients (once it caught up: it keeps the cluster whole,
// and a fault may take another member beside it): SettleMembers waits
// until every member serves. The final heal calls it, so that a run ends
// with its cluster whole and serving.
type MemberSettler interface {
	SettleMembers(ctx context.Context) error
}

// Settler is a MemberReplacer that says how long its members must all have
// been up and connected before it agrees to a membership change; without
// it, wholeFor (etcd's strict reconfiguration check: 5 s). A cluster that
// needs none (0) has its first replacement right after the opening quiet
// of a guided run, the cluster whole then, rather than after the first
// calm phase, half a 30 s run in.
type Settler interface {
	SettleBeforeChange() time.Duration
}

// settleFor is how long env's cluster must have been whole before a
// membership change.
func settleFor(env *Env, fallback time.Duration) time.Duration {
	if st, ok := env.Target.(Settler); ok {
		return st.SettleBeforeChange()
	}
	return fallback
}

// memberReplace removes a member from its cluster, wipes it, and adds it
// back when the fault ends. Unlike restart-wipe, the cluster is told first:
// a correct system loses nothing (the others hold every committed entry and
// the new member catches up from them), so "all" draws it where it applies.
// What it finds is a system that lets a member rejoin empty and vote or grant
// as if it remembered.
type memberReplace struct {
	mu sync.Mutex
	// out are the members removed and not yet added back (the final heal
	// adds them).
	out map[string]bool
	// added: a member was added back (the heal settles the cluster).
	added bool
}

// MemberReplace is the member replacement nemesis's name.
const MemberReplace = "member-replace"

func (*memberReplace) Name() string { return MemberReplace }

// StartsAlone: the removal and the new member's catching up need the
// other members whole (Alone).
func (*memberReplace) StartsAlone() bool { return true }

// Effects: the member comes back with nothing of its own; the cluster
// keeps what it committed.
func (*memberReplace) Effects() []Effect {
	return []Effect{LosesState, LosesUnsynced, LosesDurable}
}

// Params: none; the plan's one node is the member replaced.
func (*memberReplace) Params() any { return nil }

// Timing: a member is out for 1-3 s, between quiet periods of 2-5 s: each
// replacement costs the cluster two membership changes and a snapshot to
// the new member, so they come less often than restarts.
func (*memberReplace) Timing(*Env) Timing {
	return Timing{QuietMin: 2 * time.Second, QuietMax: 5 * time.Second, FaultMin: time.Second, FaultMax: 3 * time.Second}
}

func (*memberReplace) Applicable(env *Env) (bool, string) {
	mr, ok := env.Target.(MemberReplacer)
	if !ok {
		return false, "the target's membership cannot be changed while it runs"
	}
	if len(mr.ReplaceableMembers()) == 0 {
		return false, "the target has no member another one can remove and add back (a cluster of one)"
	}
	return true, ""
}

func (*memberReplace) Draw(ctx context.Context, env *Env, rng *rand.Rand) (Plan, error) {
	mr, ok := env.Target.(MemberReplacer)
	if !ok {
		return Plan{}, errors.New("the target cannot replace members")
	}
	node, err := pickFree(ctx, env, rng, nodesNamed(env, mr.ReplaceableMembers()))
	if err != nil {
		return Plan{}, err
	}
	return Plan{Nodes: []string{node}, TakesOver: true, Outage: true}, nil
}

func (m *memberReplace) Start(ctx context.Context, env *Env, p Plan) (*Fault, error) {
	mr, ok := env.Target.(MemberReplacer)
	if !ok || len(p.Nodes) != 1 {
		return nil, errors.New("a member replacement acts on one member of a target that can replace them")
	}
	node := p.Nodes[0]
	m.mu.Lock()
	if m.out == nil {
		m.out = map[string]bool{}
	}
	// Marked before the removal: one that removed the member and then
	// failed (its data not wiped) still leaves it for the heal to add back.
	m.out[node] = true
	m.mu.Unlock()
	removed, err := mr.RemoveMember(ctx, node)
	switch {
	case errors.Is(err, ErrRefusedNow):
		// Left marked: an earlier try whose answer was lost may have
		// removed it after all, and the heal's add of a member that is in
		// only waits for it.
		return nil, err
	case err != nil:
		return nil, applyFailed("", p.Nodes, err)
	}
	f := &Fault{Nodes: p.Nodes, Details: map[string]any{"removed_id": removed}, StopDetails: map[string]any{}}
	f.Stop = func(ctx context.Context) error {
		id, err := mr.AddMember(ctx, node)
		if err != nil {
			return err
		}
		m.mu.Lock()
		delete(m.out, node)
		m.added = true
		m.mu.Unlock()
		f.StopDetails["added_id"] = id
		if s, ok := env.Holders.(Stragglers); ok {
			s.AfterRestart(node)
		}
		return nil
	}
	return f, nil
}

// Heal adds back every member still out and, when a member was added back,
// waits until every member serves (MemberSettler): the cluster ends at its
// original size, every member serving.
func (m *memberReplace) Heal(ctx context.Context, env *Env) error {
	mr, ok := env.Target.(MemberReplacer)
	if !ok {
		return nil
	}
	m.mu.Lock()
	var out []string
	for n := range m.out {
		out = append(out, n)
	}
	m.mu.Unlock()
	var errs []error
	for _, n := range out {
		if _, err := mr.AddMember(ctx, n); err != nil {
			errs = append(errs, err)
			continue
		}
		m.mu.Lock()
		delete(m.out, n)
		m.added = true
		m.mu.Unlock()
	}
	m.mu.Lock()
	added := m.added
	m.mu.Unlock()
	if st, ok := env.Target.(MemberSettler); ok && added && len(errs) == 0 {
		if err := st.SettleMembers(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (*memberReplace) CheckPlan(env *Env, p Plan) error {
	if len(p.Nodes) != 1 {
		return errors.New("a member replacement acts on exactly one member")
	}
	if mr, ok := env.Target.(MemberReplacer); !ok || !hasNode(nodesNamed(env, mr.ReplaceableMembers()), p.Nodes[0]) {
		return errors.New("node " + p.Nodes[0] + " is not a member the target can replace")
	}
	return nil
}
