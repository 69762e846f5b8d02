package analysis

import (
	"errors"

	"github.com/fencecheck/fencecheck/history"
)

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
	// Coverage does not read the lease-overlap analysis: the counter runs
	// no finder (whose leases grow with the run: about 7 bytes per
	// operation of a 10-minute run, and its CPU).
	a.leases, a.leaseErr = nil, errNoLeases
	return &CoverageCounter{a: a}, nil
}

var errNoLeases = errors.New("a coverage count runs no lease-overlap analysis")

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
// far could hold it. Each call sorts and counts every operation so far
// (in place: the info writes that may still change are added for the
// count and dropped after it, not a copy of every operation): read it
// every few seconds, not per event.
func (c *CoverageCounter) Coverage() *Coverage {
	ops := c.a.ops
	for _, op := range c.a.late {
		ops.AddProvisional(op)
	}
	defer ops.DropProvisional()
	ops.Sort()
	_, lateReached := lateWrites(ops)
	return c.a.coverageOf(ops, c.a.faults.periods(c.a.end), lateReached)
}
