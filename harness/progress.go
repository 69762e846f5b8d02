package harness

import (
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencecheck/fencecheck/history"
)

// progress counts completed client operations by outcome and prints a status
// line every second: elapsed, ops by outcome, faults live. On a terminal it
// rewrites one line; elsewhere (CI logs) it prints a line every few seconds.
type progress struct {
	w              io.Writer
	ok, fail, info atomic.Int64
	start          time.Time
	total          time.Duration
	active         func() []string
	tty            bool
	stop           chan struct{}
	done           sync.WaitGroup
	lastLen        int
	last           string
}

func newProgress(w io.Writer, total time.Duration, active func() []string) *progress {
	return &progress{w: w, start: time.Now(), total: total, active: active, stop: make(chan struct{}), tty: isTerminal(w)}
}

// isTerminal says whether w is a terminal, where a status line is rewritten
// in place.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func (p *progress) observe(e history.Event) {
	if !e.IsClient() {
		return
	}
	switch e.Type {
	case history.Ok:
		p.ok.Add(1)
	case history.Fail:
		p.fail.Add(1)
	case history.Info:
		p.info.Add(1)
	}
}

func (p *progress) run() {
	if p.w == nil {
		return
	}
	p.done.Add(1)
	go func() {
		defer p.done.Done()
		every := time.Second
		if !p.tty {
			every = 5 * time.Second
		}
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-p.stop:
				p.print(true)
				return
			case <-t.C:
				p.print(false)
			}
		}
	}()
}

func (p *progress) line() string {
	el := time.Since(p.start).Truncate(time.Second)
	faults := "none"
	if p.active != nil {
		if a := p.active(); len(a) > 0 {
			sort.Strings(a)
			faults = strings.Join(a, ",")
		}
	}
	return fmt.Sprintf("[%s/%s] ops ok %d, fail %d, info %d; faults: %s",
		el, p.total, p.ok.Load(), p.fail.Load(), p.info.Load(), faults)
}

func (p *progress) print(final bool) {
	l := history.Printable(p.line())
	if p.tty {
		pad := ""
		if n := p.lastLen - len(l); n > 0 {
			pad = strings.Repeat(" ", n)
		}
		p.lastLen = len(l)
		end := ""
		if final {
			end = "\n"
		}
		fmt.Fprintf(p.w, "\r%s%s%s", l, pad, end)
		return
	}
	if l != p.last { // the closing line repeats the last tick when nothing moved
		fmt.Fprintln(p.w, l)
	}
	p.last = l
}

func (p *progress) finish() {
	if p.w == nil {
		return
	}
	close(p.stop)
	p.done.Wait()
}
