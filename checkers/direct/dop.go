package direct

import (
	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/history"
)

// dop is what the direct checks read of one operation: a history.Op
// without the fields only the words of an anomaly need (its key, process,
// node, tampering), which are loaded again from the history's Ops then
// (anomalySink.full). It is about half a history.Op, and the checks hold
// one key's at a time: on a history of millions, the largest key's copies
// were tens of MB, alive beside every other checker's records.
type dop struct {
	ID                      int64
	Call, Return, Completed int64
	Token                   history.Token
	Value, Error, HighWater string
	Outcome                 history.Outcome
	// authentic is checkers.Issued.Authentic for this operation.
	authentic bool
	// pos is the operation's index in the history's Ops.
	pos int32
}

// copier copies one key's operations out of the history's Ops into
// buffers it reuses: what copy returns is valid until its next call.
type copier struct {
	ops     *history.Ops
	largest int
	auth    *checkers.Issued
	sem     checkers.Semantics
	slab    []dop
	a, b    []*dop
	op      history.Op // one full operation, reused
}

// copy copies the operations at positions a and b (each in its order).
func (c *copier) copy(a, b []int32) (x, y []*dop) {
	if n := len(a) + len(b); cap(c.slab) < n {
		// Room for the largest key at once: growing key by key would
		// allocate (and clear, and have the collector scan) one slab per
		// new largest key.
		c.slab = make([]dop, max(n, c.largest))
	}
	c.a = c.fill(a, c.a, c.slab[:len(a)])
	c.b = c.fill(b, c.b, c.slab[len(a):len(a)+len(b)])
	return c.a, c.b
}

func (c *copier) fill(at []int32, into []*dop, slab []dop) []*dop {
	into = into[:0]
	op := &c.op
	for i, j := range at {
		if i%history.TouchBatch == 0 {
			c.ops.Touch(at[i:min(i+history.TouchBatch, len(at))])
		}
		c.ops.Load(int(j), op)
		d := &slab[i]
		*d = dop{ID: op.ID, Call: op.Call, Return: op.Return, Completed: op.Completed, Token: op.Token,
			Value: op.Value, Error: op.Error, HighWater: op.HighWater, Outcome: op.Outcome,
			authentic: c.auth.Authentic(op, c.sem), pos: j}
		into = append(into, d)
	}
	return into
}
