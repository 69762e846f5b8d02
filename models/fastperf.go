package models

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/metrics"
	"sync"
	"syscall"
	"time"

	"github.com/fencecheck/fencecheck/history"
)

// Performance measurement of the checkers on simulated histories, shared by
// models/bench_test.go (go test -bench) and cmd/perfdoc (docs/performance.md).

// PerfCase is one benchmark history.
type PerfCase struct {
	Ops           int
	Keys          int
	ClientsPerKey int
	InfoRate      float64
	// Planted: one read returns an overwritten value (a stale read).
	Planted bool
	Seed    uint64
}

func (c PerfCase) String() string {
	v := "valid"
	if c.Planted {
		v = "stale-read"
	}
	return fmt.Sprintf("ops=%d/clients=%d/info=%g%%/%s", c.Ops, c.ClientsPerKey, c.InfoRate*100, v)
}

// PerfMatrix is the matrix: 10k, 100k and 1M operations at 5, 20 and
// 50 clients per key, 0% and 5% unknown-outcome writes, valid and with one
// planted stale read. Ten keys throughout.
func PerfMatrix() []PerfCase {
	var out []PerfCase
	for _, n := range []int{10_000, 100_000, 1_000_000} {
		for _, c := range []int{5, 20, 50} {
			for _, info := range []float64{0, 0.05} {
				for _, planted := range []bool{false, true} {
					out = append(out, PerfCase{Ops: n, Keys: 10, ClientsPerKey: c, InfoRate: info, Planted: planted, Seed: 1})
				}
			}
		}
	}
	return out
}

// SimulatePerf simulates the case's history, unplanted (see
// SimHistory.PlantStaleRead).
func SimulatePerf(c PerfCase) *SimHistory {
	return Simulate(SimConfig{Seed: c.Seed, Ops: c.Ops, Keys: c.Keys, ClientsPerKey: c.ClientsPerKey,
		InfoRate: c.InfoRate, Tick: 1_000_000, MaxDur: 40, MaxThink: 10, Acquires: true})
}

// WritePerfHistory simulates the case's history and writes it to path as
// JSON Lines, as `fencecheck check` would read it.
func WritePerfHistory(c PerfCase, path string) error {
	h := SimulatePerf(c)
	if c.Planted && !h.PlantStaleRead() {
		return fmt.Errorf("%v: no read to plant a stale value in", c)
	}
	return h.WriteFile(path)
}

