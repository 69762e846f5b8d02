package analysis

import (
	"errors"
	"io"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/checkers/overlap"
	"github.com/fencecheck/fencecheck/history"
)

// The check on more than one core. Reading a history (scanning and
// decoding its lines) costs about as much as pairing and recording what it
// says, so one goroutine reads ahead while another adds; once every event
// is in, the derivations that only read the sorted operations (each
// checker, coverage, counts, latencies, the lease summary) run at once.
// Every result goes to its own place and is assembled in a fixed order, so
// the answer is the same, to the byte, on one core or many
// (TestParallelCheckIsSequential).

// workers is how many goroutines an analysis with opts keeps busy.
func workers(opts Options) int {
	if opts.Workers > 0 {
		return opts.Workers
	}
	return runtime.GOMAXPROCS(0)
}

// runTasks runs every task once on up to workers goroutines, taking them
// in order (so the longest should come first), and returns when all are
// done. With one worker they run in order on the caller's goroutine.
func runTasks(workers int, tasks ...func()) {
	if workers <= 1 || len(tasks) <= 1 {
		for _, t := range tasks {
			t()
		}
		return
	}
	var next atomic.Int32
	var wg sync.WaitGroup
	for range min(workers, len(tasks)) {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < len(tasks); i = int(next.Add(1)) - 1 {
				tasks[i]()
			}
		})
	}
	wg.Wait()
}

// eventSource is where checkReader takes its events: the reader itself, or
// a goroutine reading ahead of it (readAhead). next is Reader.Next; line is
// the line of the last event or error it returned.
type eventSource interface {
	next() (history.Event, error)
	line() int
	bytesRead() int64
	truncated() bool
	stop()
}

// readInline is the reader on the caller's goroutine.
type readInline struct{ rd *history.Reader }

func (d readInline) next() (history.Event, error) { return d.rd.Next() }
func (d readInline) line() int                    { return d.rd.Line() }
func (d readInline) bytesRead() int64             { return d.rd.BytesRead }
func (d readInline) truncated() bool              { return d.rd.Truncated }
func (d readInline) stop()                        {}

// readAhead reads and decodes events on its own goroutine, in batches
// (one channel operation per batch, not per event), while the caller
// pairs and records the previous ones. Batches are reused: a few are in
// flight at a time whatever the history's size.
type readAhead struct {
	full, free chan *eventBatch
	done       chan struct{}
	wg         sync.WaitGroup
	cur        *eventBatch
	at         int // next event of cur; len(cur.events): its err is next
	ln         int
	last       *eventBatch // the batch that ended the history (its err is final)
}

// eventBatch is a run of events as the reader returned them, and what it
// returned after them (nil when the batch is merely full).
type eventBatch struct {
	events    []history.Event
	lines     []int
	err       error
	errLine   int
	read      int64
	truncated bool
}

const (
	eventsPerBatch  = 512
	batchesInFlight = 4
)

func newReadAhead(rd *history.Reader) *readAhead {
	r := &readAhead{full: make(chan *eventBatch, batchesInFlight), free: make(chan *eventBatch, batchesInFlight),
		done: make(chan struct{})}
	for range batchesInFlight {
		r.free <- &eventBatch{events: make([]history.Event, 0, eventsPerBatch), lines: make([]int, 0, eventsPerBatch)}
	}
	r.wg.Go(func() { r.read(rd) })
	return r
}

// read fills batches until the history ends, an error other than a
// damaged line stops the reader, or the caller stops.
func (r *readAhead) read(rd *history.Reader) {
	defer close(r.full)
	for {
		var b *eventBatch
		select {
		case b = <-r.free:
		case <-r.done:
			return
		}
		b.events, b.lines, b.err = b.events[:0], b.lines[:0], nil
		for len(b.events) < eventsPerBatch {
			e, err := rd.Next()
			if err != nil {
				b.err, b.errLine = err, rd.Line()
				break
			}
			b.events = append(b.events, e)
			b.lines = append(b.lines, rd.Line())
		}
		b.read, b.truncated = rd.BytesRead, rd.Truncated
		select {
		case r.full <- b:
		case <-r.done:
			return
		}
		var pe *history.ParseError
		if b.err != nil && !errors.As(b.err, &pe) {
			return // io.EOF, or the reader cannot go on
		}
	}
}

