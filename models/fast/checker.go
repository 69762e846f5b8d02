package fast

import (
	"context"
	"time"

	"github.com/fencecheck/fencecheck/history"
	"github.com/fencecheck/fencecheck/models"
)

// Checker is the fast checker behind the analysis's Checker interface.
type Checker struct{}

// New returns the fast checker.
func New() *Checker { return &Checker{} }

// Name is "fast".
func (*Checker) Name() string { return models.CheckerFast }

// Check copies what it needs from ops (it does not modify them) into a
// Stream and decides both models. ctx is honoured between keys: an
// interrupted check answers Unknown, never Valid.
func (*Checker) Check(ctx context.Context, ops []*history.Op, sem models.Semantics) []models.Result {
	start := time.Now()
	c := NewStream(sem)
	c.ctx = ctx
	c.reserve(ops)
	for _, op := range ops {
		c.Add(op)
	}
	res := c.Results()
	for i := range res {
		res[i].Duration = time.Since(start)
	}
	return res
}
