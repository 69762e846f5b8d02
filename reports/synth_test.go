package reports

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/analysis"
	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/checkers/historytest"
)

// synthRun writes a run folder with a workload-like simulated history of
// about nOps operations (10 clients on 5 keys; a pause and a restart of the
// node alternate every 2 s; 2% of operations time out) and returns its run
// info and its analysis. With wipe, the first restart loses every
// high-water mark (the "resource forgets" bug) and the analysis finds the
// stale writes the resource then accepted. checker is the analysis's
// (fast keeps large histories quick; Porcupine draws keys).
func synthRun(t testing.TB, dir string, nOps int, wipe bool, checker string) (RunInfo, *analysis.Result) {
	require.NoError(t, os.MkdirAll(filepath.Join(dir, LogsDir), 0o755))
	h := historytest.Simulate(historytest.SimConfig{Seed: 1, Ops: nOps, Keys: 5, ClientsPerKey: 2, InfoRate: 0.02,
		Acquires: true, MaxThink: 2, FaultEvery: 2000, FaultLen: 600, ForgetHighWater: wipe})
	path := filepath.Join(dir, HistoryFile)
	require.NoError(t, h.WriteFile(path))
	require.NoError(t, os.WriteFile(filepath.Join(dir, LogsDir, "reference.log"),
		[]byte("listening on 127.0.0.1:7001\nkilled (SIGKILL)\nstarting with an empty data dir\nlistening on 127.0.0.1:7001\n"), 0o644))
	start := time.Date(2026, 11, 30, 6, 0, 0, 0, time.UTC)
	info := RunInfo{Target: "memory", Seed: 1, Start: start, End: start.Add(30 * time.Second),
		Command: "fencecheck test --target memory --bug forget-highwater --nemesis pause,restart --seed 1 --time 30s",
		Nemeses: []string{"pause", "restart"}, Config: map[string]any{"target": "memory", "bug": "forget-highwater", "seed": 1}}
	// The simulated clients never release: a short lease keeps the lease
	// findings to the overlaps a real run would have.
	res, err := analysis.CheckFile(context.Background(), path, analysis.Options{Checker: checker, TTL: 10 * time.Millisecond, Timeout: 20 * time.Second})
	require.NoError(t, err)
	if wipe {
		require.Equal(t, checkers.Invalid, res.Verdict, res.Reason)
	} else {
		require.Equal(t, checkers.Valid, res.Verdict, res.Reason)
	}
	return info, res
}
