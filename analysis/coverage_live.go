package analysis

import "github.com/fencecheck/fencecheck/history"

// CoverageCounter counts coverage while the history is still being
// written: Add each event as it is recorded, read Coverage at any time.
// The events go through the analysis's own intake and are counted by the
// code Check counts with after the run, so a live count and the final one
// cannot disagree about the same events. Not safe for concurrent use: one
// goroutine adds and reads.
type CoverageCounter struct{ a *analyzer }

// NewCoverageCounter takes the options Check would (semantics, TTL,
// Lenient); it runs no checker.
func NewCoverageCounter(opts Options) (*CoverageCounter, error) {
	opts.Checkers = []Checker{}
	a, err := newAnalyzer(opts)
	if err != nil {
		return nil, err
	}
	return &CoverageCounter{a: a}, nil
}

// Add takes the next event of the history. Under Lenient a damaged event
// is skipped, as Check skips it.
func (c *CoverageCounter) Add(e history.Event) error {
	if err := c.a.add(e); err != nil {
		if !c.a.opts.Lenient {
			return err
		}
		c.a.damaged(err.Error())
	}
	return nil
}

// Coverage is what the events so far created. Operations still in flight
// are not counted until they complete, faults still on count as lasting
// until the latest event, and a time scale applies once the main phase so
// far could hold it. Each call copies and counts every operation so far:
// read it every few seconds, not per event.
func (c *CoverageCounter) Coverage() *Coverage {
	snap := &history.Ops{}
	var o history.Op
	for i := range c.a.ops.Len() {
		c.a.ops.Load(i, &o)
		snap.Add(&o)
	}
	for _, op := range c.a.late {
		snap.Add(op)
	}
	snap.Sort()
	_, lateReached := lateWrites(snap)
	return c.a.coverageOf(snap, c.a.faults.periods(c.a.end), lateReached)
}
