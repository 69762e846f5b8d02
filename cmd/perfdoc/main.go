// Command perfdoc measures the checkers on simulated histories and writes
// docs/performance.md:
//
//	go run ./cmd/perfdoc > docs/performance.md
//
// It runs the matrix (historytest.PerfMatrix: 10k, 100k and 1M operations
// at 5, 20 and 50 clients per key, 0% and 5% unknown-outcome writes, valid
// and with one planted stale read), names the machine, and checks the
// acceptance criteria of the fast checker. It takes a few minutes on two
// cores; progress goes to stderr. The same figures come from
// `go test ./checkers/... -run '^$' -bench Matrix`.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/checkers/historytest"
)

func main() {
	timeout := flag.Duration("porcupine-timeout", 10*time.Second, "Porcupine's budget per history")
	maxPorc := flag.Int("porcupine-max-ops", 100_000, "run Porcupine only on histories of at most this many operations")
	reps := flag.Int("reps", 3, "repetitions of parse and fast per history up to 100k operations (the fastest counts)")
	repsLarge := flag.Int("reps-large", 1, "repetitions for larger histories")
	sizes := flag.String("sizes", "10000,100000,1000000", "history sizes (operations) to measure")
	childMode := flag.String("child", "", "internal: run one side of the check-vs-decode comparison (decode or check) on the file argument")
	cvdOps := flag.Int("check-vs-decode-ops", 1_000_000, "history size of the check-vs-decode comparison (0: skip it)")
	cvdReps := flag.Int("check-vs-decode-reps", 2, "repetitions of each side of the check-vs-decode comparison")
	cvdOnly := flag.Bool("check-vs-decode-only", false, "print only the check-vs-decode section")
	tableOnly := flag.Bool("table-only", false, "print only the section on each checker of the analysis's table")
	flag.Parse()
	if *childMode != "" {
		child(*childMode, flag.Arg(0))
		return
	}
	want := map[int]bool{}
	for _, s := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			fmt.Fprintln(os.Stderr, "perfdoc: -sizes:", err)
			os.Exit(64)
		}
		want[n] = true
	}
	dir, err := os.MkdirTemp("", "perfdoc")
	if err != nil {
		fail(err)
	}
	defer os.RemoveAll(dir)

	if *tableOnly {
		table, err := measureTable(filepath.Join(dir, "table.jsonl"), *timeout)
		if err != nil {
			fail(err)
		}
		writeTable(os.Stdout, table, *timeout)
		return
	}
	var cvd *CheckVsDecode
	if *cvdOps > 0 {
		m, err := measureCheckVsDecode(*cvdOps, *cvdReps, filepath.Join(dir, "check-vs-decode.jsonl"))
		if err != nil {
			fail(err)
		}
		os.Remove(filepath.Join(dir, "check-vs-decode.jsonl"))
		cvd = &m
	}
	if *cvdOnly {
		if cvd != nil {
			writeCheckVsDecode(os.Stdout, *cvd)
		}
		return
	}

	start := time.Now()
	loadBefore := loadavg()
	var rows []PerfRow
	path := filepath.Join(dir, "history.jsonl")
	for _, c := range historytest.PerfMatrix() {
		if !want[c.Ops] || c.Planted {
			continue
		}
		// One simulation per (size, clients, info): measured as is, then
		// with the stale read planted.
		h := historytest.SimulatePerf(c)
		for _, planted := range []bool{false, true} {
			c.Planted = planted
			if planted && !h.PlantStaleRead() {
				fail(fmt.Errorf("%v: no read to plant a stale value in", c))
			}
			if err := h.WriteFile(path); err != nil {
				fail(err)
			}
			to := *timeout
			if c.Ops > *maxPorc {
				to = 0
			}
			n := *reps
			if c.Ops > 100_000 {
				n = *repsLarge
			}
			// Retained memory per operation does not depend on the
			// planted read; at 1M it is measured once per client count.
			skipRetained := planted || (c.Ops > 100_000 && c.InfoRate > 0)
			row, err := MeasureFile(c, path, to, planted || skipRetained, n)
			if err != nil {
				fail(err)
			}
			rows = append(rows, row)
			fmt.Fprintf(os.Stderr, "%-45s parse %7.3fs cpu %7.3fs  fast %7.3fs cpu %7.3fs (%s)  porcupine %s\n", c, row.Parse.Time.Seconds(), row.Parse.CPU.Seconds(),
				row.FastStream.Time.Seconds(), row.FastStream.CPU.Seconds(), row.FastVerdict, porcText(row))
		}
		h = nil
		os.Remove(path)
	}
	table, err := measureTable(path, *timeout)
	if err != nil {
		fail(err)
	}
	w := bufio.NewWriter(os.Stdout)
	write(w, rows, *timeout, *maxPorc, time.Since(start), loadBefore, loadavg(), *reps, *repsLarge)
	fmt.Fprintln(w)
	writeTable(w, table, *timeout)
	if cvd != nil {
		fmt.Fprintln(w)
		writeCheckVsDecode(w, *cvd)
	}
	if err := w.Flush(); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "perfdoc:", err)
	os.Exit(3)
}

