package harness

import (
	"sync"
	"time"

	"github.com/fencecheck/fencecheck/analysis"
	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/history"
	"github.com/fencecheck/fencecheck/nemesis"
)

// guided says whether the run draws its faults by the guided schedule
// (nemesis/guide.go): --nemesis-mode, or by default for "all" only, so a
// list someone chose keeps the draws it always had.
func (n Normalized) guided() bool {
	switch n.NemesisMode {
	case nemesis.ModeGuided:
		return true
	case nemesis.ModeRandom:
		return false
	}
	return len(n.Nemeses) == 1 && n.Nemeses[0] == "all"
}

// coverageRefresh is how long a live count is reused: a count copies every
// operation so far, and the conductor asks at every draw.
const coverageRefresh = time.Second

// liveCoverage is the run's coverage counted while it runs, for the guided
// schedule (nemesis.Env.Coverage): the recorder's events go to an
// analysis.CoverageCounter, the same count the report gives afterwards.
// The recorder calls its listeners under its lock, so observe only queues
// an event; a read feeds the queue to the counter and counts, and so does
// a goroutine of its own whenever drainEvents are queued: counts come
// seconds apart on a long run, and the events queued in between (whole
// Events, with their extras) had been a quarter of the run's heap.
type liveCoverage struct {
	mu       sync.Mutex
	pending  []history.Event
	draining bool // a drain is under way (it feeds the queue until it is empty)

	countMu sync.Mutex
	counter *analysis.CoverageCounter
	at      time.Time
	last    map[string]int
	// took is how long the last count took: a count recounts every
	// operation so far, so on a long run counts come at most every 20
	// times that (about 5% of a core), not every second.
	took time.Duration
}

// watchCoverage counts rec's events from now on (call before the history
// begins).
func watchCoverage(rec *history.Recorder, cfg Config, sem checkers.Semantics) (*liveCoverage, error) {
	opts := CheckOptions(cfg, sem)
	opts.Progress, opts.Lenient = nil, true
	c, err := analysis.NewCoverageCounter(opts)
	if err != nil {
		return nil, err
	}
	l := &liveCoverage{counter: c}
	rec.Listen(l.observe)
	return l, nil
}

// drainEvents is how many queued events start a drain.
const drainEvents = 2048

func (l *liveCoverage) observe(e history.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pending = append(l.pending, e)
	if len(l.pending) >= drainEvents && !l.draining {
		l.draining = true
		go l.drain()
	}
}

// drain feeds the queue to the counter until it is empty (after a count
// under way, if any: the events reach the counter in the order recorded).
func (l *liveCoverage) drain() {
	l.countMu.Lock()
	defer l.countMu.Unlock()
	for {
		l.mu.Lock()
		events := l.pending
		l.pending = nil
		if len(events) == 0 {
			l.draining = false
		}
		l.mu.Unlock()
		if len(events) == 0 {
			return
		}
		l.feed(events)
	}
}

// feed adds events to the counter (countMu held).
func (l *liveCoverage) feed(events []history.Event) {
	for _, e := range events {
		l.counter.Add(e) // Lenient: a damaged event is skipped, as Check skips it
	}
}

// read is how many times each situation that applies so far was created,
// by id.
func (l *liveCoverage) read() map[string]int {
	l.countMu.Lock()
	defer l.countMu.Unlock()
	if l.last != nil && time.Since(l.at) < max(coverageRefresh, 20*l.took) {
		return l.last
	}
	begin := time.Now()
	l.mu.Lock()
	events := l.pending
	l.pending = nil
	l.mu.Unlock()
	l.feed(events)
	out := map[string]int{}
	for _, cl := range l.counter.Coverage().Classes {
		for _, s := range cl.Situations {
			if s.Applies() {
				out[s.ID] = s.Count
			}
		}
	}
	l.at, l.last, l.took = time.Now(), out, time.Since(begin)
	return out
}
