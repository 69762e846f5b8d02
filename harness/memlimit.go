package harness

import (
	"os"
	"time"

	"github.com/fencecheck/fencecheck/analysis"
)

// memoryWatchEvery is how often the run's memory limit follows its
// history's size.
const memoryWatchEvery = time.Second

// limitRunMemory holds the soft memory limit at what a history of the size
// path has so far calls for (analysis.MemoryLimitFor) while the run
// records it: the run's working set (live coverage's operations above
// all) grows with the history, and the collector's headroom with it
// unless limited. stop releases it.
func limitRunMemory(path string) (stop func()) {
	size := func() int64 {
		if st, err := os.Stat(path); err == nil {
			return st.Size()
		}
		return 0
	}
	l := analysis.HoldMemoryLimit(analysis.MemoryLimitFor(size()))
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(memoryWatchEvery)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				l.Set(analysis.MemoryLimitFor(size()))
			}
		}
	}()
	return func() {
		close(done)
		<-finished
		l.Release()
	}
}
