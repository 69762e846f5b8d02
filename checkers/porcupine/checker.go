// Package porcupine checks the fenced-register and issuer models with
// Porcupine (github.com/anishathalye/porcupine), key by key, within a time
// budget: complete, but exponential in a key's concurrency, so a key it
// cannot decide in time is Unknown, never Valid.
//
// model.go holds the Porcupine models, operations.go the exact reductions and
// segments that keep keys tractable, search.go the per-key search and its
// time sharing, visualize.go Porcupine's HTML visualization of one key.
package porcupine

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/history"
)

// DefaultTimeout bounds the search over a whole history when Checker.Timeout
// is 0.
const DefaultTimeout = time.Minute

// Checker is the Porcupine path behind the analysis's Checker interface. A
// Checker serves one history: after Check, KeyResults and Visualize describe
// that history's keys.
type Checker struct {
	// Timeout bounds the search over the whole history (0: DefaultTimeout);
	// the context's deadline, if earlier, bounds it too. Keys not decided in
	// time are Unknown.
	Timeout time.Duration

	mu   sync.Mutex
	keys map[string]*porcupineKey // by pkKey(model, key)
	list []checkers.KeyResult
}

// New returns a Porcupine checker with the given budget (0: DefaultTimeout).
func New(timeout time.Duration) *Checker { return &Checker{Timeout: timeout} }

// Name is "porcupine".
func (*Checker) Name() string { return checkers.CheckerPorcupine }

// Budget is the wall-clock time the search may take (analysis.Budgeted).
func (c *Checker) Budget() time.Duration { return c.timeout() }

func (c *Checker) timeout() time.Duration {
	if c.Timeout <= 0 {
		return DefaultTimeout
	}
	return c.Timeout
}

func pkKey(model, key string) string { return model + "\x00" + key }

// Check runs Porcupine on every key and sums up per model.
func (c *Checker) Check(ctx context.Context, ops *history.Ops, sem checkers.Semantics) []checkers.Result {
	h := checkers.Group(ops, sem)
	timeout := c.timeout()
	start := time.Now()
	deadline := start.Add(timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	// Each key's operations are copied out of the grouping when its search
	// starts and let go when it ends (kept only for an invalid key, whose
	// first point of violation is narrowed down next): copied all at once,
	// every key's copies (whole Ops, about 30 bytes per operation of the
	// history) had been alive at once, the check's peak.
	var keys []*porcupineKey
	for _, k := range h.RegisterKeys {
		w, r := h.RegisterLen(k)
		keys = append(keys, &porcupineKey{model: checkers.ModelRegister, key: k, size: w + r, sem: sem, issued: h.Issued, h: h})
	}
	for _, k := range h.IssuerKeys {
		keys = append(keys, &porcupineKey{model: checkers.ModelIssuer, key: k, size: h.IssuerLen(k), sem: sem, h: h})
	}
	runPorcupine(ctx, keys, deadline)
	elapsed := time.Since(start)

	results := map[string]*checkers.Result{
		checkers.ModelRegister: {Checker: checkers.CheckerPorcupine, Model: checkers.ModelRegister, Verdict: checkers.Valid, Complete: true},
		checkers.ModelIssuer:   {Checker: checkers.CheckerPorcupine, Model: checkers.ModelIssuer, Verdict: checkers.Valid, Complete: true},
	}
	unknown := map[string][]string{}
	byKey := map[string]*porcupineKey{}
	var list []checkers.KeyResult
	for _, k := range keys {
		byKey[pkKey(k.model, k.key)] = k
		list = append(list, k.result)
		res := results[k.model]
		res.Keys++
		res.Ops += k.result.Ops
		switch k.result.Verdict {
		case checkers.Invalid:
			res.Verdict = checkers.Invalid
			res.Anomalies = append(res.Anomalies, notLinearizable(k))
		case checkers.Unknown:
			if res.Verdict != checkers.Invalid {
				res.Verdict = checkers.Unknown
			}
			unknown[k.model] = append(unknown[k.model], scopeName(k.model, k.key))
		}
	}
	// The invalid keys' copies of their operations are let go; a
	// visualization copies its key's again from the grouping (ops).
	for _, k := range keys {
		k.writes, k.reads, k.acquires = nil, nil, nil
	}
	sort.Slice(list, func(i, j int) bool {
		if list[i].Model != list[j].Model {
			return list[i].Model < list[j].Model
		}
		return list[i].Key < list[j].Key
	})
	c.mu.Lock()
	c.keys, c.list = byKey, list
	c.mu.Unlock()

	var out []checkers.Result
	for _, m := range []string{checkers.ModelRegister, checkers.ModelIssuer} {
		res := results[m]
		res.Duration = elapsed
		if u := unknown[m]; len(u) > 0 {
			why := fmt.Sprintf("no answer within %s", timeout)
			if ctx.Err() != nil {
				why = "interrupted: " + ctx.Err().Error()
			}
			res.Reason = fmt.Sprintf("%s on %d of %d keys (%s)", why, len(u), res.Keys, abbreviate(u, 5))
		}
		checkers.CapAnomalies(res, checkers.MaxAnomaliesPerKind)
		out = append(out, *res)
	}
	return out
}

// KeyResults are the last Check's per-key verdicts, by model then key.
func (c *Checker) KeyResults() []checkers.KeyResult {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.list
}

func (c *Checker) key(model, key string) *porcupineKey {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.keys[pkKey(model, key)]
}

func scopeName(model, key string) string {
	if model == checkers.ModelIssuer && key == "" {
		return "all locks"
	}
	return key
}

func abbreviate(names []string, n int) string {
	sort.Strings(names)
	if len(names) <= n {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:n], ", "), len(names)-n)
}

// notLinearizable explains an invalid Porcupine key.
func notLinearizable(k *porcupineKey) checkers.Anomaly {
	what := "key " + k.key
	if k.model == checkers.ModelIssuer {
		what = "lock " + k.key
		if k.key == "" {
			what = "the global token scope"
		}
	}
	a := checkers.Anomaly{Kind: checkers.KindNotLinearizable, Model: k.model, Key: k.key}
	if k.result.FirstInvalidAt >= 0 {
		a.At = k.result.FirstInvalidAt
		a.Ops = k.result.Culprits
		a.Text = fmt.Sprintf("porcupine found no linearization of the %d operations on %s; the history was first non-linearizable at %s, when %s completed",
			k.result.Ops, what, checkers.Secs(a.At), opList(a.Ops))
		return a
	}
	// Not narrowed down in time: the history showed it at the latest by
	// its last completion.
	for _, list := range [][]*history.Op{k.writes, k.reads, k.acquires} {
		for _, op := range list {
			if op.Completed != history.Never && op.Completed > a.At {
				a.At = op.Completed
			}
		}
	}
	a.Text = fmt.Sprintf("porcupine found no linearization of the %d operations on %s (the first point of violation was not narrowed down in time; %s is an upper bound)",
		k.result.Ops, what, checkers.Secs(a.At))
	return a
}

func opList(ids []int64) string {
	if len(ids) == 0 {
		return "an operation"
	}
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = fmt.Sprint(id)
	}
	if len(s) == 1 {
		return "op " + s[0]
	}
	return "ops " + strings.Join(s, ", ")
}
