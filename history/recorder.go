package history

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// Recorder appends events to a history. It assigns each event its index and
// its time (ns since the recorder started, from the monotonic clock) under
// one lock, so index order is time order. Every event is flushed to the file
// before Record returns: a run killed at any point leaves a complete prefix.
type Recorder struct {
	mu     sync.Mutex
	start  time.Time
	next   int64
	w      *bufio.Writer
	f      *os.File
	enc    *json.Encoder
	err    error
	listen []func(Event)
}

// Create opens path for a new history (truncating any old one).
func Create(path string) (*Recorder, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("create history: %w", err)
	}
	r := NewRecorder(f)
	r.f = f
	return r, nil
}

// NewRecorder records into w. Use Create for files.
func NewRecorder(w io.Writer) *Recorder {
	bw := bufio.NewWriterSize(w, 64<<10)
	enc := json.NewEncoder(bw)
	// No HTML escaping: a value of '<' would grow 6x (\u003c) and the
	// history is no web page. Control bytes still grow 6x (\u0001); MaxLine
	// allows for that.
	enc.SetEscapeHTML(false)
	return &Recorder{start: time.Now(), w: bw, enc: enc}
}

// Start is the instant time 0 of this history.
func (r *Recorder) Start() time.Time { return r.start }

// Since is the history time of instant t.
func (r *Recorder) Since(t time.Time) int64 { return int64(t.Sub(r.start)) }

// Listen registers fn to see every event after it is written (for progress
// displays). Call before recording starts.
func (r *Recorder) Listen(fn func(Event)) { r.listen = append(r.listen, fn) }

// Record stamps e with the next index and the current time, writes and
// flushes it, and returns the stamped event.
func (r *Recorder) Record(e Event) Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.write(e, int64(time.Since(r.start)))
}

// write stamps e with the next index and time t and writes it; r.mu is held.
func (r *Recorder) write(e Event, t int64) Event {
	e.Index = r.next
	r.next++
	e.Time = t
	if r.err == nil {
		if err := r.enc.Encode(&e); err != nil {
			r.err = err
		} else if err := r.w.Flush(); err != nil {
			r.err = err
		}
	}
	for _, fn := range r.listen {
		fn(e)
	}
	return e
}

// Begin records e as the history's first event, at time 0: the history's
// clock starts now, so the setup before it (proxies, clients) is not
// counted in any time. It fails once an event has been recorded.
func (r *Recorder) Begin(e Event) (Event, error) {
	r.mu.Lock()
	if r.next > 0 {
		defer r.mu.Unlock()
		return e, fmt.Errorf("history: Begin after %d events", r.next)
	}
	r.start = time.Now()
	defer r.mu.Unlock()
	return r.write(e, 0), nil
}

// Err is the first write error, if any. Events after a write error are still
// stamped and passed to listeners but are not in the file.
func (r *Recorder) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// Close flushes, syncs and closes the file (if the recorder owns one).
func (r *Recorder) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.w.Flush(); err != nil && r.err == nil {
		r.err = err
	}
	if r.f != nil {
		if err := r.f.Sync(); err != nil && r.err == nil {
			r.err = err
		}
		if err := r.f.Close(); err != nil && r.err == nil {
			r.err = err
		}
		r.f = nil
	}
	return r.err
}
