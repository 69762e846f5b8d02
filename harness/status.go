package harness

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/fencecheck/fencecheck/history"
)

// Status is the live line of a long wait outside the main phase (setup:
// image builds and node start-ups; the final phase: the recovery wait and
// the final reads): what the run is at and for how long, so a first etcd
// run's minute of compiling is not a minute of silence. The step is the
// last line logged through Log (a target says what it starts) or what a
// health poll in a context from Context reports. On a terminal the line is
// rewritten every second once a step has lasted a second; elsewhere (CI
// logs) a line is printed every 10 s of a step that lasts.
type Status struct {
	w     io.Writer
	tty   bool
	phase string
	start time.Time

	mu      sync.Mutex
	step    string
	stepAt  time.Time
	shown   int       // the length of the line on the terminal, 0 when none
	printed time.Time // when a non-terminal line was last printed
	stop    chan struct{}
	done    sync.WaitGroup
}

// StartStatus starts the status line of phase on w (nil: no line; every
// method is then a no-op).
func StartStatus(w io.Writer, phase string) *Status {
	s := &Status{w: w, tty: isTerminal(w), phase: phase, start: time.Now(), stepAt: time.Now(), stop: make(chan struct{})}
	if w == nil {
		return s
	}
	s.done.Add(1)
	go func() {
		defer s.done.Done()
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-t.C:
				s.print()
			}
		}
	}()
	return s
}

// Set makes step the wait's current step.
func (s *Status) Set(step string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if step != s.step {
		s.step, s.stepAt, s.printed = step, time.Now(), time.Time{}
	}
}

// End clears the line; the status shows nothing more.
func (s *Status) End() {
	if s.w == nil {
		return
	}
	close(s.stop)
	s.done.Wait()
	s.mu.Lock()
	s.clear()
	s.mu.Unlock()
}

func (s *Status) print() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.step == "" {
		return
	}
	for_ := time.Since(s.stepAt)
	if for_ < time.Second || !s.tty && (for_ < 10*time.Second || time.Since(s.printed) < 10*time.Second) {
		return
	}
	line := history.Printable(fmt.Sprintf("[%s %s] %s (%s)", s.phase, time.Since(s.start).Truncate(time.Second), s.step, for_.Truncate(time.Second)))
	if !s.tty {
		fmt.Fprintln(s.w, line)
		s.printed = time.Now()
		return
	}
	pad := ""
	if n := s.shown - len(line); n > 0 {
		pad = strings.Repeat(" ", n)
	}
	fmt.Fprintf(s.w, "\r%s%s", line, pad)
	s.shown = len(line)
}

// clear removes the line from the terminal (s.mu held).
func (s *Status) clear() {
	if s.shown > 0 {
		fmt.Fprintf(s.w, "\r%s\r", strings.Repeat(" ", s.shown))
		s.shown = 0
	}
}

// Log wraps a log writer: a line written through it first clears the
// status line (so the two never mix on a terminal) and becomes the step.
func (s *Status) Log(w io.Writer) io.Writer {
	if s.w == nil {
		return w
	}
	return statusLog{s, w}
}

type statusLog struct {
	s *Status
	w io.Writer
}

func (l statusLog) Write(p []byte) (int, error) {
	l.s.mu.Lock()
	l.s.clear()
	n, err := l.w.Write(p)
	l.s.mu.Unlock()
	if line := lastLine(p); line != "" {
		l.s.Set(line)
	}
	return n, err
}

func lastLine(p []byte) string {
	lines := bytes.Split(bytes.TrimSpace(p), []byte("\n"))
	return string(bytes.TrimSpace(lines[len(lines)-1]))
}

type statusKey struct{}

// Context returns ctx carrying the status: the health polls under it
// (PollHealth, WaitHealthy) report what they wait for.
func (s *Status) Context(ctx context.Context) context.Context {
	if s.w == nil {
		return ctx
	}
	return context.WithValue(ctx, statusKey{}, s)
}

// statusOf is the status ctx carries, or nil.
func statusOf(ctx context.Context) *Status {
	s, _ := ctx.Value(statusKey{}).(*Status)
	return s
}
