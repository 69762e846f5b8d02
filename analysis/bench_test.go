package analysis

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/checkers/historytest"
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
					if res.Verdict != checkers.Valid {
						b.Fatalf("%s: %s", res.Verdict, res.Reason)
					}
				})
			}
			b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MB")
		})
	}
}

// BenchmarkCheckVsDecode is issue 12's speed bar side by side in one run:
// the whole check with --checker fast (CheckFile) against a plain
// encoding/json decode of every line of the same file into a struct of the
// schema's fields. It reports both times per iteration and their ratio
// (check/decode, the goal is 1.0 or less). FENCECHECK_BENCH_OPS sets the
// size (default 200k operations; docs/performance.md uses 1M, with peak RSS
// from cmd/perfdoc's child processes).
func BenchmarkCheckVsDecode(b *testing.B) {
	ops := 200_000
	if v, err := strconv.Atoi(os.Getenv("FENCECHECK_BENCH_OPS")); err == nil && v > 0 {
		ops = v
	}
	path := filepath.Join(b.TempDir(), "history.jsonl")
	c := historytest.PerfCase{Ops: ops, Keys: 10, ClientsPerKey: 5, InfoRate: 0.05, Seed: 1}
	if err := historytest.WritePerfHistory(c, path); err != nil {
		b.Fatal(err)
	}
	decode := func() {
		if _, err := historytest.PlainDecode(path); err != nil {
			b.Fatal(err)
		}
	}
	var dec, chk time.Duration
	for b.Loop() {
		t := time.Now()
		decode()
		dec += time.Since(t)
		t = time.Now()
		res, err := CheckFile(context.Background(), path, Options{Checker: CheckerFast})
		chk += time.Since(t)
		if err != nil || res.Verdict != checkers.Valid {
			b.Fatalf("%v %v", err, res)
		}
	}
	b.ReportMetric(float64(dec.Nanoseconds())/float64(b.N), "decode-ns/op")
	b.ReportMetric(float64(chk.Nanoseconds())/float64(b.N), "check-ns/op")
	b.ReportMetric(chk.Seconds()/dec.Seconds(), "check/decode")
}
