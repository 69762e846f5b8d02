package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// modeMatrix is a synthetic matrix of two rows, a bug and the correct
// reference, whose bug runs first violate at the given times (-1: missed).
func modeMatrix(t *testing.T, mode string, firsts []time.Duration) string {
	t.Helper()
	return rowMatrix(t, mode, "counter-in-memory", firsts, nil)
}

// rowMatrix is modeMatrix for the bug row named, whose runs' first faults
// began at faults (nil: at 0).
func rowMatrix(t *testing.T, mode, bug string, firsts, faults []time.Duration) string {
	t.Helper()
	rows, err := selectRows([]string{bug, "reference"})
	require.NoError(t, err)
	cfg := Config{Seeds: len(firsts), FirstSeed: 1, Time: 30 * time.Second, Parallel: 2, Nemesis: "all", NemesisMode: mode,
		Command: "make matrix MODE=" + mode}
	m := &Matrix{Config: cfg, Rows: rows, Outcomes: map[string][]Outcome{}, CPUs: 2, Shard: whole,
		Started: time.Date(2026, 12, 6, 5, 0, 0, 0, time.UTC), Elapsed: time.Minute}
	for i, d := range firsts {
		seed := uint64(i + 1)
		o := Outcome{Row: bug, Seed: seed, Exit: 0, Verdict: "valid", FirstInvalid: -1}
		if d >= 0 {
			o.Exit, o.Verdict, o.FirstInvalid = 1, "invalid", d
		}
		if faults != nil {
			o.FirstFault = faults[i]
		}
		m.Outcomes[bug] = append(m.Outcomes[bug], o)
		m.Outcomes["reference"] = append(m.Outcomes["reference"], Outcome{Row: "reference", Seed: seed, Exit: 0, Verdict: "valid", FirstInvalid: -1})
	}
	p := filepath.Join(t.TempDir(), mode+".json")
	require.NoError(t, writeResults(p, m.Results(testBuild)))
	return p
}

func TestCompareSideBySide(t *testing.T) {
	s := time.Second
	fast := modeMatrix(t, "guided", []time.Duration{2 * s, 3 * s, 4 * s})
	slow := modeMatrix(t, "random", []time.Duration{8 * s, 10 * s, -1})
	g, r, err := Compare(fast, slow)
	require.NoError(t, err)
	md, passed := CompareMarkdown(g, r, "go run ./cmd/matrix --compare g.json r.json")
	assert.True(t, passed, md)
	// Random's miss counts as the run's 30 s: the median of 8, 10 and 30.
	assert.Contains(t, md, "| `counter-in-memory` | 3/3 | 2/3 | 3.0 s | 10.0 s (9.0 s over the 2 detected) | 0.30 |")
	assert.Contains(t, md, "| correct | 0/3 | 0/3 |")
	assert.Contains(t, md, "**Result: meets the bar**")

	// Guided slower, or missing what random found: the bar fails, marked.
	later := modeMatrix(t, "guided", []time.Duration{6 * s, 6 * s, -1})
	g, r, err = Compare(later, modeMatrix(t, "random", []time.Duration{8 * s, 10 * s, 9 * s}))
	require.NoError(t, err)
	md, passed = CompareMarkdown(g, r, "")
	assert.False(t, passed)
	assert.Contains(t, md, "| `counter-in-memory` | 2/3 ⚠ | 3/3 | 6.0 s (6.0 s over the 2 detected) | 9.0 s | 0.67 ⚠ |")
	assert.Contains(t, md, "**Result: does not meet the bar**")
}

// compareRow compares one bug row's guided and random first violations
// (faults: each run's first fault, nil for at 0).
func compareRow(t *testing.T, bug string, guided, random, faults []time.Duration) (string, bool) {
	t.Helper()
	g, r, err := Compare(rowMatrix(t, "guided", bug, guided, faults), rowMatrix(t, "random", bug, random, faults))
	require.NoError(t, err)
	return CompareMarkdown(g, r, "")
}

// A bug the workload shows before any fault, in every run of both modes,
// has no fault to guide: its ratio is noise and not held to the bar. Once
// one run found it only after a fault, the bar holds again.
func TestCompareSetsAsideWhatNoFaultTookPartIn(t *testing.T) {
	ms := time.Millisecond
	at := []time.Duration{1000 * ms, 1000 * ms, -1}
	random := []time.Duration{100 * ms, 100 * ms, 90 * ms}
	md, passed := compareRow(t, "accept-equal", []time.Duration{110 * ms, 120 * ms, 100 * ms}, random, at)
	assert.True(t, passed, md)
	assert.Contains(t, md, "found before the first fault in every run (1.10: no fault to guide)")
	md, passed = compareRow(t, "accept-equal", []time.Duration{110 * ms, 1200 * ms, 100 * ms}, random, at)
	assert.False(t, passed, md)
	assert.Contains(t, md, "1.10 ⚠")
}

