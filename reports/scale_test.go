package reports

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/analysis"
)

// TestReportScales measures report.html's size and generation time (the
// rendering of an analysis, not the check) on workload-like histories and
// holds them to a budget: a 100k-operation run
// must give a page a browser opens without trouble. The 100k case is skipped
// with -short only (make check runs it).
func TestReportScales(t *testing.T) {
	cases := []struct {
		ops      int
		maxBytes int64
	}{{10_000, 1 << 20}, {100_000, 8 << 20}}
	// FENCECHECK_REPORT_OPS=1000000 measures a size past the detail budget
	// (the density view): the page holds at most that budget's operations.
	if n, err := strconv.Atoi(os.Getenv("FENCECHECK_REPORT_OPS")); err == nil && n > 0 {
		cases = append(cases, struct {
			ops      int
			maxBytes int64
		}{n, 20 << 20})
	}
	for _, tc := range cases {
		t.Run(fmt.Sprint(tc.ops), func(t *testing.T) {
			if tc.ops > 10_000 && testing.Short() {
				t.Skip("100k operations: run without -short")
			}
			dir := t.TempDir()
			info, an := synthRun(t, dir, tc.ops, true, analysis.CheckerFast)
			start := time.Now()
			res, err := Write(dir, info, an)
			elapsed := time.Since(start)
			require.NoError(t, err)
			assert.GreaterOrEqual(t, res.Counts.Ops, tc.ops, "every operation is counted, the open ones too")
			fi, err := os.Stat(filepath.Join(dir, ReportFile))
			require.NoError(t, err)
			hist, err := os.Stat(filepath.Join(dir, HistoryFile))
			require.NoError(t, err)
			t.Logf("%d ops (history %s): report.html %s in %v", tc.ops, byteSize(hist.Size()), byteSize(fi.Size()), elapsed.Round(time.Millisecond))
			assert.Less(t, fi.Size(), tc.maxBytes, "report.html too heavy")
			assert.Less(t, elapsed, 30*time.Second, "report generation too slow")
		})
	}
}
