package reports

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/analysis"
	"github.com/fencecheck/fencecheck/checkers"
)

// issue 27: no visualization file over its bound; a page that says so
// where even the window would be bigger.
func TestVisualizationsAreBounded(t *testing.T) {
	defer func(n int) { MaxVisualizationBytes = n }(MaxVisualizationBytes)
	MaxVisualizationBytes = 64 << 10
	dir := t.TempDir()
	info, an := synthRun(t, dir, 6000, true, analysis.CheckerBoth)
	r, err := Write(dir, info, an)
	require.NoError(t, err)
	require.NotEmpty(t, r.Files.Visualizations)
	for _, rel := range r.Files.Visualizations {
		fi, err := os.Stat(filepath.Join(dir, rel))
		require.NoError(t, err)
		assert.LessOrEqual(t, fi.Size(), int64(MaxVisualizationBytes), rel)
		t.Logf("%s: %d bytes", rel, fi.Size())
	}
}

// issue 27: `check --report` references a history already on disk instead
// of copying it.
func TestWriteFromReferencesTheHistory(t *testing.T) {
	src := filepath.Join("testdata", "invalid.jsonl")
	tmp := filepath.Join(t.TempDir(), "h.jsonl")
	b, err := os.ReadFile(src)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(tmp, b, 0o644))
	dir := filepath.Join(filepath.Dir(tmp), "report")
	_, err = WriteFrom(dir, tmp, RunInfo{Target: "memory"}, checkOf(t, tmp, invalidCheck()))
	require.NoError(t, err)
	a, err := os.Stat(tmp)
	require.NoError(t, err)
	h, err := os.Stat(filepath.Join(dir, HistoryFile))
	require.NoError(t, err)
	assert.True(t, os.SameFile(a, h), "the same file (a hard link on one file system), not a copy")
	assert.Equal(t, checkers.Invalid, func() checkers.Verdict { s, _ := LoadRun(dir); return s.Checks[0].Verdict }())
}
