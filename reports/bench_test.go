package reports

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/fencecheck/fencecheck/analysis"
	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/checkers/historytest"
)

// BenchmarkWrite is the cost of writing a run's reports (results.json,
// junit.xml, report.html, Porcupine's pages), each file durably
// (durable.WriteFile: fsync of the file and of its folder):
//
//	go test ./reports -run '^$' -bench Write -benchtime 20x
func BenchmarkWrite(b *testing.B) {
	dir := b.TempDir()
	info, res := synthRun(b, dir, 20000, true, analysis.CheckerBoth)
	b.ResetTimer()
	for range b.N {
		if _, err := Write(dir, info, res); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCheckReport is issue 38's bar for `fencecheck check --report`,
// in one run: on the contended history of analysis.BenchmarkBothCores (4
// keys, 20 clients per key, 5% unknown outcomes; 1M operations, or
// FENCECHECK_BENCH_OPS) it measures `check --checker fast` (CheckFile, as
// the CLI calls it) and the same followed by the report folder
// (WriteFrom: results.json, report.html, junit.xml), in turn, 3 rounds
// (FENCECHECK_BENCH_ROUNDS), the fastest round of each by wall time: wall
// seconds and peak heap per operation (the largest Go heap above the heap
// before the side), and report/check by wall time. Run it with
// -benchtime 1x.
func BenchmarkCheckReport(b *testing.B) {
	ops, rounds := 1_000_000, 3
	if v, err := strconv.Atoi(os.Getenv("FENCECHECK_BENCH_OPS")); err == nil && v > 0 {
		ops = v
	}
	if v, err := strconv.Atoi(os.Getenv("FENCECHECK_BENCH_ROUNDS")); err == nil && v > 0 {
		rounds = v
	}
	dir := b.TempDir()
	path := filepath.Join(dir, "history.jsonl")
	c := historytest.PerfCase{Ops: ops, Keys: 4, ClientsPerKey: 20, InfoRate: 0.05, Seed: 1}
	if err := historytest.WritePerfHistory(c, path); err != nil {
		b.Fatal(err)
	}
	check := func(report bool) error {
		res, err := analysis.CheckFile(context.Background(), path, analysis.Options{Checker: analysis.CheckerFast})
		if err != nil {
			return err
		}
		if res.Verdict != checkers.Valid {
			return fmt.Errorf("%s: %s", res.Verdict, res.Reason)
		}
		if report {
			_, err = WriteFrom(filepath.Join(dir, "report"), path, RunInfo{Target: "history " + path}, res)
		}
		return err
	}
	names := []string{"check", "report"}
	var wall [2]time.Duration
	var peak [2]uint64
	for b.Loop() {
		for range rounds {
			for i := range names {
				var took time.Duration
				var err error
				p := historytest.PeakHeap(func() {
					t := time.Now()
					err = check(i == 1)
					took = time.Since(t)
				})
				if err != nil {
					b.Fatalf("%s: %v", names[i], err)
				}
				if wall[i] == 0 || took < wall[i] {
					wall[i], peak[i] = took, p
				}
			}
		}
	}
	for i, n := range names {
		b.ReportMetric(wall[i].Seconds(), n+"-wall-s")
		b.ReportMetric(float64(peak[i])/float64(ops), n+"-peak-B/op")
	}
	b.ReportMetric(wall[1].Seconds()/wall[0].Seconds(), "report/check-wall")
}
