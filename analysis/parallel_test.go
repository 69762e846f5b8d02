package analysis

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/checkers/historytest"
	"github.com/fencecheck/fencecheck/history"
)

// The check on many goroutines (a reader ahead of the pairing, the
// derivations at once) gives the very result of the check on one: same
// verdicts, anomalies, explanations, counts and order, on valid and invalid
// histories, damaged ones included.
func TestParallelCheckIsSequential(t *testing.T) {
	sim := func(cfg historytest.SimConfig, plant bool) []byte {
		h := historytest.Simulate(cfg)
		if plant {
			require.True(t, h.PlantStaleRead())
		}
		var buf bytes.Buffer
		require.NoError(t, h.WriteJSONL(&buf))
		return buf.Bytes()
	}
	contended := historytest.SimConfig{Seed: 1, Ops: 20_000, Keys: 4, ClientsPerKey: 20, InfoRate: 0.05, Acquires: true}
	forgets := historytest.SimConfig{Seed: 5, Ops: 6000, Keys: 3, ClientsPerKey: 4, InfoRate: 0.05,
		Acquires: true, ForgetHighWater: true, FaultEvery: 800}
	zero := historytest.SimConfig{Seed: 7, Ops: 6000, Keys: 2, ClientsPerKey: 5, InfoRate: 0.1, Acquires: true,
		MissingTokenRate: 0.02, MissingAsZero: true, FaultEvery: 500}
	accept := historytest.SimConfig{Seed: 9, Ops: 6000, Keys: 3, ClientsPerKey: 6, InfoRate: 0.05, Acquires: true,
		Semantics: checkers.Semantics{Equal: checkers.EqualAccept, Scope: checkers.ScopeGlobal}}
	small := historytest.SimConfig{Seed: 3, Ops: 1500, Keys: 3, ClientsPerKey: 3, InfoRate: 0.05, Acquires: true}
	damaged := sim(forgets, false)
	lines := bytes.SplitAfter(damaged, []byte("\n"))
	damaged = append(bytes.Join(lines[:700], nil), []byte("not json at all\n")...)
	damaged = append(damaged, bytes.Join(lines[700:len(lines)-2], nil)...)
	damaged = append(damaged, []byte(`{"index":999999,"time":72`)...)

	for _, c := range []struct {
		name    string
		history []byte
		opts    Options
	}{
		{"contended valid", sim(contended, false), Options{Checker: CheckerFast}},
		{"contended stale read", sim(contended, true), Options{Checker: CheckerFast}},
		{"forgotten high-water", sim(forgets, false), Options{Checker: CheckerFast}},
		{"missing token as zero", sim(zero, false), Options{Checker: CheckerFast}},
		{"equal accept, global scope", sim(accept, true), Options{Checker: CheckerFast,
			Semantics: checkers.Semantics{Equal: checkers.EqualAccept, Scope: checkers.ScopeGlobal}}},
		{"both checkers, stale read", sim(small, true), Options{Checker: CheckerBoth}},
		{"damaged, lenient", damaged, Options{Checker: CheckerFast, Lenient: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "history.jsonl")
			require.NoError(t, os.WriteFile(path, c.history, 0o644))
			check := func(workers int) *Result {
				opts := c.opts
				opts.Workers = workers
				res, err := CheckFile(context.Background(), path, opts)
				require.NoError(t, err)
				return res
			}
			want := check(1)
			for _, workers := range []int{2, 5} {
				got := check(workers)
				assert.Equal(t, want.Ops.All(), got.Ops.All())
				assert.Equal(t, comparable(want), comparable(got), "%d workers", workers)
			}
			if c.name != "contended valid" {
				assert.NotEqual(t, checkers.Valid, want.Verdict, "the history should not be valid: %s", want.Reason)
			}
		})
	}
}

// A malformed line stops either check at the same line.
func TestParallelCheckStopsAtTheSameLine(t *testing.T) {
	h := historytest.Simulate(historytest.SimConfig{Seed: 2, Ops: 4000, Keys: 2, ClientsPerKey: 5, Acquires: true})
	var buf bytes.Buffer
	require.NoError(t, h.WriteJSONL(&buf))
	lines := bytes.SplitAfter(buf.Bytes(), []byte("\n"))
	bad := append(bytes.Join(lines[:3000], nil), []byte("{\"index\":\n")...)
	bad = append(bad, bytes.Join(lines[3000:], nil)...)
	path := filepath.Join(t.TempDir(), "history.jsonl")
	require.NoError(t, os.WriteFile(path, bad, 0o644))
	for _, workers := range []int{1, 2} {
		_, err := CheckFile(context.Background(), path, Options{Checker: CheckerFast, Workers: workers})
		var pe *history.ParseError
		require.True(t, errors.As(err, &pe), "%v", err)
		assert.Equal(t, 3001, pe.Line)
	}
}

// comparable is r without what differs from run to run (how long things
// took) and without the operations (compared on their own).
func comparable(r *Result) Result {
	c := *r
	c.Elapsed, c.Ops, c.checkers = 0, nil, nil
	c.Checks = append([]checkers.Result(nil), r.Checks...)
	for i := range c.Checks {
		c.Checks[i].Duration = 0
	}
	c.Keys = append([]checkers.KeyResult(nil), r.Keys...)
	for i := range c.Keys {
		c.Keys[i].Elapsed = 0
	}
	return c
}