// Where half of random's median is sooner than the bug can show (a key
// must sit idle first), guided is held to not being slower than random.
func TestCompareHoldsAFloorBugToRandomsPace(t *testing.T) {
	s := time.Second
	random := []time.Duration{5 * s, 5 * s, 6 * s}
	md, passed := compareRow(t, "forget-idle", []time.Duration{4 * s, 5 * s, 5 * s}, random, nil)
	assert.True(t, passed, md)
	assert.Contains(t, md, "1.00 (the bug cannot show before 3.0 s")
	md, passed = compareRow(t, "forget-idle", []time.Duration{6 * s, 6 * s, 7 * s}, random, nil)
	assert.False(t, passed, md)
	assert.Contains(t, md, "1.20 (the bug cannot show before 3.0 s, more than half of random's median: the bar is ≤ 1) ⚠")
}

func TestCompareRefusesUnlikeMatrices(t *testing.T) {
	s := time.Second
	g := modeMatrix(t, "guided", []time.Duration{2 * s, 3 * s})
	r := modeMatrix(t, "random", []time.Duration{2 * s, 3 * s})
	_, _, err := Compare(r, g)
	assert.ErrorContains(t, err, "not guided (the first file is the guided matrix)")
	_, _, err = Compare(g, modeMatrix(t, "random", []time.Duration{2 * s, 3 * s, 4 * s}))
	assert.ErrorContains(t, err, "ran different matrices")
	_, _, err = Compare(g, filepath.Join(t.TempDir(), "absent.json"))
	assert.ErrorContains(t, err, "no such file")

	// The flag's own refusals are usage errors.
	for _, args := range [][]string{{"--compare", g}, {"--compare", g, r, r}, {"--compare", "--merge", g, r}, {"--nemesis-mode", "smart"}} {
		_, err := parseFlags(args, &strings.Builder{})
		assert.Error(t, err, "%v", args)
	}
	o, err := parseFlags([]string{"--compare", g, r}, &strings.Builder{})
	require.NoError(t, err)
	assert.Equal(t, "docs/guided-vs-random.md", o.cfg.Out)
	o, err = parseFlags([]string{"--nemesis-mode", "random", "--rows", "reference"}, &strings.Builder{})
	require.NoError(t, err)
	assert.Contains(t, o.cfg.Args(Row{Name: "reference"}, 1, "s"), "--nemesis-mode=random", "each run gets the mode")
}

// A run that found nothing counts as the run's length, a lower bound on its
// time: random finding a bug in 2 runs of 5 has a median of at least the
// run's length, and guided's ratio to it is an upper bound. Counting only
// the detected runs would give random the 2 fast ones (median 5 s) and fail
// a guided mode that found it in every run.
func TestCompareCountsAMissAsTheRunsLength(t *testing.T) {
	s := time.Second
	md, passed := compareRow(t, "counter-in-memory", []time.Duration{8 * s, 9 * s, 10 * s, 12 * s, 14 * s}, []time.Duration{4 * s, 6 * s, -1, -1, -1}, nil)
	assert.True(t, passed, md)
	assert.Contains(t, md, "| 5/5 | 2/5 | 10.0 s | ≥ 30.0 s (5.0 s over the 2 detected) | ≤ 0.33 |")

	// Guided itself missing more than half: no ratio can be claimed.
	md, passed = compareRow(t, "counter-in-memory", []time.Duration{8 * s, -1, -1}, []time.Duration{-1, -1, -1}, nil)
	assert.True(t, passed, "random never found it, guided did: %s", md)
	md, passed = compareRow(t, "counter-in-memory", []time.Duration{8 * s, -1, -1}, []time.Duration{4 * s, -1, -1}, nil)
	assert.False(t, passed, md)
	assert.Contains(t, md, "guided found nothing in half its runs or more ⚠")

	all, censored := censoredMedian([]time.Duration{s, 2 * s}, 2, 30*s)
	assert.Equal(t, 16*s, all, "the middle two are 2 s and a miss")
	assert.True(t, censored)
	all, censored = censoredMedian([]time.Duration{s, 2 * s, 3 * s}, 1, 30*s)
	assert.Equal(t, 2500*time.Millisecond, all)
	assert.False(t, censored)
}
