package harness

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/analysis"
	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/history"
	"github.com/fencecheck/fencecheck/nemesis"
)

// The guide aims at situations by the analysis's ids (nemesis does not
// import analysis): every one it names is one the analysis counts.
func TestTheGuideAimsAtSituationsTheAnalysisCounts(t *testing.T) {
	c, err := analysis.NewCoverageCounter(analysis.Options{})
	require.NoError(t, err)
	ids := map[string]bool{}
	for _, cl := range c.Coverage().Classes {
		for _, s := range cl.Situations {
			ids[s.ID] = true
		}
	}
	for _, id := range nemesis.Situations() {
		assert.True(t, ids[id], "the analysis counts no situation %q", id)
	}
}

// Guided is the default for "all" only; --nemesis-mode chooses either way.
func TestGuidedIsTheDefaultForAll(t *testing.T) {
	for _, tc := range []struct {
		nemesis, mode string
		guided        bool
	}{
		{"all", "", true}, {"all", nemesis.ModeRandom, false},
		{"restart,clock", "", false}, {"restart,clock", nemesis.ModeGuided, true},
	} {
		n, err := Config{Nemesis: tc.nemesis, NemesisMode: tc.mode}.Normalize()
		require.NoError(t, err)
		assert.Equal(t, tc.guided, n.guided(), "%s %q", tc.nemesis, tc.mode)
	}
	_, err := Config{NemesisMode: "smart"}.Normalize()
	assert.ErrorContains(t, err, "--nemesis-mode")
}

// The live coverage counts the recorder's events as they are written.
func TestLiveCoverageCountsWhatIsRecorded(t *testing.T) {
	rec := history.NewRecorder(&bytes.Buffer{})
	live, err := watchCoverage(rec, Default(), checkers.Semantics{})
	require.NoError(t, err)
	_, err = rec.Begin(runEvent(history.RunStart, map[string]any{history.RunExtraNodes: []history.RunNode{{Name: "reference", Role: "reference"}}}))
	require.NoError(t, err)
	assert.Zero(t, live.read()[analysis.SitReplay])
	write := func(p int, typ history.Type, errWord string) {
		rec.Record(history.Event{Process: p, Type: history.Invoke, F: history.Write, Key: "k", Token: "1", Value: "v"})
		rec.Record(history.Event{Process: p, Type: typ, F: history.Write, Key: "k", Token: "1", Value: "v", Error: errWord})
	}
	write(0, history.Ok, "")
	write(1, history.Fail, "stale")
	live.at = live.at.Add(-coverageRefresh) // past the refresh
	assert.Equal(t, 1, live.read()[analysis.SitReplay])
}

// Events queued past drainEvents are fed to the counter between counts
// (not held until the next read), and the count is the same.
func TestLiveCoverageDrainsItsQueue(t *testing.T) {
	rec := history.NewRecorder(&bytes.Buffer{})
	live, err := watchCoverage(rec, Default(), checkers.Semantics{})
	require.NoError(t, err)
	_, err = rec.Begin(runEvent(history.RunStart, map[string]any{history.RunExtraNodes: []history.RunNode{{Name: "reference", Role: "reference"}}}))
	require.NoError(t, err)
	for p := range drainEvents {
		rec.Record(history.Event{Process: p, Type: history.Invoke, F: history.Write, Key: "k", Token: "1", Value: "v"})
		typ, word := history.Ok, ""
		if p > 0 {
			typ, word = history.Fail, "stale"
		}
		rec.Record(history.Event{Process: p, Type: typ, F: history.Write, Key: "k", Token: "1", Value: "v", Error: word})
	}
	// The drain runs on its own goroutine: wait for it (under the lock
	// a read would take).
	require.Eventually(t, func() bool {
		live.mu.Lock()
		defer live.mu.Unlock()
		return !live.draining
	}, 10*time.Second, time.Millisecond)
	live.mu.Lock()
	queued := len(live.pending)
	live.mu.Unlock()
	assert.Less(t, queued, drainEvents)
	assert.Equal(t, drainEvents-1, live.read()[analysis.SitReplay]) // each stale replay
}
