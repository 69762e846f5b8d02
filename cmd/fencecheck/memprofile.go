package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"
)

// memProfileEnv names a folder: when set, the process samples its memory
// every 100 ms into DIR/PID/memory.tsv (seconds since start, RSS, the Go
// heap's live and in-use bytes, the GC's goal) and writes a heap profile
// to DIR/PID/peak-SECONDS.pb.gz (to the hundredth, so a short check's
// profiles do not write over each other) whenever the in-use heap passes
// its highest so far by 2% (at most every 100 ms), so the last one shows
// what was live near the peak (docs/endtoend.md). For measuring only; off
// by default.
const memProfileEnv = "FENCECHECK_MEMPROFILE"

func init() {
	dir := os.Getenv(memProfileEnv)
	if dir == "" {
		return
	}
	// A folder per process: a run's children (the reference's nodes) and
	// the `report` after it write beside it, not over it.
	dir = filepath.Join(dir, strconv.Itoa(os.Getpid()))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		fmt.Fprintf(os.Stderr, "fencecheck: %s: %v\n", memProfileEnv, err)
		return
	}
	f, err := os.Create(filepath.Join(dir, "memory.tsv"))
	if err != nil {
		fmt.Fprintf(os.Stderr, "fencecheck: %s: %v\n", memProfileEnv, err)
		return
	}
	go sampleMemory(dir, f)
}

func sampleMemory(dir string, f *os.File) {
	start := time.Now()
	fmt.Fprintf(f, "s\trss_mb\theap_alloc_mb\theap_inuse_mb\theap_sys_mb\theap_released_mb\tsys_mb\tnext_gc_mb\tnum_gc\n")
	var peak uint64
	var wrote time.Time
	for {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		fmt.Fprintf(f, "%.2f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%d\n", time.Since(start).Seconds(), float64(rssBytes())/1e6,
			float64(ms.HeapAlloc)/1e6, float64(ms.HeapInuse)/1e6, float64(ms.HeapSys)/1e6, float64(ms.HeapReleased)/1e6,
			float64(ms.Sys)/1e6, float64(ms.NextGC)/1e6, ms.NumGC)
		if ms.HeapInuse > peak+peak/50 && time.Since(wrote) >= 100*time.Millisecond {
			peak, wrote = ms.HeapInuse, time.Now()
			name := fmt.Sprintf("peak-%07.2f.pb.gz", time.Since(start).Seconds())
			if p, err := os.Create(filepath.Join(dir, name)); err == nil {
				pprof.Lookup("heap").WriteTo(p, 0)
				p.Close()
				fmt.Fprintf(f, "# %s\n", name)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// rssBytes is the process's resident set (VmRSS), 0 where unknown.
func rssBytes() uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			var kb uint64
			fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), &kb)
			return kb * 1024
		}
	}
	return 0
}
