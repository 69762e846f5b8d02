package analysis

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/fencing"
	"github.com/fencecheck/fencecheck/history"
)

// A node serves when it answers: an operation that ended ok, or failed with
// the node's own rejection. A refused connection, a timeout or a reset is no
// answer. The gate asks of every node the clients used in the main phase
// whether it answered at all for most of it: a system that stopped serving
// (its containers removed, a process dead and never back) records thousands
// of refused operations, each definite, and a valid history of them says
// nothing about fencing.

// minServiceGap is the shortest silence the analysis remembers: shorter
// ones cannot be most of any main phase worth judging.
const minServiceGap = 100 * 1e6 // 100 ms

// nodeService follows one node's answers during the main phase.
type nodeService struct {
	served     bool  // answered at least once
	lastServed int64 // time of the last answer (or of the main phase's start)
	asked      int   // operations sent to it in the main phase
	unanswered int   // of those, ended without its answer
	gaps       [][2]int64
}

// serviceTracker is the analyzer's part that reads service per node.
type serviceTracker struct {
	nodes map[string]*nodeService
}

// add takes a client event at a time inside the main phase, which began at
// mainStart.
func (s *serviceTracker) add(e history.Event, mainStart int64) {
	if e.Node == "" {
		return
	}
	if s.nodes == nil {
		s.nodes = map[string]*nodeService{}
	}
	n := s.nodes[e.Node]
	if n == nil {
		n = &nodeService{lastServed: mainStart}
		s.nodes[e.Node] = n
	}
	switch {
	case e.Type == history.Invoke:
		n.asked++
	case e.Type == history.Ok || e.Type == history.Fail && e.Error != fencing.ErrWordRefused:
		if e.Time-n.lastServed >= minServiceGap {
			n.gaps = append(n.gaps, [2]int64{n.lastServed, e.Time})
		}
		n.served, n.lastServed = true, max(n.lastServed, e.Time)
	default:
		n.unanswered++
	}
}

// silences says which nodes answered nothing for more than half the main
// phase [start, end), not counting time under a fault (a paused or cut
// node's silence is the fault's effect, and a fault on a backing store
// silences its adapters).
func (s *serviceTracker) silences(start, end int64, faults []Fault) []string {
	phase := end - start
	if phase <= 0 {
		return nil
	}
	var periods [][2]int64
	for _, f := range faults {
		if !f.Instant() {
			periods = append(periods, [2]int64{f.Start, f.Stop})
		}
	}
	var why []string
	for _, name := range sortedKeys(s.nodes) {
		n := s.nodes[name]
		gaps := append(slices.Clone(n.gaps), [2]int64{n.lastServed, end})
		var worst [2]int64
		var worstLen int64
		for _, g := range gaps {
			g[1] = min(g[1], end)
			if l := g[1] - g[0] - covered(g, periods); l > worstLen {
				worst, worstLen = g, l
			}
		}
		if 2*worstLen <= phase {
			continue
		}
		what := fmt.Sprintf("from %s to %s", checkers.Secs(worst[0]), checkers.Secs(worst[1]))
		if !n.served {
			what = "at all"
		}
		why = append(why, fmt.Sprintf("node %s served nothing %s (%s of the %s main phase outside fault periods; %d of the %d operations sent to it got no answer from it): the system stopped serving",
			name, what, checkers.Secs(worstLen), checkers.Secs(phase), n.unanswered, n.asked))
	}
	return why
}

// covered is how much of g the union of periods covers.
func covered(g [2]int64, periods [][2]int64) int64 {
	var cut [][2]int64
	for _, p := range periods {
		lo, hi := max(p[0], g[0]), min(p[1], g[1])
		if lo < hi {
			cut = append(cut, [2]int64{lo, hi})
		}
	}
	slices.SortFunc(cut, func(x, y [2]int64) int { return cmp.Compare(x[0], y[0]) })
	var total, reach int64 = 0, g[0]
	for _, c := range cut {
		lo := max(c[0], reach)
		if c[1] > lo {
			total += c[1] - lo
			reach = c[1]
		}
	}
	return total
}
