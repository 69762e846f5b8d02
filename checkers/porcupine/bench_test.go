package porcupine

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/checkers/historytest"
	"github.com/fencecheck/fencecheck/history"
)

// Workload-like histories: 5 writer clients per key (acquire, write, read),
// 8 keys, 2% timeouts.
func benchmarkCheckPorcupine(b *testing.B, ops int) {
	events := historytest.Simulate(historytest.SimConfig{Ops: ops, Keys: 8, ClientsPerKey: 5, InfoRate: 0.02, Seed: 1, Acquires: true}).Events()
	paired, err := history.Pair(events)
	if err != nil {
		b.Fatal(err)
	}
	pairedOps := history.OpsOf(paired)
	sem := checkers.DefaultSemantics()
	b.ReportAllocs()
	b.ResetTimer()
	var porc time.Duration
	for b.Loop() {
		c := New(10 * time.Minute)
		for _, r := range c.Check(context.Background(), pairedOps, sem) {
			if r.Verdict != checkers.Valid {
				b.Fatalf("%s: %s: %s", r.Model, r.Verdict, r.Reason)
			}
			if r.Model == checkers.ModelRegister {
				porc += r.Duration
			}
		}
	}
	b.ReportMetric(float64(porc.Nanoseconds())/float64(b.N)/1e6, "porcupine-ms/op")
	b.ReportMetric(float64(ops), "history-ops")
}

func BenchmarkCheckPorcupine10k(b *testing.B)  { benchmarkCheckPorcupine(b, 10_000) }
func BenchmarkCheckPorcupine100k(b *testing.B) { benchmarkCheckPorcupine(b, 100_000) }

// BenchmarkMatrix is Porcupine on the performance matrix
// (historytest.PerfMatrix; checkers/fast's BenchmarkMatrix has the fast
// checker on the same histories). Filter with -bench, e.g.
//
//	go test ./checkers/porcupine -run '^$' -bench 'Matrix/ops=100000/clients=20/' -benchtime 1x
//
// Each case reports peak-heap-MB and how many keys Porcupine gave up on
// (keys-timed-out) within its budget (FENCECHECK_BENCH_PORCUPINE_TIMEOUT,
// default 10s). `go run ./cmd/perfdoc` writes the same figures to
// docs/performance.md.
func BenchmarkMatrix(b *testing.B) {
	timeout := 10 * time.Second
	if s := os.Getenv("FENCECHECK_BENCH_PORCUPINE_TIMEOUT"); s != "" {
		if d, err := time.ParseDuration(s); err == nil {
			timeout = d
		}
	}
	sem := checkers.DefaultSemantics()
	for _, c := range historytest.PerfMatrix() {
		b.Run(c.String(), func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "history.jsonl")
			if err := historytest.WritePerfHistory(c, path); err != nil {
				b.Fatal(err)
			}
			events, err := history.ReadFile(path)
			if err != nil {
				b.Fatal(err)
			}
			ops, err := history.Pair(events)
			if err != nil {
				b.Fatal(err)
			}
			events = nil
			opsLog := history.OpsOf(ops)
			ops = nil
			b.ResetTimer() // the check alone, not writing and reading the file
			var peak uint64
			timedOut := 0.0
			for i := 0; i < b.N; i++ {
				peak = historytest.PeakHeap(func() {
					pc := New(timeout)
					pc.Check(context.Background(), opsLog, sem)
					timedOut = 0
					for _, k := range pc.KeyResults() {
						if k.Verdict == checkers.Unknown {
							timedOut++
						}
					}
				})
			}
			b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MB")
			b.ReportMetric(timedOut, "keys-timed-out")
		})
	}
}