func porcText(r PerfRow) string {
	if !r.PorcupineRan {
		return "not run"
	}
	return fmt.Sprintf("%.3fs (%s%s)", r.Porcupine.Time.Seconds(), r.PorcupineVerdict, timedOut(r))
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}

func mb(n uint64) string { return fmt.Sprintf("%.0f", float64(n)/(1<<20)) }

func secs(d time.Duration) string {
	if d < time.Second {
		return fmt.Sprintf("%.3f", d.Seconds())
	}
	return fmt.Sprintf("%.2f", d.Seconds())
}

// loadavg is the 1-minute load average: other work on the machine.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Fields(string(b))[0]
}

func write(w io.Writer, rows []PerfRow, timeout time.Duration, maxPorc int, took time.Duration, loadBefore, loadAfter string, reps, repsLarge int) {
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	p("# Checker performance\n\n")
	p("Generated by `go run ./cmd/perfdoc > docs/performance.md` (%s; the run took %s).\n", time.Now().UTC().Format("2006-01-02"), took.Round(time.Second))
	p("Benchmarks with the same cases: `go test ./checkers/... -run '^$' -bench Matrix -benchtime 1x`.\n")
	p("A whole run's cost, end to end (run + check + report of a 10-minute `--nemesis all` run): [endtoend.md](endtoend.md).\n\n")
	p("Machine: %d CPUs (`nproc`), %s, %s %s/%s. The machine was shared with other work: 1-minute\n", runtime.NumCPU(), cpuModel(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
	p("load average %s at the start and %s at the end; parse and fast ran %d times per history (%d\n", loadBefore, loadAfter, reps, repsLarge)
	p("over 100k operations), interleaved, and the fastest run of each is shown. As other programs may run too,\n")
	p("parse and fast show the CPU time of the process (user + system, garbage collection included)\n")
	p("beside the wall time, and the ratios use CPU time: it is the measure least disturbed by other\n")
	p("programs. Porcupine's budget is wall-clock (it searches keys on all cores in parallel, so its CPU\n")
	p("time can exceed its wall time; the fast checker uses one core).\n\n")
	p("## What is measured\n\n")
	p("Histories come from the simulated register in `checkers/historytest/sim.go`: 10 keys, the given number of\n")
	p("clients per key (each runs one operation at a time: acquires, writes with its current token or a\n")
	p("replay of it, reads), 5%% of writes and reads ending `info` in the info columns (half of those\n")
	p("writes take effect, possibly after the client gave up), and in the stale-read rows one late read\n")
	p("changed to return a value that a newer accepted write had overwritten before the read began.\n")
	p("Every history is written to a JSONL file first and read back from it.\n\n")
	p("- **parse**: read and decode every event of the file (`history.Reader`), nothing else.\n")
	p("- **fast**: read, pair and check the file with the streaming fast checker (`fast.Stream`\n")
	p("  fed by `history.Pairer`), both models; **×parse** is fast / parse (CPU time).\n")
	p("- **fast check**: the fast checker alone on already paired operations, and **porcupine**: the\n")
	p("  Porcupine path (`porcupine.Checker`) alone on the same operations, with a\n")
	p("  budget of %s (histories over %d operations: neither is run, Porcupine has no chance there).\n", timeout, maxPorc)
	p("  **speed-up** = porcupine / fast check in CPU time (\"≥\" when Porcupine ran out of time on some\n")
	p("  key: a model is invalid as soon as one key is proved so, even if others timed out).\n")
	p("- Porcupine searches keys of one history in parallel and is cut off after its budget; its\n")
	p("  figures include the project's exact reductions (see checkers/porcupine/operations.go).\n")
	p("- **peak MB**: the largest Go heap (live and not yet collected objects) above the heap before\n")
	p("  the step, sampled every millisecond.\n\n")
	p("## Results\n\n")
	p("| ops | clients/key | info | history | file MB | parse s cpu / wall | fast s cpu / wall | ×parse | fast verdict | fast check s cpu / wall | porcupine s cpu / wall | porcupine verdict | speed-up | peak MB parse / fast / porcupine |\n")
	p("|---:|---:|---:|---|---:|---:|---:|---:|---|---:|---:|---|---:|---|\n")
	for _, r := range rows {
		c := r.Case
		hist := "valid"
		if c.Planted {
			hist = "stale read"
		}
		porc, pv, speed, porcPeak, check := "—", "not run", "—", "—", "—"
		if r.PorcupineRan {
			check = secs(r.FastCheck.CPU) + " / " + secs(r.FastCheck.Time)
			porc, pv, porcPeak = secs(r.Porcupine.CPU)+" / "+secs(r.Porcupine.Time), string(r.PorcupineVerdict)+timedOut(r), mb(r.Porcupine.PeakHeap)
			x := speedup(r)
			speed = fmt.Sprintf("%.0f×", x)
			if r.PorcupineTimedOut > 0 {
				speed = "≥" + speed
			}
		}
		p("| %d | %d | %g%% | %s | %.0f | %s / %s | %s / %s | %.2f | %s | %s | %s | %s | %s | %s / %s / %s |\n",
			c.Ops, c.ClientsPerKey, c.InfoRate*100, hist, float64(r.Bytes)/(1<<20), secs(r.Parse.CPU), secs(r.Parse.Time),
			secs(r.FastStream.CPU), secs(r.FastStream.Time), ratio(r), r.FastVerdict, check, porc, pv, speed,
			mb(r.Parse.PeakHeap), mb(r.FastStream.PeakHeap), porcPeak)
	}
	p("\n## Memory held by the streaming fast checker\n\n")
	p("Heap retained (after a GC) once every operation of the file was added, before deciding:\n")
	p("the compact records (56 bytes each plus the value's bytes, in slices that grow by doubling)\n")
	p("and the pairer's open operations. No event is kept.\n\n")
	p("| ops | clients/key | info | retained MB | bytes per operation |\n|---:|---:|---:|---:|---:|\n")
	seen := map[string]bool{}
	for _, r := range rows {
		k := fmt.Sprint(r.Case.Ops, r.Case.ClientsPerKey, r.Case.InfoRate)
		if seen[k] || r.ClientOps == 0 {
			continue // planted rows, and some 1M rows, skip this measurement
		}
		seen[k] = true
		p("| %d | %d | %g%% | %s | %.0f |\n", r.Case.Ops, r.Case.ClientsPerKey, r.Case.InfoRate*100, mb(r.Retained), float64(r.Retained)/float64(max(r.ClientOps, 1)))
	}
	p("\n## Acceptance (issue 3)\n\n")
	worst, worstCase := 0.0, ""
	for _, r := range rows {
		if r.Case.Ops == 1_000_000 {
			if x := ratio(r); x > worst {
				worst, worstCase = x, r.Case.String()
			}
		}
	}
	if worstCase != "" {
		p("- Fast checker on 1M operations within 3× of parsing: worst ×parse = %.2f CPU time (%s): %s.\n", worst, worstCase, passFail(worst <= 3))
	}
	for _, r := range rows {
		if r.Case.Ops == 100_000 && r.Case.ClientsPerKey == 20 && r.PorcupineRan {
			x := speedup(r)
			ok := x >= 100 || r.PorcupineTimedOut > 0
			p("- 100k operations, 20 clients/key, %s: Porcupine %s%s after %ss CPU (%ss wall), fast check %ss CPU: %.0f× faster: %s.\n",
				strings.TrimPrefix(r.Case.String(), "ops=100000/clients=20/"), r.PorcupineVerdict, timedOut(r), secs(r.Porcupine.CPU), secs(r.Porcupine.Time), secs(r.FastCheck.CPU), x, passFail(ok))
		}
	}
	agree, disagree, decided := 0, 0, 0
	plantedFound, planted, plantedPorcUnknown := 0, 0, 0
	for _, r := range rows {
		if r.PorcupineRan && r.PorcupineVerdict != checkers.Unknown {
			decided++
			if r.PorcupineVerdict == r.FastVerdict {
				agree++
			} else {
				disagree++
			}
		}
		if r.Case.Planted {
			planted++
			if r.FastVerdict == checkers.Invalid {
				plantedFound++
			}
			if r.PorcupineRan && r.PorcupineTimedOut > 0 {
				plantedPorcUnknown++
			}
		}
	}
	p("- Identical verdicts wherever Porcupine answered: %d of %d agree: %s.\n", agree, decided, passFail(disagree == 0))
	p("- Planted stale read found invalid by the fast checker in %d of %d histories (Porcupine timed out on some key in %d of them): %s.\n",
		plantedFound, planted, plantedPorcUnknown, passFail(plantedFound == planted))
	valid := 0
	validFast := 0
	for _, r := range rows {
		if !r.Case.Planted {
			valid++
			if r.FastVerdict == checkers.Valid {
				validFast++
			}
		}
	}
	p("- Unplanted (valid by construction) histories found valid by the fast checker: %d of %d: %s.\n", validFast, valid, passFail(validFast == valid))
}

// timedOut says on how many keys Porcupine gave up, if any.
func timedOut(r PerfRow) string {
	if r.PorcupineTimedOut == 0 {
		return ""
	}
	return fmt.Sprintf(", %d/%d keys timed out", r.PorcupineTimedOut, r.PorcupineKeys)
}

// speedup is Porcupine / fast check in CPU time (wall time if unavailable).
func speedup(r PerfRow) float64 {
	if r.FastCheck.CPU > 0 {
		return r.Porcupine.CPU.Seconds() / r.FastCheck.CPU.Seconds()
	}
	return r.Porcupine.Time.Seconds() / r.FastCheck.Time.Seconds()
}

// ratio is fast / parse in CPU time (wall time if CPU time is unavailable).
func ratio(r PerfRow) float64 {
	if r.Parse.CPU > 0 {
		return r.FastStream.CPU.Seconds() / r.Parse.CPU.Seconds()
	}
	return r.FastStream.Time.Seconds() / r.Parse.Time.Seconds()
}

func passFail(ok bool) string {
	if ok {
		return "**pass**"
	}
	return "**FAIL**"
}

// tableCase is the history every checker of the table is measured on.
var tableCase = historytest.PerfCase{Ops: 100_000, Keys: 10, ClientsPerKey: 5, Seed: 1}

func measureTable(path string, timeout time.Duration) ([]TableRow, error) {
	if err := historytest.SimulatePerf(tableCase).WriteFile(path); err != nil {
		return nil, err
	}
	defer os.Remove(path)
	return MeasureTable(path, timeout)
}

// writeTable is the section on each checker of the analysis's table: a
// checker added to the table gets its row with no change here.
func writeTable(w io.Writer, rows []TableRow, timeout time.Duration) {
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	p("## Each checker of the table\n\n")
	p("Every checker of the analysis's table (`analysis/checkers.go`, the direct checks included) alone\n")
	p("on the paired operations of one history (%s; Porcupine's budget %s), once each\n", tableCase, timeout)
	p("(%s, load average %s after; `go run ./cmd/perfdoc -table-only` prints this section alone). A\n", time.Now().UTC().Format("2006-01-02"), loadavg())
	p("checker added to the table gets its row here.\n\n")
	p("| checker | s cpu / wall | peak MB | verdict |\n|---|---:|---:|---|\n")
	for _, r := range rows {
		p("| %s | %s / %s | %s | %s |\n", r.Checker, secs(r.CPU), secs(r.Time), mb(r.PeakHeap), r.Verdict)
	}
}
