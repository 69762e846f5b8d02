package main

import (
	"encoding/json"
	"maps"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The situations a run counted come from results.json's coverage, the ones
// that did not apply to its target left out.
func TestSituationsFromResults(t *testing.T) {
	var r results
	require.NoError(t, json.Unmarshal([]byte(`{"verdict":"valid","coverage":{"main_phase_ns":30000000000,"classes":[
		{"class":"counter-reset","situations":[{"id":"issuer-restart-regrant","count":4},{"id":"issuer-power-cut-on-ack","count":0}]},
		{"class":"split-brain","situations":[{"id":"issuer-replicas-separated","count":0,"not_applicable":"one node keeps its state"}]}]}}`), &r))
	got, phase := r.situations()
	assert.Equal(t, map[string]int{"issuer-restart-regrant": 4, "issuer-power-cut-on-ack": 0}, got)
	assert.Equal(t, 30*time.Second, phase)
}

// situationMatrix is a results file of the redis situations row whose runs
// counted the given restarts and clock steps back over 30 s each.
func situationMatrix(t *testing.T, mode string, restarts, clocks []int) string {
	t.Helper()
	rows, err := selectRows([]string{"situations-redis"})
	require.NoError(t, err)
	cfg := Config{Seeds: len(restarts), FirstSeed: 1, Time: 30 * time.Second, Parallel: 1, Nemesis: "all", NemesisMode: mode}
	m := &Matrix{Config: cfg, Rows: rows, Outcomes: map[string][]Outcome{}, CPUs: 2, Shard: whole,
		Started: time.Date(2026, 12, 6, 5, 0, 0, 0, time.UTC), Elapsed: time.Minute}
	for i := range restarts {
		m.Outcomes["situations-redis"] = append(m.Outcomes["situations-redis"], Outcome{Row: "situations-redis", Seed: uint64(i + 1),
			Verdict: "valid", FirstInvalid: -1, MainPhase: 30 * time.Second,
			Situations: map[string]int{"issuer-restart-regrant": restarts[i], "issuer-clock-back-regrant": clocks[i], "key-idle-20s-stale": 0}})
	}
	p := filepath.Join(t.TempDir(), mode+".json")
	require.NoError(t, writeResults(p, m.Results(testBuild)))
	return p
}

// Each target's situations per minute and the fewest one run created, guided
// beside random, and the ones some run left under the bar's 3 (the 20 s
// idle scale aside: a 30 s run cannot hold three).
func TestCompareSituationsPerMinute(t *testing.T) {
	g, r, err := Compare(situationMatrix(t, "guided", []int{3, 5, 4}, []int{3, 2, 4}), situationMatrix(t, "random", []int{1, 0, 2}, []int{6, 6, 6}))
	require.NoError(t, err)
	md, passed := CompareMarkdown(g, r, "")
	assert.True(t, passed, md)
	assert.NotContains(t, md, "| bug or target |", "no bug rows: no bug table")
	assert.Contains(t, md, "| `--target redis`: Redis, appendfsync always | 0/3 | 0/3 |")
	assert.Contains(t, md, "### `--target redis`: Redis, appendfsync always")
	// 12 restarts over 1.5 minutes guided (8.0 a minute), 3 random (2.0).
	assert.Contains(t, md, "| `issuer-restart-regrant` | 8.0 | 2.0 | 3 | **0** |")
	assert.Contains(t, md, "| `issuer-clock-back-regrant` | 6.0 | 12.0 | **2** | 6 |")
	assert.Contains(t, md, "| `key-idle-20s-stale` | 0.0 | 0.0 | 0 | 0 |")
	assert.Contains(t, md, "Under 3 in some run (the 20 s scale aside): guided `issuer-clock-back-regrant`; random `issuer-restart-regrant`.")
	assert.Contains(t, md, "**Result: every configuration stayed valid in both modes.**")
}

// A matrix of bug rows alone has no situations section.
func TestCompareWithoutSituationRows(t *testing.T) {
	s := time.Second
	g, r, err := Compare(modeMatrix(t, "guided", []time.Duration{2 * s}), modeMatrix(t, "random", []time.Duration{8 * s}))
	require.NoError(t, err)
	md, _ := CompareMarkdown(g, r, "")
	assert.NotContains(t, md, "## Situations per minute")
}

// A broken system's runs are there to find its bug: their situations are
// not tabled, a correct configuration's are.
func TestSituationsOfCorrectRowsOnly(t *testing.T) {
	sits := map[string]int{"issuer-restart-regrant": 4}
	md := compareSituations(t, map[string]Outcome{
		"python-counter-in-memory": {Exit: 1, Verdict: "invalid", FirstInvalid: 2 * time.Second, Situations: sits},
		"python-fence":             {Verdict: "valid", FirstInvalid: -1, Situations: sits},
	})
	assert.Contains(t, md, "### `python-fence`: correct")
	assert.NotContains(t, md, "### `python-counter-in-memory`")
}

// The correct reference's rows are named by the row (no bug, no target to
// name them by).
func TestSituationsOfTheReferenceNameTheRow(t *testing.T) {
	md := compareSituations(t, map[string]Outcome{
		"reference": {Verdict: "valid", FirstInvalid: -1, Situations: map[string]int{"issuer-restart-regrant": 4}},
	})
	assert.Contains(t, md, "### `reference`: correct")
	assert.NotContains(t, md, "### ``")
}

// compareSituations writes a guided and a random results file of one
// seed, each row's outcome as given (its row, seed and a 30 s main phase
// filled in), and returns their side-by-side page.
func compareSituations(t *testing.T, outcomes map[string]Outcome) string {
	t.Helper()
	names := slices.Sorted(maps.Keys(outcomes))
	file := func(mode string) string {
		rows, err := selectRows(names)
		require.NoError(t, err)
		cfg := Config{Seeds: 1, FirstSeed: 1, Time: 30 * time.Second, Parallel: 1, Nemesis: "all", NemesisMode: mode}
		m := &Matrix{Config: cfg, Rows: rows, Outcomes: map[string][]Outcome{}, CPUs: 2, Shard: whole, Elapsed: time.Minute}
		for name, o := range outcomes {
			o.Row, o.Seed, o.MainPhase = name, 1, 30*time.Second
			m.Outcomes[name] = []Outcome{o}
		}
		p := filepath.Join(t.TempDir(), mode+".json")
		require.NoError(t, writeResults(p, m.Results(testBuild)))
		return p
	}
	g, r, err := Compare(file("guided"), file("random"))
	require.NoError(t, err)
	md, _ := CompareMarkdown(g, r, "")
	return md
}
