package nemesis

import (
	"context"
	"errors"
	"sync"

	"github.com/fencecheck/fencecheck/history"
	"github.com/fencecheck/fencecheck/nemesis/lazyfs"
)

// Power lost by every node that keeps state at once: a rack or a data
// centre losing power, LazyFS's and Jepsen's crash of the whole cluster. A
// replicated store that acknowledges once a majority holds a write in its
// page cache, without fsync, survives any one node's power loss (the
// others still hold the write and give it back), and loses acknowledged
// writes only when they all go down together: only this finds the
// counter reset of a replicated issuer that does not fsync.

// PowerTogether is the mode of a power loss of several nodes at once.
const PowerTogether = "together"

// togetherOdds: one power loss in togetherOdds is of every node keeping
// state, where there are two or more and all are free.
const togetherOdds = 4

// togetherNodes are the power nodes that keep state, in table order, when
// every one is free (none when one is held: a paused or partitioned node
// left out would keep the writes the others lose).
func togetherNodes(env *Env) []string {
	var out []string
	for _, n := range powerNodes(env) {
		if n.Stateless {
			continue
		}
		if !env.free(n.Name) {
			return nil
		}
		out = append(out, n.Name)
	}
	return out
}

// cutTogether cuts the power of nodes one after another, as fast as the
// layer allows, and starts them again all at once when the fault ends: a
// member that waits for a quorum to start would wait for the others.
func cutTogether(ctx context.Context, env *Env, pc PowerCutter, rs Restarter, nodes []string, cs *lazyfs.CrashState) (*Fault, error) {
	var cut []string
	var files, entries, kept int
	for _, node := range nodes {
		loss, err := cutPower(ctx, env, pc, node, cs)
		if err != nil {
			return nil, applyFailed(PowerTogether, nodes, errors.Join(err, startAllAgain(ctx, env, rs, cut)))
		}
		cut = append(cut, node)
		files, entries, kept = files+loss.Files, entries+loss.Entries, kept+loss.Kept
	}
	details := map[string]any{history.ExtraMode: PowerTogether, "lost_files": files, "lost_entries": entries}
	if partialState(cs) {
		details["crash_mode"], details["crash_seed"] = cs.Mode, cs.Seed
	}
	if kept > 0 {
		details["kept_pages"] = kept
	}
	return &Fault{Nodes: nodes, Details: details,
		Stop: func(ctx context.Context) error { return startAllAgain(ctx, env, rs, nodes) }}, nil
}

// startAllAgain starts nodes side by side and waits for every one.
func startAllAgain(ctx context.Context, env *Env, rs Restarter, nodes []string) error {
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, node := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = startedAgain(ctx, env, rs, node, false)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
