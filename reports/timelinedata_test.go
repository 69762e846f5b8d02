package reports

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/analysis"
	"github.com/fencecheck/fencecheck/history"
)

// smallLimits lowers the timeline's limits so a small history reaches the
// density view and grouped rows, and restores them after the test.
func smallLimits(t *testing.T, ops, rows int) {
	oldOps, oldRows := timelineDetailOps, timelineMaxRows
	timelineDetailOps, timelineMaxRows = ops, rows
	t.Cleanup(func() { timelineDetailOps, timelineMaxRows = oldOps, oldRows })
}

// Past the detail budget the timeline is a density view of every operation
// (each counted once, in its row and bucket, by outcome), every operation
// in the windows around the violations at full detail, and the rows
// grouped past a screenful.
func TestTimelineDensityPastTheDetailBudget(t *testing.T) {
	smallLimits(t, 3000, 4)
	dir := t.TempDir()
	info, an := synthRun(t, dir, 20_000, true, analysis.CheckerFast)
	_, err := Write(dir, info, an)
	require.NoError(t, err)
	b, err := os.ReadFile(filepath.Join(dir, ReportFile))
	require.NoError(t, err)
	page := string(b)
	d := timelineFromPage(t, page)

	require.NotNil(t, d.Dens, "density mode")
	all := an.Ops.All()
	counted, fails, unknown := 0, 0, 0
	for i := range d.Dens.Ok {
		counted += int(d.Dens.Ok[i] + d.Dens.Fail[i] + d.Dens.Info[i])
		fails += int(d.Dens.Fail[i])
		unknown += int(d.Dens.Info[i])
	}
	wantFail, wantUnknown := 0, 0
	for _, o := range all {
		switch {
		case o.Completed == history.Never || o.Outcome == history.OutcomeInfo:
			wantUnknown++
		case o.Outcome == history.OutcomeFail:
			wantFail++
		}
	}
	assert.Equal(t, len(all), counted, "every operation counted once")
	assert.Equal(t, wantFail, fails)
	assert.Equal(t, wantUnknown, unknown)

	assert.Len(t, d.Lanes, 4, "rows grouped to the screenful")
	assert.Greater(t, len(d.Row), 4, "more lanes than rows")
	for _, r := range d.Row {
		assert.Less(t, r, 4)
	}
	assert.Len(t, d.Dens.Ok, 4*d.Dens.B)
	assert.Contains(t, strings.Join(d.Lanes, " "), "×", "a grouped row says how many lanes it holds")

	require.NotEmpty(t, d.Win, "windows around the violations")
	assert.LessOrEqual(t, len(d.C), 3000, "within the detail budget")
	inWin := 0
	for _, o := range all {
		if inWindows(d.Win, o.Call) {
			inWin++
		}
	}
	assert.GreaterOrEqual(t, len(d.C), inWin, "every operation of the windows embedded")
	for _, m := range d.Anom {
		assert.True(t, inWindows(d.Win, m.At), "the violation at %d ns is in a window", m.At)
	}
	assertHas(t, page, "window(s) around the violations")
}

// A valid run past the budget: the density view, no windows, and one by
// one only what its findings (lease overlaps) name.
func TestTimelineDensityOfAValidRun(t *testing.T) {
	smallLimits(t, 3000, 60)
	dir := t.TempDir()
	info, an := synthRun(t, dir, 10_000, false, analysis.CheckerFast)
	_, err := Write(dir, info, an)
	require.NoError(t, err)
	b, err := os.ReadFile(filepath.Join(dir, ReportFile))
	require.NoError(t, err)
	d := timelineFromPage(t, string(b))
	require.NotNil(t, d.Dens)
	assert.Empty(t, d.Win)
	assert.Less(t, len(d.C), 100, "only the operations the findings name are embedded one by one")
	assert.Equal(t, len(d.Row), len(d.Lanes), "few lanes: one row each")
}

// A history under the budget embeds every operation and no density.
func TestTimelineUnderTheBudgetEmbedsEveryOperation(t *testing.T) {
	dir := t.TempDir()
	info, an := synthRun(t, dir, 10_000, true, analysis.CheckerFast)
	_, err := Write(dir, info, an)
	require.NoError(t, err)
	b, err := os.ReadFile(filepath.Join(dir, ReportFile))
	require.NoError(t, err)
	d := timelineFromPage(t, string(b))
	assert.Nil(t, d.Dens)
	assert.Len(t, d.C, len(an.Ops.All()))
}

// A latency series whose buckets are each alone between gaps (rare
// renews) is drawn as dashes, never as a path of bare moves.
func TestLatencyOfRareOperationsIsDrawn(t *testing.T) {
	var ops []*history.Op
	for i, at := range []int64{10e9, 40e9, 90e9} {
		ops = append(ops, &history.Op{ID: int64(i), F: "renew", Call: at, Completed: at + 2e6, Outcome: history.OutcomeOk})
	}
	v := &opsView{end: 150e9, all: history.OpsOf(ops), keys: []string{""}, keyAt: []int{0}}
	for i := range ops {
		v.ops = append(v.ops, laidOp{pos: int32(i)})
	}
	plots := latencyPlots(v, nil, nil)
	require.Len(t, plots, 1)
	for _, s := range plots[0].Series {
		assert.Equal(t, 3, strings.Count(s.D, "L"), "series %s: one dash per lone bucket: %s", s.Name, s.D)
	}
}
