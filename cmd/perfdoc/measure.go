package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"syscall"
	"time"

	"github.com/fencecheck/fencecheck/analysis"
	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/checkers/fast"
	"github.com/fencecheck/fencecheck/checkers/historytest"
	"github.com/fencecheck/fencecheck/checkers/porcupine"
	"github.com/fencecheck/fencecheck/history"
)

// Performance measurement of the checkers on the simulated histories of
// historytest.PerfMatrix (the checkers' benchmarks use the same histories).

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

// Measure runs fn once and measures its wall time, its CPU time and its
// peak heap (historytest.PeakHeap).
func Measure(fn func()) Measured {
	var m Measured
	m.PeakHeap = historytest.PeakHeap(func() {
		cpu0 := cpuTime()
		start := time.Now()
		fn()
		m.Time = time.Since(start)
		m.CPU = cpuTime() - cpu0
	})
	return m
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
func FastFile(path string, sem checkers.Semantics, stats *FastFileStats) ([]checkers.Result, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var base uint64
	if stats != nil {
		runtime.GC()
		base = liveHeap()
	}
	n := 0
	c := fast.NewStream(sem)
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
	rest, err := p.Finish()
	if err != nil {
		return nil, err
	}
	for _, op := range rest {
		c.Add(op)
		n++
	}
	if stats != nil {
		runtime.GC()
		stats.Retained, stats.Ops = liveHeap()-base, n
	}
	return c.Results(), nil
}

// PerfRow is the measurement of one case.
type PerfRow struct {
	Case   historytest.PerfCase
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
	FastVerdict, PorcupineVerdict checkers.Verdict
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
func MeasureFile(c historytest.PerfCase, path string, porcupineTimeout time.Duration, skipRetained bool, reps int) (PerfRow, error) {
	row := PerfRow{Case: c}
	if st, err := os.Stat(path); err == nil {
		row.Bytes = st.Size()
	}
	sem := checkers.DefaultSemantics()
	var err error
	var res []checkers.Result
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
			fc := fast.NewStream(sem)
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
	pc := porcupine.New(porcupineTimeout)
	var pr []checkers.Result
	opsLog := history.OpsOf(ops)
	row.Porcupine = Measure(func() { pr = pc.Check(context.Background(), opsLog, sem) })
	row.PorcupineVerdict = combined(pr)
	for _, k := range pc.KeyResults() {
		row.PorcupineKeys++
		if k.Verdict == checkers.Unknown {
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

// liveHeap is the Go heap's objects in bytes.
func liveHeap() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TableRow is one checker of the analysis's table alone on one history's
// paired operations.
type TableRow struct {
	Checker string
	Measured
	Verdict checkers.Verdict
}

// MeasureTable runs every checker of the analysis's table (analysis.
// CheckerLines: the direct checks, Porcupine with timeout, the fast
// checker, and any checker added to the table) alone on the history in path,
// each once on the same paired operations.
func MeasureTable(path string, timeout time.Duration) ([]TableRow, error) {
	events, err := history.ReadFile(path)
	if err != nil {
		return nil, err
	}
	paired, err := history.Pair(events)
	if err != nil {
		return nil, err
	}
	events = nil
	ops := history.OpsOf(paired)
	sem := checkers.DefaultSemantics()
	var rows []TableRow
	for _, name := range analysis.CheckerLines() {
		c, err := analysis.NewChecker(name, analysis.Options{Timeout: timeout})
		if err != nil {
			return nil, err
		}
		var res []checkers.Result
		m := Measure(func() { res = c.Check(context.Background(), ops, sem) })
		rows = append(rows, TableRow{Checker: name, Measured: m, Verdict: combined(res)})
	}
	return rows, nil
}
