//go:build linux && amd64

package timewarp

import (
	"context"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/fencecheck/fencecheck/fencing"
)

// What a clock fault costs, measured on real processes:
//
//	go test -run '^$' -bench . ./nemesis/timewarp
//
// BenchmarkInject is the setup cost per process (every thread stopped,
// two pages mapped, the vDSO patched); BenchmarkSetOffset what every later
// step or strobe costs; BenchmarkFaultSeen the time from a change until
// the process's own clock read shows it (p50 and max over the iterations).

func probeCmd(b *testing.B, name string, env ...string) *exec.Cmd {
	dir := builds(b)
	cmd := exec.Command(filepath.Join(dir, name))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Env = append(cmd.Environ(), env...)
	return cmd
}

func BenchmarkInject(b *testing.B) {
	for _, name := range []string{"goprobe-static", "cprobe"} {
		b.Run(name, func(b *testing.B) {
			threads := 0
			b.StopTimer()
			for i := 0; i < b.N; i++ {
				pr, stop := startCmdStop(b, probeCmd(b, name))
				tids, err := threadIDs(pr.pid())
				require.NoError(b, err)
				threads = len(tids)
				b.StartTimer()
				p, err := Inject(pr.pid(), Options{})
				b.StopTimer()
				require.NoError(b, err)
				p.Close()
				stop()
			}
			b.ReportMetric(float64(threads), "threads")
		})
	}
}

func BenchmarkSetOffset(b *testing.B) {
	pr, stop := startCmdStop(b, probeCmd(b, "goprobe-static"))
	defer stop()
	p, err := Inject(pr.pid(), Options{})
	require.NoError(b, err)
	defer p.Close()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := p.SetOffset(time.Duration(i%2) * time.Second); err != nil {
			b.Fatal(err)
		}
	}
}

func monotonicNow() int64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// faultSeen measures, b.N times, how long after set(10 s) the probe's own
// wall clock shows the step.
func faultSeen(b *testing.B, pr *probe, set func(time.Duration), settle time.Duration) {
	var lat []float64
	b.StopTimer()
	for i := 0; i < b.N; i++ {
		_, err := io.WriteString(pr.in, "watch\n")
		require.NoError(b, err)
		require.True(b, pr.out.Scan())
		require.Equal(b, "armed", pr.out.Text())
		time.Sleep(time.Millisecond) // the probe has taken its base reading
		b.StartTimer()
		t0 := monotonicNow()
		set(10 * time.Second)
		require.True(b, pr.out.Scan())
		b.StopTimer()
		seen, err := strconv.ParseInt(strings.TrimPrefix(pr.out.Text(), "seen "), 10, 64)
		require.NoError(b, err, "probe said %q", pr.out.Text())
		lat = append(lat, float64(seen-t0))
		set(0)
		time.Sleep(settle)
	}
	slices.Sort(lat)
	b.ReportMetric(lat[len(lat)/2], "p50-ns-to-seen")
	b.ReportMetric(lat[len(lat)-1], "max-ns-to-seen")
}

func BenchmarkFaultSeen(b *testing.B) {
	patched := func(name string) func(b *testing.B) {
		return func(b *testing.B) {
			pr, stop := startCmdStop(b, probeCmd(b, name))
			defer stop()
			p, err := Inject(pr.pid(), Options{})
			require.NoError(b, err)
			defer p.Close()
			faultSeen(b, pr, func(d time.Duration) { require.NoError(b, p.SetOffset(d)) }, time.Millisecond)
		}
	}
	b.Run("vdso-patch/static-go", patched("goprobe-static"))
	b.Run("vdso-patch/c", patched("cprobe"))
	b.Run("preload/c", func(b *testing.B) {
		lib, err := Preload(context.Background())
		require.NoError(b, err)
		file := filepath.Join(b.TempDir(), "offset")
		require.NoError(b, fencing.WriteClockOffset(file, 0))
		pr, stop := startCmdStop(b, probeCmd(b, "cprobe", PreloadEnv(nil, lib, file)...))
		defer stop()
		// The library re-reads its file every 5 ms (its default).
		faultSeen(b, pr, func(d time.Duration) { require.NoError(b, fencing.WriteClockOffset(file, d)) }, 20*time.Millisecond)
	})
}