// WriteFile writes the history to path as JSON Lines.
func (h *SimHistory) WriteFile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := h.WriteJSONL(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Measured is one measurement: wall time, the CPU time of the whole
// process (user + system, GC included; far less disturbed than wall time
// when other programs share the machine), and the peak of the Go heap above
// what was live before it started.
type Measured struct {
	Time     time.Duration
	CPU      time.Duration
	PeakHeap uint64
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

const heapObjects = "/memory/classes/heap/objects:bytes"

func heapBytes() uint64 {
	s := []metrics.Sample{{Name: heapObjects}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// Measure runs fn once, sampling the heap every millisecond for its peak.
func Measure(fn func()) Measured {
	runtime.GC()
	base := heapBytes()
	peak := base
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				peak = max(peak, heapBytes())
			}
		}
	}()
	cpu0 := cpuTime()
	start := time.Now()
	fn()
	d := time.Since(start)
	cpu := cpuTime() - cpu0
	close(stop)
	wg.Wait()
	peak = max(peak, heapBytes())
	return Measured{Time: d, CPU: cpu, PeakHeap: peak - base}
}

// ParseFile reads every event of a JSONL history and discards it: the
// floor any checker of the file pays.
func ParseFile(path string) (events int, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	rd := history.NewReader(f)
	for {
		_, err := rd.Next()
		if err == io.EOF {
			return events, nil
		}
		if err != nil {
			return events, err
		}
		events++
	}
}

// FastFileStats is what FastFile can report besides the results.
type FastFileStats struct {
	// Retained is the heap held (after a GC) once every operation was
	// added, before deciding; Ops the client operations paired.
	Retained uint64
	Ops      int
}

// FastFile runs the streaming fast checker on a history file. With stats !=
// nil it also measures the heap the checker (and the pairer) hold once
// every operation is added, before deciding.
func FastFile(path string, sem Semantics, stats *FastFileStats) ([]Result, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var base uint64
	if stats != nil {
		runtime.GC()
		base = heapBytes()
	}
	n := 0
	c := NewFastChecker(sem)
	p := history.NewPairer()
	rd := history.NewReader(f)
	for {
		e, err := rd.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		op, err := p.Add(e)
		if err != nil {
			return nil, err
		}
		if op != nil {
			c.Add(op)
			n++
		}
	}
	for _, op := range p.Finish() {
		c.Add(op)
		n++
	}
	if stats != nil {
		runtime.GC()
		stats.Retained, stats.Ops = heapBytes()-base, n
	}
	return c.Results(), nil
}

// PerfRow is the measurement of one case.
type PerfRow struct {
	Case   PerfCase
	Bytes  int64
	Events int
	// Parse: reading the events alone. FastStream: reading, pairing and the
	// fast checker, streaming (what a streaming `fencecheck check --checker
	// fast` does). FastCheck: the fast checker alone on paired operations;
	// Porcupine: the Porcupine path alone on the same paired operations
	// (both only when PorcupineRan).
	Parse, FastStream, FastCheck, Porcupine Measured
	// Retained is the heap the streaming fast checker (and the pairer)
	// held once every operation was added; ClientOps the operations.
	Retained                      uint64
	ClientOps                     int
	FastVerdict, PorcupineVerdict Verdict
	PorcupineRan                  bool
	// PorcupineKeys and PorcupineTimedOut count the register keys and lock
	// scopes Porcupine searched and those it gave up on: a model can be
	// "invalid" because one key was proved so while others timed out.
	PorcupineKeys, PorcupineTimedOut int
}

// MeasureFile measures one history file: parse and fast (streaming), the
// retained heap (unless skipRetained), and, when porcupineTimeout > 0, the
// fast checker and Porcupine with that timeout on the paired operations.
//
// Parse and fast are measured reps times, interleaved, and the fastest run
// of each is kept: on a shared machine the minimum is the least disturbed
// estimate of the work itself.
func MeasureFile(c PerfCase, path string, porcupineTimeout time.Duration, skipRetained bool, reps int) (PerfRow, error) {
	row := PerfRow{Case: c}
	if st, err := os.Stat(path); err == nil {
		row.Bytes = st.Size()
	}
	sem := DefaultSemantics()
	var err error
	var res []Result
	for i := 0; i < max(reps, 1); i++ {
		m := Measure(func() { row.Events, err = ParseFile(path) })
		if err != nil {
			return row, err
		}
		row.Parse = fastest(row.Parse, m, i)
		m = Measure(func() { res, err = FastFile(path, sem, nil) })
		if err != nil {
			return row, err
		}
		row.FastStream = fastest(row.FastStream, m, i)
	}
	row.FastVerdict = combined(res)
	if !skipRetained {
		var st FastFileStats
		if _, err := FastFile(path, sem, &st); err != nil {
			return row, err
		}
		row.Retained, row.ClientOps = st.Retained, st.Ops
	}
	if porcupineTimeout <= 0 {
		return row, nil
	}
	events, err := history.ReadFile(path)
	if err != nil {
		return row, err
	}
	ops, err := history.Pair(events)
	events = nil
	if err != nil {
		return row, err
	}
	for i := 0; i < max(reps, 1); i++ {
		row.FastCheck = fastest(row.FastCheck, Measure(func() {
			fc := NewFastChecker(sem)
			for _, op := range ops {
				fc.Add(op)
			}
			res = fc.Results()
		}), i)
	}
	if v := combined(res); v != row.FastVerdict {
		return row, fmt.Errorf("%v: streaming and in-memory fast verdicts differ: %s vs %s", c, row.FastVerdict, v)
	}
	row.PorcupineRan = true
	var rep *Report
	row.Porcupine = Measure(func() {
		rep, err = CheckOps(context.Background(), ops, Options{Semantics: sem, Checker: CheckerPorcupine, Timeout: porcupineTimeout})
	})
	if err != nil {
		return row, err
	}
	var pr []Result
	for _, r := range rep.Results {
		if r.Checker == CheckerPorcupine {
			pr = append(pr, r)
		}
	}
	row.PorcupineVerdict = combined(pr)
	for _, k := range rep.Keys {
		row.PorcupineKeys++
		if k.Verdict == Unknown {
			row.PorcupineTimedOut++
		}
	}
	return row, nil
}

// fastest keeps the quicker of two measurements (the first when i == 0),
// wall and CPU time separately.
func fastest(best, m Measured, i int) Measured {
	if i == 0 {
		return m
	}
	best.Time = min(best.Time, m.Time)
	best.CPU = min(best.CPU, m.CPU)
	return best
}

// combined is the verdict over both models: invalid if either is, else
// unknown if either is, else valid.
func combined(res []Result) Verdict {
	v := Valid
	for _, r := range res {
		switch r.Verdict {
		case Invalid:
			return Invalid
		case Unknown:
			v = Unknown
		}
	}
	return v
}
