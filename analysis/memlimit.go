package analysis

import (
	"os"
	"runtime/debug"
	"sync"
)

// The garbage collector's headroom. At Go's default (GOGC 100) the heap
// grows to twice what was live after the last collection before the next
// one: a check whose working set peaks at 150 MB touches up to 300 MB of
// memory, and the resident set keeps that high-water mark. A soft limit
// sized from the history (debug.SetMemoryLimit) makes the collector run
// sooner once the heap nears it, so the peak stays close to the working
// set (docs/endtoend.md). It is soft: where the working set is larger the
// collector runs more often (at most half the CPU, the runtime's own cap)
// and the heap grows past it; nothing fails.
const (
	// MemoryFloor is the least limit set: below it the collector's
	// extra work buys nothing worth having.
	MemoryFloor = 24 << 20
	// MemoryPerHistoryByte is the limit per byte of history.jsonl. The
	// working sets of a run, and of its check and report, were 0.3 to
	// 0.45 of it on the reference's 10-minute runs, and the limit 0.4; the
	// queued events of live coverage, Porcupine's copies of every key at
	// once, the report's 16-byte layout and its latency samples cut, their
	// peaks (the run's last counts, the check's checkers) are about 0.3 to
	// 0.35 of it, and the limit 0.3: the collector works harder only near
	// those peaks, and lower limits saved no more (docs/endtoend.md).
	MemoryPerHistoryByte = 0.3
)

// MemoryLimitFor is the soft memory limit for a history of historyBytes.
func MemoryLimitFor(historyBytes int64) int64 {
	return MemoryFloor + int64(float64(max(historyBytes, 0))*MemoryPerHistoryByte)
}

// MemoryLimit is one holder's share of the process's soft memory limit:
// while any is held, the limit is the sum of the holders' (runs and
// checks in one process each need their own), never above the limit in
// force before the first; once the last is released that limit is back. A
// GOMEMLIMIT from the environment is the user's choice: then holding
// changes nothing.
type MemoryLimit struct{ bytes int64 }

var limits struct {
	mu   sync.Mutex
	held map[*MemoryLimit]bool
	base int64 // the limit before the first holder
}

// HoldMemoryLimit starts a share of bytes.
func HoldMemoryLimit(bytes int64) *MemoryLimit {
	l := &MemoryLimit{bytes: bytes}
	limits.mu.Lock()
	defer limits.mu.Unlock()
	if len(limits.held) == 0 {
		limits.base = debug.SetMemoryLimit(-1)
		limits.held = map[*MemoryLimit]bool{}
	}
	limits.held[l] = true
	applyLimits()
	return l
}

// Set changes the share to bytes.
func (l *MemoryLimit) Set(bytes int64) {
	limits.mu.Lock()
	defer limits.mu.Unlock()
	if limits.held[l] {
		l.bytes = bytes
		applyLimits()
	}
}

// Release ends the share.
func (l *MemoryLimit) Release() {
	limits.mu.Lock()
	defer limits.mu.Unlock()
	if !limits.held[l] {
		return
	}
	delete(limits.held, l)
	if len(limits.held) == 0 {
		if os.Getenv("GOMEMLIMIT") == "" {
			debug.SetMemoryLimit(limits.base)
		}
		return
	}
	applyLimits()
}

func applyLimits() {
	if os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	var sum int64
	for l := range limits.held {
		sum += l.bytes
	}
	debug.SetMemoryLimit(min(sum, limits.base))
}

// LimitMemory holds the soft memory limit of a history of historyBytes
// (MemoryLimitFor) for its check and report; restore releases it.
func LimitMemory(historyBytes int64) (restore func()) {
	return HoldMemoryLimit(MemoryLimitFor(historyBytes)).Release
}

// ReleaseMemory collects what is garbage now and gives its pages back to
// the system: between a run and its check, whose structures are
// unreachable by then, so the check starts from a small heap.
func ReleaseMemory() { debug.FreeOSMemory() }
