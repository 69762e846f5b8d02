package fencing

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencecheck/fencecheck/durable"
)

// Clock is where a server reads wall time (lease expiry, wall-clock tokens).
// It is injected so the clock nemesis can step a node's time without
// touching the machine's clock.
type Clock interface {
	Now() time.Time
}

// SystemClock is real time.
var SystemClock Clock = systemClock{}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// OffsetClock is real time shifted by an offset that can change at run time
// (the embedded targets' clock nemesis). The zero value is real time. Safe
// for concurrent use.
type OffsetClock struct {
	offset atomic.Int64
}

// NewOffsetClock returns a clock at real time.
func NewOffsetClock() *OffsetClock { return &OffsetClock{} }

// Now is real time plus the offset. Like an NTP step, the shift applies to
// every later reading at once, so a forward step expires leases early and a
// backward step makes time repeat.
func (c *OffsetClock) Now() time.Time { return time.Now().Add(c.Offset()) }

// Set makes d the offset from real time (0 heals).
func (c *OffsetClock) Set(d time.Duration) { c.offset.Store(int64(d)) }

// Offset is the current offset from real time.
func (c *OffsetClock) Offset() time.Duration { return time.Duration(c.offset.Load()) }

// ClockFileEnv names the environment variable that holds the offset file's
// path; the C skew library (targets/redis/skew) reads the same variable and
// the same format, so one nemesis drives both.
const ClockFileEnv = "FENCECHECK_CLOCK_FILE"

// ClockFileRefresh bounds how stale a FileClock's offset may be; a few ms is
// far below any lease the tests use and keeps the file out of the hot path.
const ClockFileRefresh = 5 * time.Millisecond

// FileClock is real time shifted by an offset read from a file: how the
// clock nemesis skews a containerised Go server, by rewriting the file on a
// bind mount (atomically, by rename). The file holds a decimal number of
// nanoseconds, may be negative, surrounded by optional whitespace; a Go
// duration ("-90s") is accepted too. No file means no offset; a file that
// does not parse (caught half-written) keeps the previous offset.
type FileClock struct {
	path    string
	offset  atomic.Int64
	mu      sync.Mutex // one reader of the file at a time
	nextRd  atomic.Int64
	refresh time.Duration
}

// FileOffsetClock returns a clock that follows the offset in path.
func FileOffsetClock(path string) *FileClock {
	c := &FileClock{path: path, refresh: ClockFileRefresh}
	c.read(time.Now())
	return c
}

// Now is real time plus the file's offset (re-read at most every few ms).
func (c *FileClock) Now() time.Time {
	now := time.Now()
	if now.UnixNano() >= c.nextRd.Load() && c.mu.TryLock() {
		c.read(now)
		c.mu.Unlock()
	}
	return now.Add(time.Duration(c.offset.Load()))
}

// Offset is the offset in force.
func (c *FileClock) Offset() time.Duration { return time.Duration(c.offset.Load()) }

func (c *FileClock) read(now time.Time) {
	c.nextRd.Store(now.Add(c.refresh).UnixNano())
	b, err := os.ReadFile(c.path)
	if err != nil {
		if os.IsNotExist(err) {
			c.offset.Store(0)
		}
		return
	}
	if d, ok := ParseClockOffset(string(b)); ok {
		c.offset.Store(int64(d))
	}
}

// ParseClockOffset reads an offset file's content: decimal nanoseconds
// (optionally signed) or a Go duration, with surrounding whitespace.
func ParseClockOffset(s string) (time.Duration, bool) {
	s = strings.TrimSpace(s)
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return time.Duration(n), true
	}
	if d, err := time.ParseDuration(s); err == nil {
		return d, true
	}
	return 0, false
}

// WriteClockOffset sets the offset in path atomically (temp file and
// rename), in the decimal-nanoseconds form every reader understands.
func WriteClockOffset(path string, d time.Duration) error {
	// Atomic, so a reader never sees half a number; readable by a container
	// process under any uid.
	if err := durable.WriteFile(path, []byte(strconv.FormatInt(int64(d), 10)+"\n"), 0o644); err != nil {
		return fmt.Errorf("writing clock offset %s: %w", path, err)
	}
	return nil
}
