package analysis

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"testing"

	"github.com/fencecheck/fencecheck/checkers/historytest"
	"github.com/fencecheck/fencecheck/history"
)

// BenchmarkLiveCoverage is one live count (CoverageCounter.Coverage: what
// a run's guided schedule reads every few seconds, over every operation so
// far) on the performance matrix's history (10 keys, 5 clients per key, 5%
// unknown outcomes; 200k operations, or FENCECHECK_BENCH_OPS). It reports,
// per operation, what the counter holds (held-B/op), what one count
// allocates (count-alloc-B/op) and the most it holds at once above what
// the counter holds (count-live-B/op: its peak heap with the collector run
// at GOGC 5, near what is live): during a run the counter and a count's
// index are alive together, under the run's soft memory limit
// (docs/endtoend.md).
//
//	go test ./analysis -run '^$' -bench LiveCoverage -benchtime 3x
func BenchmarkLiveCoverage(b *testing.B) {
	n := 200_000
	if v, err := strconv.Atoi(os.Getenv("FENCECHECK_BENCH_OPS")); err == nil && v > 0 {
		n = v
	}
	path := filepath.Join(b.TempDir(), "history.jsonl")
	if err := historytest.WritePerfHistory(historytest.PerfCase{Ops: n, Keys: 10, ClientsPerKey: 5, InfoRate: 0.05, Seed: 1}, path); err != nil {
		b.Fatal(err)
	}
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	before := ms.HeapAlloc
	c, err := NewCoverageCounter(Options{})
	if err != nil {
		b.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	rd := history.NewReader(f)
	for {
		e, err := rd.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			b.Fatal(err)
		}
		if err := c.Add(e); err != nil {
			b.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&ms)
	held := float64(ms.HeapAlloc) - float64(before)
	var alloc, peak uint64
	for b.Loop() {
		runtime.ReadMemStats(&ms)
		from := ms.TotalAlloc
		gc := debug.SetGCPercent(5)
		peak = max(peak, historytest.PeakHeap(func() { c.Coverage() }))
		debug.SetGCPercent(gc)
		runtime.ReadMemStats(&ms)
		alloc = ms.TotalAlloc - from
	}
	runtime.KeepAlive(c)
	b.ReportMetric(held/float64(n), "held-B/op")
	b.ReportMetric(float64(alloc)/float64(n), "count-alloc-B/op")
	b.ReportMetric(float64(peak)/float64(n), "count-live-B/op")
}
