package models

import (
	"context"
	"time"

	"github.com/fencecheck/fencecheck/history"
)

// The fast checker plugs itself into Check (check.go) through the hook
// there, so `fencecheck check|test --checker fast|both` run it.
func init() { RegisterFastChecker(checkFastOps) }

// checkFastOps is the FastCheckFunc: it copies what it needs from ops (it
// does not modify them) and decides both models. ctx is honoured between
// keys: an interrupted check answers Unknown, never Valid.
func checkFastOps(ctx context.Context, ops []*history.Op, sem Semantics) []Result {
	start := time.Now()
	c := NewFastChecker(sem)
	c.ctx = ctx
	for _, op := range ops {
		c.Add(op)
	}
	res := c.Results()
	for i := range res {
		res[i].Duration = time.Since(start)
	}
	return res
}
