package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMedian(t *testing.T) {
	assert.Equal(t, time.Duration(-1), median(nil))
	assert.Equal(t, 2*time.Second, median([]time.Duration{3 * time.Second, time.Second, 2 * time.Second}))
	assert.Equal(t, 1500*time.Millisecond, median([]time.Duration{time.Second, 2 * time.Second}))
}

func TestArgsCarryTheRowsFlags(t *testing.T) {
	c := Config{Nemesis: "all", Time: 30 * time.Second}
	row, err := selectRows([]string{"accept-forged"})
	require.NoError(t, err)
	args := c.Args(row[0], 7, "/s")
	assert.Contains(t, args, "--bug=accept-forged")
	assert.Contains(t, args, "--forge")
	assert.Contains(t, args, "--seed=7")
	assert.Contains(t, args, "--nemesis=all")
	assert.Contains(t, args, "--time=30s")
	_, err = selectRows([]string{"nope"})
	assert.Error(t, err)
}

func TestMarkdownAndBar(t *testing.T) {
	rows, _ := selectRows([]string{"accept-equal", "reference"})
	m := &Matrix{Config: Config{Seeds: 2, FirstSeed: 1, Time: time.Second, Parallel: 2, Nemesis: "all", Command: "make matrix"},
		Rows: rows, Outcomes: map[string][]Outcome{
			"accept-equal": {
				{Row: "accept-equal", Seed: 1, Exit: 1, Verdict: "invalid", FirstInvalid: 2 * time.Second, Kinds: map[string]int{"replay-accepted": 3}, AfterFault: "pause"},
				{Row: "accept-equal", Seed: 2, Exit: 1, Verdict: "invalid", FirstInvalid: 4 * time.Second, Kinds: map[string]int{"replay-accepted": 1}},
			},
			"reference": {{Row: "reference", Seed: 1, Exit: 0, Verdict: "valid", FirstInvalid: -1}, {Row: "reference", Seed: 2, Exit: 0, Verdict: "valid", FirstInvalid: -1}},
		}}
	assert.True(t, m.Passed())
	md := m.Markdown()
	assert.Contains(t, md, "make matrix")
	assert.Contains(t, md, "| `accept-equal` |")
	assert.Contains(t, md, "2/2")
	assert.Contains(t, md, "3.0 s", "median of 2 s and 4 s")
	assert.Contains(t, md, "replay-accepted (2)")
	assert.Contains(t, md, "meets the bar")

	m.Outcomes["reference"][1] = Outcome{Row: "reference", Seed: 2, Exit: 1, Verdict: "invalid"}
	assert.False(t, m.Passed(), "one false alarm fails the bar")
	assert.Contains(t, m.Markdown(), "reference, seed 2: exit 1")
}

func TestReadResults(t *testing.T) {
	dir := t.TempDir()
	run := filepath.Join(dir, "memory", "20260101T000000.000Z")
	require.NoError(t, os.MkdirAll(run, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(run, "results.json"),
		[]byte(`{"verdict":"invalid","first_invalid_at_ns":1500000000,"anomaly_kinds":{"stale-write-accepted":2},"after_fault":{"nemesis":"restart"}}`), 0o644))
	r, err := readResults(dir)
	require.NoError(t, err)
	assert.Equal(t, "invalid", r.Verdict)
	assert.EqualValues(t, 1500000000, *r.FirstInvalidAt)
	assert.Equal(t, "restart", r.afterFault())

	// A first violation explained by idle time names no fault.
	require.NoError(t, os.WriteFile(filepath.Join(run, "results.json"),
		[]byte(`{"verdict":"invalid","first_invalid_at_ns":1500000000,"after_fault":{"fault":-1,"nemesis":"","idle_ns":3000000000}}`), 0o644))
	r, err = readResults(dir)
	require.NoError(t, err)
	assert.Equal(t, idleCause, r.afterFault())
}