func (r *readAhead) next() (history.Event, error) {
	for {
		if b := r.cur; b != nil {
			if r.at < len(b.events) {
				e := b.events[r.at]
				r.ln = b.lines[r.at]
				r.at++
				return e, nil
			}
			if r.at == len(b.events) && b.err != nil {
				r.at++
				r.ln = b.errLine
				return history.Event{}, b.err
			}
			if b == r.last {
				return history.Event{}, b.err
			}
			r.free <- b
			r.cur = nil
		}
		b, ok := <-r.full
		if !ok {
			return history.Event{}, io.EOF // not reached: the last batch carries the reader's end
		}
		r.cur, r.at = b, 0
		var pe *history.ParseError
		if b.err != nil && !errors.As(b.err, &pe) {
			r.last = b
		}
	}
}

func (r *readAhead) line() int { return r.ln }

func (r *readAhead) bytesRead() int64 {
	if r.cur == nil {
		return 0
	}
	return r.cur.read
}

func (r *readAhead) truncated() bool { return r.cur != nil && r.cur.truncated }

// stop ends the reading goroutine (the caller may stop early: an error,
// an interrupted check) and waits for it, so nothing reads the file after
// the check returns.
func (r *readAhead) stop() {
	close(r.done)
	r.wg.Wait()
}

// leaseFeed runs the lease-overlap finder on a goroutine of its own, a
// third stage after reading and pairing: it gets every event with a copy
// of the operation the event completed, in batches, and makes the summary
// as soon as the history has been read, while the operations are sorted
// and checked.
type leaseFeed struct {
	finder     *overlap.Finder
	full, free chan *leaseBatch
	cur        *leaseBatch
	abandoned  atomic.Bool
	done       chan struct{}
	// Set by the goroutine before done is closed.
	rep overlap.Report
	err error
}

// leaseBatch is a run of events and the operations they completed
// (completed[i] false: none).
type leaseBatch struct {
	events    []history.Event
	ops       []history.Op
	completed []bool
}

func newLeaseFeed(finder *overlap.Finder) *leaseFeed {
	f := &leaseFeed{finder: finder, full: make(chan *leaseBatch, batchesInFlight),
		free: make(chan *leaseBatch, batchesInFlight), done: make(chan struct{})}
	for range batchesInFlight {
		f.free <- &leaseBatch{events: make([]history.Event, 0, eventsPerBatch), ops: make([]history.Op, 0, eventsPerBatch),
			completed: make([]bool, 0, eventsPerBatch)}
	}
	f.cur = <-f.free
	go f.run()
	return f
}

// add is Finder.Add, later: op is copied, as the pairer reuses it.
func (f *leaseFeed) add(e history.Event, op *history.Op) {
	b := f.cur
	b.events = append(b.events, e)
	if op != nil {
		b.ops = append(b.ops, *op)
	} else {
		b.ops = append(b.ops, history.Op{})
	}
	b.completed = append(b.completed, op != nil)
	if len(b.events) == eventsPerBatch {
		f.full <- b
		f.cur = <-f.free
		f.cur.events, f.cur.ops, f.cur.completed = f.cur.events[:0], f.cur.ops[:0], f.cur.completed[:0]
	}
}

// close says the history has ended: the summary is made next.
func (f *leaseFeed) close() {
	if f.cur != nil {
		f.full <- f.cur
		f.cur = nil
		close(f.full)
	}
}

// result waits for the summary, or the finder's first error.
func (f *leaseFeed) result() (overlap.Report, error) {
	f.close()
	<-f.done
	return f.rep, f.err
}

// stop abandons the feed (the check stopped early) and waits for it.
func (f *leaseFeed) stop() {
	f.abandoned.Store(true)
	f.close()
	<-f.done
}

func (f *leaseFeed) run() {
	defer close(f.done)
	for b := range f.full {
		for i := range b.events {
			if f.err != nil || f.abandoned.Load() {
				break
			}
			var op *history.Op
			if b.completed[i] {
				op = &b.ops[i]
			}
			f.err = f.finder.Add(b.events[i], op)
		}
		f.free <- b
	}
	if f.err == nil && !f.abandoned.Load() {
		// Only the earliest overlaps are listed (as anomalies); a soak has
		// about one per lease.
		f.rep = f.finder.Summary(checkers.MaxAnomaliesPerKind)
	}
	f.finder = nil // its leases are garbage from here
}
