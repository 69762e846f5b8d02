// goprobe reports its own clocks, one line per command read on stdin:
//
//	now        -> "<wall ns> <monotonic ns since start>"
//	libc       -> the same, read through libc (cgo builds only)
//	sleep MS   -> sleeps MS ms and a timer of MS ms, then "<monotonic ns slept> <wall ns slept>"
//
// With -busy N, N goroutines read the wall clock in a loop meanwhile, so a
// patch lands while threads are inside the vDSO.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

var libcNow func() int64

func main() {
	busy := flag.Int("busy", 0, "goroutines reading the clock in a loop")
	flag.Parse()
	start := time.Now()
	for i := 0; i < *busy; i++ {
		go func() {
			for {
				_ = time.Now()
			}
		}()
	}
	in := bufio.NewScanner(os.Stdin)
	fmt.Println("ready")
	for in.Scan() {
		f := strings.Fields(in.Text())
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "now":
			fmt.Println(time.Now().UnixNano(), time.Since(start).Nanoseconds())
		case "libc":
			if libcNow == nil {
				fmt.Println("error no cgo")
				continue
			}
			fmt.Println(libcNow(), time.Since(start).Nanoseconds())
		case "sleep":
			ms, _ := strconv.Atoi(f[1])
			d := time.Duration(ms) * time.Millisecond
			t0 := time.Now()
			time.Sleep(d)
			<-time.After(d)
			tm := time.NewTimer(d)
			<-tm.C
			fmt.Println(time.Since(t0).Nanoseconds(), time.Now().Round(0).Sub(t0.Round(0)).Nanoseconds())
		default:
			fmt.Println("error unknown command")
		}
	}
}
