package porcupine

import (
	"context"
	"runtime"
	"sort"
	"sync"
	"time"

	porc "github.com/anishathalye/porcupine"
	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/history"
)

// porcupineKey is one porcupine partition: one key of one model.
type porcupineKey struct {
	model string
	key   string
	// ops are the key's operations as the models see them (for prefixes).
	// They are copied out of h while the key is searched (run) and kept
	// after it only while it is invalid (findFirstInvalid, notLinearizable).
	writes, reads, acquires []*history.Op
	// size is how many operations the key has (the search's order).
	size   int
	sem    checkers.Semantics
	issued *checkers.Issued
	result checkers.KeyResult
	// h is the grouping the operations were copied from (nil: the copies
	// are all there is).
	h *checkers.ByKey
}

// ops are the key's operations: its copies while it is checked, copied
// again from the grouping once Check let them go.
func (k *porcupineKey) ops() (writes, reads, acquires []*history.Op) {
	if k.h == nil || k.writes != nil || k.reads != nil || k.acquires != nil {
		return k.writes, k.reads, k.acquires
	}
	if k.model == checkers.ModelIssuer {
		return nil, nil, k.h.Issuer(k.key)
	}
	ko := k.h.Register(k.key)
	return ko.Writes, ko.Reads, nil
}

func (k *porcupineKey) operations(writes, reads, acquires []*history.Op) []porc.Operation {
	if k.model == checkers.ModelIssuer {
		return issuerOperations(acquires)
	}
	return registerOperations(writes, reads, k.sem, k.issued)
}

func (k *porcupineKey) porcupineModel(abort *abortFlag) porc.Model {
	if k.model == checkers.ModelIssuer {
		return issuerModel(abort)
	}
	return registerModel(k.sem, abort)
}

// run checks one key with porcupine until deadline. The key's operations
// are copied out for it and, unless it is invalid, let go after it.
func (k *porcupineKey) run(ctx context.Context, deadline time.Time) {
	start, before := time.Now(), k.result.Elapsed
	w, r, a := k.ops()
	ops := k.operations(w, r, a)
	k.result = checkers.KeyResult{Model: k.model, Key: k.key, FirstInvalidAt: -1}
	for _, op := range ops {
		if m, ok := op.Metadata.(porcOpMeta); ok && m.op != nil {
			k.result.Ops++
		} else {
			k.result.Segments++
		}
	}
	if len(ops) > 0 {
		k.result.Segments++
	}
	k.result.Verdict = k.check(ctx, ops, deadline)
	k.result.Elapsed = before + time.Since(start)
	if k.h != nil && k.result.Verdict != checkers.Invalid {
		w, r, a = nil, nil, nil
	}
	k.writes, k.reads, k.acquires = w, r, a
}

func (k *porcupineKey) check(ctx context.Context, ops []porc.Operation, deadline time.Time) checkers.Verdict {
	if len(ops) == 0 {
		return checkers.Valid
	}
	remaining := time.Until(deadline)
	if remaining <= 0 || ctx.Err() != nil {
		return checkers.Unknown
	}
	abort := &abortFlag{ctx: ctx}
	res := porc.CheckOperationsTimeout(k.porcupineModel(abort), ops, remaining)
	if abort.aborted.Load() || ctx.Err() != nil {
		return checkers.Unknown
	}
	switch res {
	case porc.Ok:
		return checkers.Valid
	case porc.Illegal:
		return checkers.Invalid
	}
	return checkers.Unknown
}

