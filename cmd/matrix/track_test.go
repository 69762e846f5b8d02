package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A row keeps its verdict when a broken row is found at least once, every
// run of a valid row is valid, and a finding row shows its finding at least
// once; anything else changes it and fails the command.
func TestTrackRowsKeepOrChangeTheirVerdicts(t *testing.T) {
	broken, _ := trackRow("redis-everysec")
	valid, _ := trackRow("redis-always")
	finding, _ := trackRow("etcd-mutex-3.5")
	inv := Outcome{Exit: 1, Verdict: "invalid"}
	ok := Outcome{Exit: 0, Verdict: "valid"}
	overlap := Outcome{Exit: 0, Verdict: "valid", Metrics: map[string]float64{"lease_overlaps": 3}}
	assert.Empty(t, broken.changed([]Outcome{ok, inv, ok}))
	assert.Equal(t, "found in no run", broken.changed([]Outcome{ok, ok}))
	assert.Empty(t, valid.changed([]Outcome{ok, ok}))
	assert.Contains(t, valid.changed([]Outcome{ok, inv}), "expected valid")
	assert.Contains(t, valid.changed([]Outcome{{Exit: 2, Verdict: "unknown"}}), "exit 2")
	assert.Empty(t, finding.changed([]Outcome{ok, overlap}))
	assert.Equal(t, "found in no run", finding.changed([]Outcome{ok}))
	assert.Contains(t, finding.changed([]Outcome{overlap, inv}), "expected valid")
	assert.Equal(t, "no run", valid.changed(nil))
}

func TestTrackRecordTable(t *testing.T) {
	rows, err := selectTrackRows([]string{"redis-everysec", "redis-always"})
	require.NoError(t, err)
	m := &Matrix{Config: Config{Time: 20e9, Seeds: 2, FirstSeed: 1, Parallel: 1, Command: "make track-record", Track: true}, Rows: rows,
		Outcomes: map[string][]Outcome{
			"redis-everysec": {{Seed: 1, Exit: 1, Verdict: "invalid", System: "Redis 7.0.15 (Debian package redis-server 5:7.0.15-1~deb12u10)"}, {Seed: 2, Exit: 0, Verdict: "valid"}},
			"redis-always":   {{Seed: 1, Exit: 0, Verdict: "valid"}, {Seed: 2, Exit: 1, Verdict: "invalid"}},
		}}
	md := m.TrackMarkdown()
	assert.Contains(t, md, "| `redis-everysec`: ")
	assert.Contains(t, md, "Redis 7.0.15 (Debian package redis-server 5:7.0.15-1~deb12u10)")
	assert.Contains(t, md, "| 1/2 |")
	assert.Contains(t, md, "⚠ seed 2: exit 1 (invalid), expected valid")
	assert.Contains(t, md, "a row changed")
	assert.False(t, m.TrackPassed())
	assert.True(t, strings.Contains(md, "redis-everysec, seed 2: exit 0"), "the run that missed is listed with its reproduce line")
	_, err = selectTrackRows([]string{"nope"})
	assert.ErrorContains(t, err, "unknown track-record row")
	for _, r := range TrackRows {
		assert.NotEmpty(t, r.Reproduces, r.Name)
		assert.NotEmpty(t, r.Nemesis, r.Name)
	}
}

// A run of some rows keeps the other rows' last measurement.
func TestTrackFileKeepsTheRowsNotRun(t *testing.T) {
	f := TrackFile{Format: trackFormat, Rows: map[string]TrackEntry{}}
	first, _ := selectTrackRows([]string{"redis-everysec", "redis-always"})
	f.record(&Matrix{Config: Config{Time: 20e9, Seeds: 1, FirstSeed: 1, Command: "make track-record"}, Rows: first,
		Outcomes: map[string][]Outcome{"redis-everysec": {{Seed: 1, Exit: 1, Verdict: "invalid", Dir: "/tmp/x"}}, "redis-always": {{Seed: 1, Exit: 0, Verdict: "valid"}}}})
	again, _ := selectTrackRows([]string{"redis-always"})
	f.record(&Matrix{Config: Config{Time: 10e9, Seeds: 1, FirstSeed: 5}, Rows: again,
		Outcomes: map[string][]Outcome{"redis-always": {{Seed: 5, Exit: 0, Verdict: "valid"}}}})
	md := f.TrackMarkdown("make track-record ROWS=redis-always", false)
	assert.Contains(t, md, "seeds 1..1 × 20s")
	assert.Contains(t, md, "seeds 5..5 × 10s")
	assert.Contains(t, md, "every row keeps its verdict")
	assert.Empty(t, f.Rows["redis-everysec"].Outcomes[0].Dir, "no temporary folders kept")
	assert.True(t, f.matrix("", false).TrackPassed())
}
