package analysis

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/fencecheck/fencecheck/models"
	"github.com/fencecheck/fencecheck/models/historytest"
)

// BenchmarkCheckFile is the whole check of a history file, as `fencecheck
// check` and a run's Finish do it: one streaming pass, the direct checks,
// Porcupine, the fast checker, faults, causes, counts, latency and lease
// overlaps. 100k operations of the performance matrix (10 keys, 5 clients
// per key, 5% unknown outcomes).
func BenchmarkCheckFile(b *testing.B) {
	for _, checker := range []string{CheckerFast, CheckerBoth} {
		b.Run(checker, func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "history.jsonl")
			c := historytest.PerfCase{Ops: 100_000, Keys: 10, ClientsPerKey: 5, InfoRate: 0.05, Seed: 1}
			if err := historytest.WritePerfHistory(c, path); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			var peak uint64
			for b.Loop() {
				peak = historytest.PeakHeap(func() {
					res, err := CheckFile(context.Background(), path, Options{Checker: checker})
					if err != nil {
						b.Fatal(err)
					}
					if res.Verdict != models.Valid {
						b.Fatalf("%s: %s", res.Verdict, res.Reason)
					}
				})
			}
			b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MB")
		})
	}
}
