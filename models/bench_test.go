package models

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fencecheck/fencecheck/history"
)

// Benchmarks of the checkers on the matrix (PerfMatrix: 10k, 100k,
// 1M operations × 5, 20, 50 clients per key × 0%, 5% unknown-outcome writes
// × valid, planted stale read). Filter with -bench, e.g.
//
//	go test ./models -run '^$' -bench 'Checkers/ops=100000/clients=20/' -benchtime 1x
//
// Each case reports ns/op and peak-heap-MB; Porcupine also reports how many
// keys it gave up on (keys-timed-out) within its budget
// (FENCECHECK_BENCH_PORCUPINE_TIMEOUT, default 10s). `go run ./cmd/perfdoc` writes the same figures to
// docs/performance.md.
func BenchmarkCheckers(b *testing.B) {
	timeout := 10 * time.Second
	if s := os.Getenv("FENCECHECK_BENCH_PORCUPINE_TIMEOUT"); s != "" {
		if d, err := time.ParseDuration(s); err == nil {
			timeout = d
		}
	}
	sem := DefaultSemantics()
	for _, c := range PerfMatrix() {
		b.Run(c.String(), func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "history.jsonl")
			if err := WritePerfHistory(c, path); err != nil {
				b.Fatal(err)
			}
			report := func(b *testing.B, m Measured) {
				b.ReportMetric(float64(m.PeakHeap)/(1<<20), "peak-heap-MB")
			}
			b.Run("parse", func(b *testing.B) {
				var m Measured
				for i := 0; i < b.N; i++ {
					m = Measure(func() {
						if _, err := ParseFile(path); err != nil {
							b.Fatal(err)
						}
					})
				}
				report(b, m)
			})
			b.Run("fast-stream", func(b *testing.B) {
				var m Measured
				for i := 0; i < b.N; i++ {
					m = Measure(func() {
						res, err := FastFile(path, sem, nil)
						if err != nil {
							b.Fatal(err)
						}
						if want := map[bool]Verdict{false: Valid, true: Invalid}[c.Planted]; combined(res) != want {
							b.Fatalf("fast says %s, want %s", combined(res), want)
						}
					})
				}
				report(b, m)
			})
			events, err := history.ReadFile(path)
			if err != nil {
				b.Fatal(err)
			}
			ops, err := history.Pair(events)
			if err != nil {
				b.Fatal(err)
			}
			events = nil
			b.Run("fast-check", func(b *testing.B) {
				var m Measured
				for i := 0; i < b.N; i++ {
					m = Measure(func() {
						fc := NewFastChecker(sem)
						for _, op := range ops {
							fc.Add(op)
						}
						fc.Results()
					})
				}
				report(b, m)
			})
			b.Run("porcupine", func(b *testing.B) {
				var m Measured
				timedOut := 0.0
				for i := 0; i < b.N; i++ {
					m = Measure(func() {
						rep, err := CheckOps(context.Background(), ops, Options{Semantics: sem, Checker: CheckerPorcupine, Timeout: timeout})
						if err != nil {
							b.Fatal(err)
						}
						timedOut = 0
						for _, k := range rep.Keys {
							if k.Verdict == Unknown {
								timedOut++
							}
						}
					})
				}
				report(b, m)
				b.ReportMetric(timedOut, "keys-timed-out")
			})
		})
	}
}
