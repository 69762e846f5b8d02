package fast

import (
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/checkers/historytest"
	"github.com/fencecheck/fencecheck/history"
)

// BenchmarkMatrix is the fast checker on the performance matrix
// (historytest.PerfMatrix: 10k, 100k, 1M operations × 5, 20, 50 clients per
// key × 0%, 5% unknown-outcome writes × valid, planted stale read);
// checkers/porcupine's BenchmarkMatrix has Porcupine on the same histories.
// Filter with -bench, e.g.
//
//	go test ./checkers/fast -run '^$' -bench 'Matrix/ops=100000/clients=20/' -benchtime 1x
//
// Each case reports ns/op and peak-heap-MB for parsing the file alone (the
// floor), for reading, pairing and checking it streaming, and for the check
// alone on paired operations. `go run ./cmd/perfdoc` writes the same figures
// to docs/performance.md.
func BenchmarkMatrix(b *testing.B) {
	sem := checkers.DefaultSemantics()
	for _, c := range historytest.PerfMatrix() {
		b.Run(c.String(), func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "history.jsonl")
			if err := historytest.WritePerfHistory(c, path); err != nil {
				b.Fatal(err)
			}
			report := func(b *testing.B, peak uint64) {
				b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MB")
			}
			b.Run("parse", func(b *testing.B) {
				var peak uint64
				for i := 0; i < b.N; i++ {
					peak = historytest.PeakHeap(func() {
						f, err := os.Open(path)
						if err != nil {
							b.Fatal(err)
						}
						defer f.Close()
						rd := history.NewReader(f)
						for {
							if _, err := rd.Next(); err == io.EOF {
								break
							} else if err != nil {
								b.Fatal(err)
							}
						}
					})
				}
				report(b, peak)
			})
			b.Run("fast-stream", func(b *testing.B) {
				var peak uint64
				for i := 0; i < b.N; i++ {
					peak = historytest.PeakHeap(func() {
						f, err := os.Open(path)
						if err != nil {
							b.Fatal(err)
						}
						defer f.Close()
						res, err := CheckReader(f, sem, nil)
						if err != nil {
							b.Fatal(err)
						}
						if want := map[bool]checkers.Verdict{false: checkers.Valid, true: checkers.Invalid}[c.Planted]; combined(res) != want {
							b.Fatalf("fast says %s, want %s", combined(res), want)
						}
					})
				}
				report(b, peak)
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
				var peak uint64
				for i := 0; i < b.N; i++ {
					peak = historytest.PeakHeap(func() {
						fc := NewStream(sem)
						for _, op := range ops {
							fc.Add(op)
						}
						fc.Results()
					})
				}
				report(b, peak)
			})
		})
	}
}

// combined is the verdict over both models: invalid if either is, else
// unknown if either is, else valid.
func combined(res []checkers.Result) checkers.Verdict {
	v := checkers.Valid
	for _, r := range res {
		switch r.Verdict {
		case checkers.Invalid:
			return checkers.Invalid
		case checkers.Unknown:
			v = checkers.Unknown
		}
	}
	return v
}
