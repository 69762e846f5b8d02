// goprobe reports its own clocks, one line per command read on stdin:
//
//	now        -> "<wall ns> <CLOCK_MONOTONIC ns>" (the monotonic clock is the
//	              machine's, so a caller compares the pair with its own pair,
//	              however long the answer took)
//	libc       -> the same, the wall clock read through libc (cgo builds only)
//	sleep MS   -> sleeps MS ms and a timer of MS ms, then "<monotonic ns slept> <wall ns slept>"
//	watch      -> "armed", then reads the wall clock in a loop until it jumps
//	              by more than 500 ms against the monotonic clock, and says
//	              "seen <CLOCK_MONOTONIC ns>" (comparable across processes)
//
// With -busy N, N goroutines read the wall clock in a loop meanwhile, so a
// patch lands while threads are inside the vDSO. With -http ADDR it answers
// HTTP instead (GET /now, GET /libc, GET /sleep?ms=MS, and GET /v1/health for a
// harness that waits for it). With -exec-after D it first waits D and execs
// itself without that flag, as a launcher (runc's init, a shell's exec)
// becomes the program a moment after its process started.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

var libcNow func() int64

func main() {
	busy := flag.Int("busy", 0, "goroutines reading the clock in a loop")
	addr := flag.String("http", "", "answer HTTP on this address instead of stdin")
	execAfter := flag.Duration("exec-after", 0, "wait this long, then exec this program again without the flag")
	flag.Parse()
	if *execAfter > 0 {
		time.Sleep(*execAfter)
		var args []string
		for _, a := range os.Args {
			if !strings.HasPrefix(a, "-exec-after") {
				args = append(args, a)
			}
		}
		fmt.Fprintln(os.Stderr, unix.Exec("/proc/self/exe", args, os.Environ()))
		os.Exit(1)
	}
	for i := 0; i < *busy; i++ {
		go func() {
			for {
				_ = time.Now()
			}
		}()
	}
	if *addr != "" {
		http.HandleFunc("/v1/health", func(w http.ResponseWriter, r *http.Request) {})
		http.HandleFunc("/now", func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintln(w, answer("now"))
		})
		http.HandleFunc("/libc", func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintln(w, answer("libc"))
		})
		http.HandleFunc("/sleep", func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintln(w, answer("sleep "+r.URL.Query().Get("ms")))
		})
		fmt.Fprintln(os.Stderr, http.ListenAndServe(*addr, nil))
		os.Exit(1)
	}
	in := bufio.NewScanner(os.Stdin)
	fmt.Println("ready")
	for in.Scan() {
		if strings.TrimSpace(in.Text()) != "" {
			fmt.Println(answer(in.Text()))
		}
	}
}

func monotonic() int64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

func answer(cmd string) string {
	f := strings.Fields(cmd)
	switch {
	case f[0] == "now":
		return fmt.Sprint(time.Now().UnixNano(), " ", monotonic())
	case f[0] == "libc" && libcNow != nil:
		return fmt.Sprint(libcNow(), " ", monotonic())
	case f[0] == "watch":
		fmt.Println("armed")
		base := time.Now()
		for {
			now := time.Now()
			if d := now.Round(0).Sub(base.Round(0)) - now.Sub(base); d > 500*time.Millisecond || d < -500*time.Millisecond {
				return fmt.Sprint("seen ", monotonic())
			}
		}
	case f[0] == "sleep" && len(f) == 2:
		ms, _ := strconv.Atoi(f[1])
		d := time.Duration(ms) * time.Millisecond
		t0 := time.Now()
		time.Sleep(d)
		<-time.After(d)
		tm := time.NewTimer(d)
		<-tm.C
		return fmt.Sprint(time.Since(t0).Nanoseconds(), " ", time.Now().Round(0).Sub(t0.Round(0)).Nanoseconds())
	}
	return "error unknown command"
}
