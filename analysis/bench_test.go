package analysis

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/metrics"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/checkers/historytest"
	"github.com/fencecheck/fencecheck/history"
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

// BenchmarkBothCores is issue 38's bar, in one run: on a contended history
// (4 keys, 20 clients per key, 5% unknown outcomes; 1M operations, or
// FENCECHECK_BENCH_OPS) it measures a plain encoding/json decode of every
// line into a struct of the schema's fields (historytest.PlainDecode), the
// project's own decode (history.Reader, events discarded) and the whole
// `fencecheck check --checker fast` (CheckFile, as the CLI calls it), on
// one goroutine (Workers 1: the check as it was) and on every core. The
// sides run in turn, 3 rounds (FENCECHECK_BENCH_ROUNDS), and the fastest
// round of each (by wall time) is reported, as the machine may be shared:
// wall and CPU time (the whole process's user + system, GC included),
// bytes allocated and peak heap per operation; and check/decode by wall
// and by CPU time. Run it with -benchtime 1x.
func BenchmarkBothCores(b *testing.B) {
	ops, rounds := 1_000_000, 3
	if v, err := strconv.Atoi(os.Getenv("FENCECHECK_BENCH_OPS")); err == nil && v > 0 {
		ops = v
	}
	if v, err := strconv.Atoi(os.Getenv("FENCECHECK_BENCH_ROUNDS")); err == nil && v > 0 {
		rounds = v
	}
	path := filepath.Join(b.TempDir(), "history.jsonl")
	c := historytest.PerfCase{Ops: ops, Keys: 4, ClientsPerKey: 20, InfoRate: 0.05, Seed: 1}
	if err := historytest.WritePerfHistory(c, path); err != nil {
		b.Fatal(err)
	}
	check := func(workers int) func() error {
		return func() error {
			res, err := CheckFile(context.Background(), path, Options{Checker: CheckerFast, Workers: workers})
			if err == nil && res.Verdict != checkers.Valid {
				err = fmt.Errorf("%s: %s", res.Verdict, res.Reason)
			}
			return err
		}
	}
	sides := []struct {
		name string
		run  func() error
	}{
		{"decode", func() error { _, err := historytest.PlainDecode(path); return err }},
		{"reader", func() error { return readAll(path) }},
		{"check1", check(1)},
		{"check", check(0)},
	}
	best := make([]sideCost, len(sides))
	for b.Loop() {
		for range rounds {
			for i, s := range sides {
				m, err := measureSide(s.run)
				if err != nil {
					b.Fatalf("%s: %v", s.name, err)
				}
				if best[i].wall == 0 || m.wall < best[i].wall {
					best[i] = m
				}
			}
		}
	}
	for i, s := range sides {
		t := best[i]
		b.ReportMetric(t.wall.Seconds(), s.name+"-wall-s")
		b.ReportMetric(t.cpu.Seconds(), s.name+"-cpu-s")
		b.ReportMetric(float64(t.alloc)/float64(ops), s.name+"-alloc-B/op")
		b.ReportMetric(float64(t.peak)/float64(ops), s.name+"-peak-B/op")
	}
	dec := best[0]
	for _, i := range []int{2, 3} {
		b.ReportMetric(best[i].wall.Seconds()/dec.wall.Seconds(), sides[i].name+"/decode-wall")
		b.ReportMetric(best[i].cpu.Seconds()/dec.cpu.Seconds(), sides[i].name+"/decode-cpu")
	}
}

// sideCost is what one side of BenchmarkBothCores cost.
type sideCost struct {
	wall, cpu   time.Duration
	alloc, peak uint64
}

func measureSide(run func() error) (sideCost, error) {
	var m sideCost
	var err error
	m.peak = historytest.PeakHeap(func() {
		a0, cpu0, t0 := allocatedBytes(), processCPU(), time.Now()
		err = run()
		m.wall, m.cpu, m.alloc = time.Since(t0), processCPU()-cpu0, allocatedBytes()-a0
	})
	return m, err
}

func readAll(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	rd := history.NewReader(f)
	for {
		if _, err := rd.Next(); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
	}
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func allocatedBytes() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}
