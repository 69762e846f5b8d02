package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fencecheck/fencecheck/analysis"
	"github.com/fencecheck/fencecheck/checkers/historytest"
)

// The whole `fencecheck check --checker fast` against a plain
// encoding/json decode of every line of the same file into a struct, each
// in a fresh process of this program (-child), run alternately, so that
// each has its own wall time, CPU time and peak resident memory (the RSS,
// not only the Go heap: the child's VmHWM from /proc/self/status, else
// getrusage ru_maxrss; the latter is at least this program's own peak,
// because Go starts a child sharing its memory until the exec, and Linux
// carries that high-water mark over).

// child runs one side in this process and prints what it found.
func child(mode, path string) {
	switch mode {
	case "decode":
		n, err := historytest.PlainDecode(path)
		if err != nil {
			fail(err)
		}
		fmt.Println(n)
		printHWM()
	case "check":
		res, err := analysis.CheckFile(context.Background(), path, analysis.Options{Checker: analysis.CheckerFast})
		if err != nil {
			fail(err)
		}
		fmt.Println(res.Verdict, res.Counts.Ops)
		printHWM()
	default:
		fail(fmt.Errorf("-child %q", mode))
	}
}

// printHWM prints this process's peak resident set ("vmhwm-kb N"), when
// Linux tells it.
func printHWM() {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			fmt.Println("vmhwm-kb", strings.TrimSuffix(strings.TrimSpace(v), " kB"))
		}
	}
}

// sideRun is one child's measurement.
type sideRun struct {
	wall, cpu time.Duration
	rssKB     int64
	out       string
}

func runChild(mode, path string) (sideRun, error) {
	self, err := os.Executable()
	if err != nil {
		return sideRun{}, err
	}
	cmd := exec.Command(self, "-child", mode, path)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return sideRun{}, fmt.Errorf("%s: %w", mode, err)
	}
	r := sideRun{wall: time.Since(start)}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		r.rssKB = ru.Maxrss
		r.cpu = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	var lines []string
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if v, ok := strings.CutPrefix(line, "vmhwm-kb "); ok {
			if kb, err := strconv.ParseInt(v, 10, 64); err == nil {
				r.rssKB = kb
			}
			continue
		}
		lines = append(lines, line)
	}
	r.out = strings.Join(lines, "\n")
	return r, nil
}

// CheckVsDecode is the comparison for one history size.
type CheckVsDecode struct {
	Ops, Lines   int
	Bytes        int64
	Decode, Chk  sideRun // the fastest of the repetitions (by CPU), peak RSS the largest
	Verdict      string
	Reps         int
	LoadBefore   string
	LoadAfter    string
	PeakRSSBytes int64
}

func measureCheckVsDecode(ops, reps int, path string) (CheckVsDecode, error) {
	c := historytest.PerfCase{Ops: ops, Keys: 10, ClientsPerKey: 5, InfoRate: 0.05, Seed: 1}
	if err := historytest.WritePerfHistory(c, path); err != nil {
		return CheckVsDecode{}, err
	}
	st, err := os.Stat(path)
	if err != nil {
		return CheckVsDecode{}, err
	}
	out := CheckVsDecode{Ops: ops, Bytes: st.Size(), Reps: reps, LoadBefore: loadavg()}
	best := func(b *sideRun, r sideRun) {
		rss := max(b.rssKB, r.rssKB)
		if b.cpu == 0 || r.cpu < b.cpu {
			*b = r
		}
		b.rssKB = rss
	}
	for i := 0; i < reps; i++ {
		for _, mode := range []string{"decode", "check"} {
			r, err := runChild(mode, path)
			if err != nil {
				return out, err
			}
			fmt.Fprintf(os.Stderr, "check vs decode, %d ops: %s %.2fs wall %.2fs cpu %d MB RSS (%s)\n", ops, mode, r.wall.Seconds(), r.cpu.Seconds(), r.rssKB>>10, r.out)
			if mode == "decode" {
				best(&out.Decode, r)
				out.Lines, _ = strconv.Atoi(r.out)
			} else {
				best(&out.Chk, r)
				out.Verdict = r.out
			}
		}
	}
	out.LoadAfter = loadavg()
	return out, nil
}

func writeCheckVsDecode(w io.Writer, m CheckVsDecode) {
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	p("## The whole check against a plain JSON decode\n\n")
	p("`fencecheck check --checker fast` (analysis.CheckFile: the reader, the pairing, the direct checks,\n")
	p("the fast checker, faults, causes, counts, latencies and lease overlaps) against a plain\n")
	p("`encoding/json` decode of every line of the same file into a struct of the schema's fields, each in\n")
	p("a fresh process, alternately, %d times; the fastest run of each by CPU time (user + system) is\n", m.Reps)
	p("shown, with the largest peak resident set (the child's `VmHWM`: RSS, not only the Go heap).\n")
	p("History: %d operations (%d lines, %.0f MB), 10 keys, 5 clients per key, 5%% info. The machine was\n", m.Ops, m.Lines, float64(m.Bytes)/(1<<20))
	p("shared and loaded (1-minute load average %s before, %s after, on 2 cores): wall times are noisy,\n", m.LoadBefore, m.LoadAfter)
	p("CPU times less so.\n\n")
	p("| | CPU s | wall s | peak RSS MB | RSS bytes/op |\n|---|---:|---:|---:|---:|\n")
	for _, s := range []struct {
		name string
		r    sideRun
	}{{"plain decode", m.Decode}, {"check --checker fast", m.Chk}} {
		p("| %s | %.2f | %.2f | %.0f | %.0f |\n", s.name, s.r.cpu.Seconds(), s.r.wall.Seconds(), float64(s.r.rssKB)/1024, float64(s.r.rssKB)*1024/float64(m.Ops))
	}
	p("\ncheck / decode: **%.2f×** CPU, %.2f× wall (goal: 1.0×); peak RSS of check: **%.0f bytes per\n",
		m.Chk.cpu.Seconds()/m.Decode.cpu.Seconds(), m.Chk.wall.Seconds()/m.Decode.wall.Seconds(), float64(m.Chk.rssKB)*1024/float64(m.Ops))
	p("operation** (goal: 400). Verdict: %s.\n\n", m.Verdict)
}