// A target row runs its own target under its own nemesis, is expected
// invalid when Broken, and its durable twin counts as a correct row.
func TestTargetRows(t *testing.T) {
	c := Config{Nemesis: "all", Time: 30 * time.Second}
	rows, err := selectRows([]string{"postgres-async", "postgres"})
	require.NoError(t, err)
	args := c.Args(rows[0], 3, "/s")
	assert.Contains(t, args, "--target=postgres-async")
	assert.Contains(t, args, "--nemesis=restart")
	assert.NotContains(t, args, "--nemesis=all")
	assert.True(t, rows[0].expectInvalid())
	assert.False(t, rows[1].expectInvalid())

	m := &Matrix{Config: Config{Seeds: 1, FirstSeed: 1, Time: time.Second, Parallel: 1, Nemesis: "all", Command: "make matrix"},
		Rows: rows, Outcomes: map[string][]Outcome{
			"postgres-async": {{Row: "postgres-async", Seed: 1, Exit: 1, Verdict: "invalid", FirstInvalid: time.Second, Kinds: map[string]int{"duplicate-token": 2}, AfterFault: "restart"}},
			"postgres":       {{Row: "postgres", Seed: 1, Exit: 0, Verdict: "valid", FirstInvalid: -1}},
		}}
	assert.True(t, m.Passed())
	md := m.Markdown()
	assert.Contains(t, md, "| `--target postgres-async` (`--nemesis restart`) |")
	assert.Contains(t, md, "| `--target postgres` (`--nemesis restart`): PostgreSQL, synchronous_commit = on | 1/1 |")

	m.Outcomes["postgres-async"][0] = Outcome{Row: "postgres-async", Seed: 1, Exit: 0, Verdict: "valid", FirstInvalid: -1}
	assert.False(t, m.Passed(), "a broken target found valid misses")
	assert.Contains(t, m.Markdown(), "postgres-async, seed 1: exit 0")
}

// The matrix and --shrink each rewrite their own part of detection.md.
func TestSpliceKeepsTheOtherPart(t *testing.T) {
	matrix := "# Detection matrix\n\ntable\n"
	doc := splice(matrix, shrinkHeading+"\n\nshrink table v1\n")
	assert.Equal(t, "# Detection matrix\n\ntable\n\n"+shrinkHeading+"\n\nshrink table v1\n", doc)
	doc = splice(doc, shrinkHeading+"\n\nv2\n")
	assert.Contains(t, doc, "v2")
	assert.NotContains(t, doc, "v1")
	assert.Contains(t, doc, "table")
	assert.Equal(t, matrix, splice(doc, ""), "the matrix part alone")
}

func TestShrinkBar(t *testing.T) {
	rows, err := selectRows([]string{"counter-in-memory", "accept-equal"})
	require.NoError(t, err)
	ok := ShrinkOutcome{Row: rows[0], Exit: 1, Took: 2 * time.Minute, FaultsBefore: 40, KindsBefore: "restart ×10, pause ×9",
		PhaseBefore: 30 * time.Second, FaultsLeft: 1, KindsLeft: "restart", PhaseLeft: 4 * time.Second, Failed: 3, Tries: 3,
		Summary: "fails with just: restart of reference at 2.55 s for 0.27 s (3 of 3 tries)"}
	assert.True(t, ok.MeetsBar())
	for name, o := range map[string]ShrinkOutcome{
		"too slow":   func() ShrinkOutcome { o := ok; o.Took = 6 * time.Minute; return o }(),
		"wrong kind": func() ShrinkOutcome { o := ok; o.KindsLeft = "pause"; return o }(),
		"extra kind": func() ShrinkOutcome { o := ok; o.FaultsLeft, o.KindsLeft = 2, "restart, pause"; return o }(),
		"flaky":      func() ShrinkOutcome { o := ok; o.Failed = 1; return o }(),
		"no repro":   func() ShrinkOutcome { o := ok; o.Exit = 2; return o }(),
	} {
		assert.False(t, o.MeetsBar(), name)
	}
	two := ok
	two.FaultsLeft, two.KindsLeft = 2, "restart ×2"
	assert.True(t, two.MeetsBar(), "two restarts are restarts")
	none := ShrinkOutcome{Row: rows[1], Exit: 1, Took: time.Minute, FaultsLeft: 0, Failed: 3, Tries: 3}
	assert.True(t, none.MeetsBar())
	rows, err = shrinkRows(nil)
	require.NoError(t, err)
	for _, r := range rows {
		assert.NotEmpty(t, r.Bug, "by default only the reference's bugs: %s", r.Name)
	}
	_, err = shrinkRows([]string{"reference"})
	assert.ErrorContains(t, err, "expected valid")
	rows, err = shrinkRows([]string{"postgres-async"})
	require.NoError(t, err)
	assert.Equal(t, []string{"restart"}, rows[0].Needs)

	extra := none
	extra.FaultsLeft, extra.KindsLeft = 1, "pause"
	assert.False(t, extra.MeetsBar(), "a bug that needs no fault keeps none")

	md := shrinkMarkdown(Config{FirstSeed: 1, Seeds: 1, Nemesis: "all", Time: 30 * time.Second, Budget: 10 * time.Minute}, []ShrinkOutcome{ok, none}, 3*time.Minute, time.Now(), false)
	assert.True(t, strings.HasPrefix(md, shrinkHeading))
	assert.Contains(t, md, "| `counter-in-memory` | 0 | 40 (restart ×10, pause ×9) over 30.0 s | 1 over 4.0 s | restart | restart | 2m0s |")
	assert.Contains(t, md, "noisy")
	assert.Contains(t, md, "2 of 2 shrinks meet the bar")
}
