package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseShard(t *testing.T) {
	for v, want := range map[string]Shard{"1/1": {1, 1}, "2/4": {2, 4}, "4/4": {4, 4}, "10/12": {10, 12}} {
		s, err := parseShard(v)
		require.NoError(t, err, v)
		assert.Equal(t, want, s, v)
	}
	for _, v := range []string{"", "2", "0/4", "5/4", "1/0", "-1/3", "a/b", "1/2/3", "2/-4", " 1/2"} {
		_, err := parseShard(v)
		assert.Error(t, err, v)
	}
}

// A bad --shard, or --shard beside flags it does not go with, is a usage
// error that says what is wrong (main exits 64 on any of them).
func TestShardAndMergeFlags(t *testing.T) {
	bad := map[string][]string{
		"want 1 <= I <= N":                   {"--shard", "5/4"},
		"want I/N":                           {"--shard", "three"},
		"not the table":                      {"--shard", "1/2", "--out", "docs/detection.md"},
		"no --shard or --results":            {"--shrink", "--shard", "1/2"},
		"name the results files":             {"--merge"},
		"not --shard":                        {"--merge", "--shard", "1/2", "a.json"},
		"--seeds does not apply":             {"--merge", "--seeds", "3", "a.json"},
		"results files go with --merge":      {"a.json"},
		"--seeds and --parallel must be at ": {"--seeds", "0"},
	}
	for want, args := range bad {
		_, err := parseFlags(args, io.Discard)
		require.Error(t, err, args)
		assert.ErrorContains(t, err, want, args)
	}
	_, err := parseFlags([]string{"--no-such-flag"}, io.Discard)
	assert.Equal(t, errUsage, err)

	o, err := parseFlags([]string{"--shard", "2/4", "--seeds", "3"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, Shard{2, 4}, o.cfg.Shard)
	assert.Equal(t, "matrix-shard-2-of-4.json", o.results, "a shard's default results file")
	o, err = parseFlags([]string{"--shard", "1/2", "--results", "out/s1.json"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, "out/s1.json", o.results)
	o, err = parseFlags([]string{"--results", "all.json"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, Shard{}, o.cfg.Shard, "unsharded, with a results file")
	assert.Equal(t, "all.json", o.results)
	o, err = parseFlags([]string{"--merge", "a.json", "b.json", "--out", "-", "c.json"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, []string{"a.json", "b.json", "c.json"}, o.files, "flags may follow the files")
	assert.Equal(t, "-", o.cfg.Out)
}

// The N shards of a matrix run every run exactly once between them, each
// about 1/N of the runs, the same split every time; with at least N seeds
// each row runs about as often on every shard.
func TestShardsRunEveryRunOnce(t *testing.T) {
	nrows := len(Rows)
	for _, c := range []struct{ rows, seeds, n int }{{nrows, 20, 4}, {nrows, 20, 3}, {nrows, 1, 4}, {2, 1, 5}, {nrows, 20, 1}, {3, 7, 7}, {nrows, 20, nrows * 20}} {
		rows := Rows[:c.rows]
		all := matrixRuns(rows, c.seeds, 1)
		require.Len(t, all, c.rows*c.seeds)
		seen := map[string]int{}
		var sizes []int
		for i := 1; i <= c.n; i++ {
			part := Shard{i, c.n}.share(all)
			assert.Equal(t, part, Shard{i, c.n}.share(matrixRuns(rows, c.seeds, 1)), "deterministic")
			sizes = append(sizes, len(part))
			perRow := map[string]int{}
			for _, r := range part {
				seen[runName(r.row.Name, r.seed)]++
				perRow[r.row.Name]++
			}
			if c.seeds >= c.n {
				for _, r := range rows {
					assert.InDelta(t, float64(c.seeds)/float64(c.n), perRow[r.Name], 1, "%+v shard %d row %s", c, i, r.Name)
				}
			}
		}
		assert.Len(t, seen, len(all), "%+v", c)
		for name, k := range seen {
			assert.Equal(t, 1, k, "%+v: %s", c, name)
		}
		lo, hi := sizes[0], sizes[0]
		for _, s := range sizes {
			lo, hi = min(lo, s), max(hi, s)
		}
		assert.LessOrEqual(t, hi-lo, 1, "%+v: sizes %v", c, sizes)
	}
}

// syntheticMatrix is a whole matrix of made-up outcomes: every row over
// seeds 1..seeds, detections, misses, false alarms, unknowns, runs that
// could not run, anomaly kinds and faults varying by row and seed.
func syntheticMatrix(t *testing.T, seeds int) *Matrix {
	t.Helper()
	rows, err := selectRows(nil)
	require.NoError(t, err)
	cfg := Config{Seeds: seeds, FirstSeed: 11, Time: 5 * time.Second, Parallel: 2, Nemesis: "all", Command: "make matrix SEEDS=6"}
	m := &Matrix{Config: cfg, Rows: rows, Outcomes: map[string][]Outcome{}, CPUs: 2, Shard: whole,
		Started: time.Date(2026, 12, 4, 2, 0, 0, 0, time.UTC), Elapsed: 13*time.Minute + 7*time.Second}
	faults := []string{"pause", "restart", "clock", "partition", ""}
	kinds := []string{"duplicate-token", "not-linearizable", "token-regression", "replay-accepted", "stale-write-accepted"}
	for ri, r := range rows {
		for i := range seeds {
			seed := cfg.FirstSeed + uint64(i)
			o := Outcome{Row: r.Name, Seed: seed, Exit: 0, Verdict: "valid", FirstInvalid: -1, Wall: time.Duration(5+ri+i) * time.Second,
				Dir: fmt.Sprintf("/tmp/store/%s/%d", r.Name, seed)}
			k := (ri*7 + i*3) % 11
			switch {
			case r.expectInvalid() && k != 4:
				o.Exit, o.Verdict = 1, "invalid"
				o.FirstInvalid = time.Duration(100+ri*37+i*251) * time.Millisecond
				o.Kinds = map[string]int{kinds[k%5]: 1 + k, kinds[(k+ri)%5]: 2}
				o.AfterFault = faults[(ri+i)%5]
			case !r.expectInvalid() && k == 5:
				o.Exit, o.Verdict, o.FirstInvalid, o.Kinds = 1, "invalid", 2*time.Second, map[string]int{"token-regression": 1}
			case k == 7:
				o.Exit, o.Verdict = 2, "unknown"
			case k == 9:
				o.Exit, o.Verdict, o.Err = 3, "", "results.json: found 0 results.json files"
			}
			m.Outcomes[r.Name] = append(m.Outcomes[r.Name], o)
		}
	}
	return m
}

// shardOf is what `--shard s` of the same runs would have recorded.
func shardOf(m *Matrix, s Shard, started time.Time) *Matrix {
	cfg := m.Config
	cfg.Shard = s
	cfg.Command = fmt.Sprintf("go run ./cmd/matrix --shard %s --seeds %d --time %s", s, cfg.Seeds, cfg.Time)
	sm := &Matrix{Config: cfg, Rows: m.Rows, Outcomes: map[string][]Outcome{}, CPUs: 4, Shard: s, Started: started, Elapsed: time.Duration(s.I) * time.Minute}
	for _, r := range s.share(matrixRuns(m.Rows, cfg.Seeds, cfg.FirstSeed)) {
		for _, o := range m.Outcomes[r.row.Name] {
			if o.Seed == r.seed {
				sm.Outcomes[r.row.Name] = append(sm.Outcomes[r.row.Name], o)
			}
		}
	}
	return sm
}

var testBuild = Build{Go: "go1.26.8", Revision: "8066050d8912798a2a47a95ad6fe5a5fa14f54eb"}

// writeShards writes the results files of m split into n shards, in
// reverse order (a merge takes them in any order), and returns their paths.
func writeShards(t *testing.T, m *Matrix, n int) []string {
	t.Helper()
	dir := t.TempDir()
	var paths []string
	for i := n; i >= 1; i-- {
		sm := shardOf(m, Shard{i, n}, m.Started.Add(time.Duration(i)*time.Second))
		p := filepath.Join(dir, fmt.Sprintf("shard-%d.json", i))
		require.NoError(t, writeResults(p, sm.Results(testBuild)))
		paths = append(paths, p)
	}
	return paths
}

// tables is the table part of a detection.md: everything after the header.
func tables(md string) string {
	i := strings.Index(md, "## Seeded bugs")
	if i < 0 {
		return "no tables in:\n" + md
	}
	return md[i:]
}

// The table of a set of results is the same, byte for byte, whether one
// run made them or they were split into shards and merged; the header
// then names the shards' commands and machines. An unsharded run's own
// results file merges back into its whole file.
func TestShardedTableIsTheWholeTable(t *testing.T) {
	m := syntheticMatrix(t, 6)
	whole := m.Markdown()
	assert.Contains(t, whole, "⚠", "the made-up results miss in places")
	assert.Contains(t, whole, "could not run")
	assert.Contains(t, whole, "## Runs that missed\n\n- ")

	// The unsharded path's --results file is the same format.
	dir := t.TempDir()
	one := filepath.Join(dir, "all.json")
	require.NoError(t, writeResults(one, m.Results(testBuild)))
	back, err := Merge([]string{one})
	require.NoError(t, err)
	assert.Equal(t, whole, back.Markdown(), "an unsharded run's results file writes its whole detection.md again")

	for _, n := range []int{2, 3, 4, 7, len(Rows)*6 + 5} {
		merged, err := Merge(writeShards(t, m, n))
		require.NoError(t, err, "n=%d", n)
		merged.Config.Command = "go run ./cmd/matrix --merge shard-*.json"
		md := merged.Markdown()
		assert.Equal(t, tables(whole), tables(md), "n=%d: the tables of the merged shards are the whole matrix's", n)
		assert.Equal(t, m.Passed(), merged.Passed())
		assert.Contains(t, md, fmt.Sprintf("split into %d shards (`--shard I/%d`", n, n))
		assert.Contains(t, md, fmt.Sprintf("    go run ./cmd/matrix --shard %d/%d --seeds 6 --time 5s\n", n, n))
		assert.Contains(t, md, "    go run ./cmd/matrix --merge shard-*.json\n\n")
		assert.Contains(t, md, "(the first began 2026-12-04 02:00 UTC)")
	}
	merged, err := Merge(writeShards(t, m, 4))
	require.NoError(t, err)
	n := len(Rows) * 6
	assert.Contains(t, merged.Markdown(), fmt.Sprintf("shard 1/4 ran %d runs, 2 at a time on a machine with 4 CPUs, in 1m0s; shard 2/4 ran %d runs", n/4, n/2-n/4))

	// A matrix that meets the bar meets it merged.
	for _, outs := range m.Outcomes {
		for i, o := range outs {
			r, _ := selectRows([]string{o.Row})
			if r[0].expectInvalid() {
				outs[i].Exit, outs[i].Verdict, outs[i].FirstInvalid = 1, "invalid", time.Second
			} else {
				outs[i] = Outcome{Row: o.Row, Seed: o.Seed, Exit: 0, Verdict: "valid", FirstInvalid: -1}
			}
		}
	}
	require.True(t, m.Passed())
	merged, err = Merge(writeShards(t, m, 3))
	require.NoError(t, err)
	assert.True(t, merged.Passed())
	assert.Equal(t, tables(m.Markdown()), tables(merged.Markdown()))
	assert.Contains(t, merged.Markdown(), "**Result: meets the bar.**")
}

// A merge refuses files that are not one matrix, a shard missing or
// given twice, an incomplete shard, and runs missing, doubled or out of
// place, and names the file or shard.
func TestMergeRefuses(t *testing.T) {
	m := syntheticMatrix(t, 4)
	paths := writeShards(t, m, 3) // shard 3, 2, 1
	s1, s2, s3 := paths[2], paths[1], paths[0]
	edit := func(path string, change func(*ResultsFile)) string {
		f, err := readResultsFile(path)
		require.NoError(t, err)
		change(&f)
		p := filepath.Join(t.TempDir(), "edited-"+filepath.Base(path))
		require.NoError(t, writeResults(p, f))
		return p
	}
	refuse := func(want string, files ...string) {
		t.Helper()
		_, err := Merge(files)
		require.Error(t, err)
		assert.ErrorContains(t, err, want)
	}
	_, err := Merge([]string{s1, s2, s3})
	require.NoError(t, err)

	refuse("shard 2/3 missing (2 of 3 files given)", s1, s3)
	refuse("shard 2/3, shard 3/3 missing", s1)
	refuse("shard 2/3 given twice: "+s2+" and "+s2, s1, s2, s2, s3)
	refuse("is shard 1/2 but", edit(s1, func(f *ResultsFile) { f.Shard = ShardKey{1, 2} }), s2, s3)
	refuse("seeds 11..14 in the first, 11..13 in the second", s1, edit(s2, func(f *ResultsFile) { f.Matrix.Seeds = 3 }), s3)
	refuse("time 5s in the first, 10s in the second", s1, edit(s2, func(f *ResultsFile) { f.Matrix.Time = "10s" }), s3)
	refuse("nemesis all in the first, pause in the second", s1, s2, edit(s3, func(f *ResultsFile) { f.Matrix.Nemesis = "pause" }))
	refuse("fencecheck build 8066050d8912798a2a47a95ad6fe5a5fa14f54eb, go1.26.8 in the first, 8066050d8912798a2a47a95ad6fe5a5fa14f54eb (modified), go1.26.8",
		s1, edit(s2, func(f *ResultsFile) { f.Matrix.Fencecheck.Modified = true }), s3)
	refuse("rows ", s1, edit(s2, func(f *ResultsFile) { f.Matrix.Rows = f.Matrix.Rows[1:] }), s3)
	norows := func(f *ResultsFile) { f.Matrix.Rows = nil }
	refuse("no rows", edit(s1, norows), edit(s2, norows), edit(s3, norows))
	refuse("row accept-forged's arguments", s1, s2, edit(s3, func(f *ResultsFile) {
		for i := range f.Matrix.Rows {
			if f.Matrix.Rows[i].Name == "accept-forged" {
				f.Matrix.Rows[i].Args += " --concurrency=9"
			}
		}
	}))
	// All files agree on a row this cmd/matrix defines otherwise.
	other := func(f *ResultsFile) { f.Matrix.Rows[0].Args = "test --target=memory --bug=old" }
	refuse("row counter-in-memory: the shards ran `fencecheck test --target=memory --bug=old`", edit(s1, other), edit(s2, other), edit(s3, other))
	f2, err := readResultsFile(s2)
	require.NoError(t, err)
	cut := edit(s2, func(f *ResultsFile) { f.Interrupted, f.Runs = true, f.Runs[1:] })
	refuse(fmt.Sprintf("shard 2/3 (%s) was interrupted: %d of its %d runs done", cut, len(f2.Runs)-1, len(f2.Runs)), s1, cut, s3)
	first := runName(f2.Runs[0].Row, f2.Runs[0].Seed)
	refuse("1 of its runs missing: "+first, s1, edit(s2, func(f *ResultsFile) { f.Runs = f.Runs[1:] }), s3)
	refuse("run "+first+" is there twice", s1, edit(s2, func(f *ResultsFile) { f.Runs = append(f.Runs, f.Runs[0]) }), s3)
	refuse("is not one of this shard's runs", s1, edit(s2, func(f *ResultsFile) { f.Runs[0].Seed = 99 }), s3)
	refuse("not a cmd/matrix --results file", s1, edit(s2, func(f *ResultsFile) { f.Format = "something/2" }), s3)
	junk := filepath.Join(t.TempDir(), "junk.json")
	require.NoError(t, os.WriteFile(junk, []byte(`{"format":"fencecheck-matrix-results/1","extra":1}`), 0o644))
	refuse(junk+": json: unknown field", s1, junk)
	refuse("no such file", s1, s2, filepath.Join(t.TempDir(), "absent.json"))
}

// fakeFencecheck is a stand-in for `fencecheck test`: it writes the
// results.json its arguments call for (bug rows invalid but for one seed,
// the correct rows valid) into its --store and exits as fencecheck would.
const fakeFencecheck = `#!/bin/sh
store= bug= seed= target=
for a in "$@"; do
	case "$a" in
	--store=*) store=${a#--store=} ;;
	--bug=*) bug=${a#--bug=} ;;
	--seed=*) seed=${a#--seed=} ;;
	--target=*) target=${a#--target=} ;;
	esac
done
mkdir -p "$store/run"
if [ -n "$bug" ] || [ "$target" = postgres-async ]; then
	if [ "$bug" = accept-equal ] && [ "$seed" = 2 ]; then
		echo '{"verdict":"valid","anomaly_kinds":{}}' >"$store/run/results.json"; exit 0
	fi
	echo "{\"verdict\":\"invalid\",\"first_invalid_at_ns\":${seed}00000000,\"anomaly_kinds\":{\"k-$bug\":$seed},\"after_fault\":{\"nemesis\":\"restart\"}}" >"$store/run/results.json"
	exit 1
fi
echo '{"verdict":"valid","anomaly_kinds":{}}' >"$store/run/results.json"
`

// Run itself, sharded, runs each run once over the shards, and the merged
// results make the unsharded run's table.
func TestRunShardedAndMerged(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "fencecheck")
	require.NoError(t, os.WriteFile(bin, []byte(fakeFencecheck), 0o755))
	cfg := Config{Fencecheck: bin, Seeds: 3, FirstSeed: 1, Time: time.Second, Parallel: 2, Nemesis: "all",
		Rows: []string{"accept-equal", "counter-in-memory", "reference", "postgres-async", "postgres"}, Command: "go run ./cmd/matrix --seeds 3"}
	whole, err := Run(context.Background(), cfg, io.Discard)
	require.NoError(t, err)
	require.Len(t, whole.Outcomes["accept-equal"], 3)
	wmd := whole.Markdown()
	assert.Contains(t, wmd, "| `accept-equal` | replay: a token equal to the high-water mark is accepted | 2/3 ⚠ |")
	assert.Contains(t, wmd, "accept-equal, seed 2: exit 0")

	var paths []string
	for i := 1; i <= 4; i++ {
		c := cfg
		c.Shard = Shard{i, 4}
		c.Command = fmt.Sprintf("go run ./cmd/matrix --seeds 3 --shard %d/4", i)
		sm, err := Run(context.Background(), c, io.Discard)
		require.NoError(t, err)
		n := 0
		for _, outs := range sm.Outcomes {
			n += len(outs)
		}
		assert.Contains(t, []int{3, 4}, n, "shard %d/4 of 15 runs", i)
		p := filepath.Join(dir, fmt.Sprintf("shard-%d.json", i))
		require.NoError(t, writeResults(p, sm.Results(testBuild)))
		paths = append(paths, p)
	}
	merged, err := Merge(paths)
	require.NoError(t, err)
	merged.Config.Command = "go run ./cmd/matrix --merge shard-*.json"
	assert.Equal(t, tables(wmd), tables(merged.Markdown()))
	assert.Equal(t, whole.Passed(), merged.Passed())
}