// findFirstInvalid binary-searches the earliest completion time T such that
// the key's history as it stood at T is already not linearizable: that is
// when the history first showed the violation (time to detection).
//
// The history at T keeps the operations invoked by T; those still in flight
// at T become unknown-outcome (writes) or are dropped (reads, acquires). Non-
// linearizability is monotone in T: the operations completed by T are
// linearized by T, before everything invoked later, so a linearization of
// the whole history restricted to them is one of the history at T.
func (k *porcupineKey) findFirstInvalid(ctx context.Context, deadline time.Time) {
	var times []int64
	for _, list := range [][]*history.Op{k.writes, k.reads, k.acquires} {
		for _, op := range list {
			if op.Return != history.Never {
				times = append(times, op.Return)
			}
		}
	}
	sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
	times = compactTimes(times)
	if len(times) == 0 {
		return
	}
	lo, hi := 0, len(times)-1 // invariant: invalid at times[hi]; valid below lo
	for lo < hi {
		mid := (lo + hi) / 2
		w, r, a := prefixAt(k.writes, times[mid]), prefixAt(k.reads, times[mid]), prefixAt(k.acquires, times[mid])
		switch k.check(ctx, k.operations(w, r, a), deadline) {
		case checkers.Invalid:
			hi = mid
		case checkers.Valid:
			lo = mid + 1
		default:
			return // out of time: no exact answer
		}
	}
	at := times[hi]
	k.result.FirstInvalidAt = at
	for _, list := range [][]*history.Op{k.writes, k.reads, k.acquires} {
		for _, op := range list {
			if op.Return == at {
				k.result.Culprits = append(k.result.Culprits, op.ID)
			}
		}
	}
	sort.Slice(k.result.Culprits, func(i, j int) bool { return k.result.Culprits[i] < k.result.Culprits[j] })
}

func compactTimes(ts []int64) []int64 {
	out := ts[:0]
	for i, t := range ts {
		if i == 0 || t != ts[i-1] {
			out = append(out, t)
		}
	}
	return out
}

// prefixAt is ops as the history showed them at time t: invoked by t; a
// completion after t is not yet known (writes become unknown-outcome; reads
// and acquires, which then constrain nothing, are dropped).
func prefixAt(ops []*history.Op, t int64) []*history.Op {
	out := make([]*history.Op, 0, len(ops))
	for _, op := range ops {
		if op.Call > t {
			continue
		}
		if op.Completed > t {
			if op.F != history.Write {
				continue
			}
			c := *op
			c.Outcome, c.Return, c.Completed, c.Error = history.OutcomeInfo, history.Never, history.Never, ""
			op = &c
		}
		out = append(out, op)
	}
	return out
}

// runPorcupine checks every key, a few at a time, within one deadline.
//
// One hard key must not starve the others: in a first pass each key gets a
// fair share of the time left (time left × workers / keys left); keys not
// decided in their share are retried in a second pass with all the time that
// is left, easiest first. Only then, with what remains, are the first points
// of violation of invalid keys narrowed down.
func runPorcupine(ctx context.Context, keys []*porcupineKey, deadline time.Time) {
	size := func(k *porcupineKey) int {
		if k.h == nil {
			return len(k.writes) + len(k.reads) + len(k.acquires)
		}
		return k.size
	}
	order := append([]*porcupineKey(nil), keys...)
	sort.SliceStable(order, func(i, j int) bool { return size(order[i]) < size(order[j]) })
	workers := max(1, min(runtime.GOMAXPROCS(0), len(order)))

	var mu sync.Mutex
	left := len(order)
	share := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		d := time.Until(deadline) * time.Duration(workers) / time.Duration(max(left, 1))
		left--
		if t := time.Now().Add(d); t.Before(deadline) {
			return t
		}
		return deadline
	}
	parallel(order, workers, func(k *porcupineKey) { k.run(ctx, share()) })

	var retry []*porcupineKey
	for _, k := range order {
		if k.result.Verdict == checkers.Unknown {
			retry = append(retry, k)
		}
	}
	if ctx.Err() == nil && time.Now().Before(deadline) {
		parallel(retry, workers, func(k *porcupineKey) { k.run(ctx, deadline) })
	}

	var invalid []*porcupineKey
	for _, k := range order {
		if k.result.Verdict == checkers.Invalid {
			invalid = append(invalid, k)
		}
	}
	parallel(invalid, workers, func(k *porcupineKey) {
		start := time.Now()
		k.findFirstInvalid(ctx, deadline)
		k.result.Elapsed += time.Since(start)
	})
}

// parallel calls fn on every key, with at most workers at once.
func parallel(keys []*porcupineKey, workers int, fn func(*porcupineKey)) {
	work := make(chan *porcupineKey)
	var wg sync.WaitGroup
	for range min(workers, len(keys)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range work {
				fn(k)
			}
		}()
	}
	for _, k := range keys {
		work <- k
	}
	close(work)
	wg.Wait()
}
