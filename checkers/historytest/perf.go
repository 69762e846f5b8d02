package historytest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"runtime/metrics"
	"sync"
	"time"

	"github.com/fencecheck/fencecheck/history"
)

// PerfCase is one history shape of the performance matrix, shared by the
// checkers' benchmarks (go test -bench) and cmd/perfdoc
// (docs/performance.md).
type PerfCase struct {
	Ops           int
	Keys          int
	ClientsPerKey int
	InfoRate      float64
	// Planted: one read returns an overwritten value (a stale read).
	Planted bool
	Seed    uint64
}

func (c PerfCase) String() string {
	v := "valid"
	if c.Planted {
		v = "stale-read"
	}
	return fmt.Sprintf("ops=%d/clients=%d/info=%g%%/%s", c.Ops, c.ClientsPerKey, c.InfoRate*100, v)
}

// PerfMatrix is 10k, 100k and 1M operations at 5, 20 and 50 clients per
// key, 0% and 5% unknown-outcome writes, valid and with one planted stale
// read. Ten keys throughout.
func PerfMatrix() []PerfCase {
	var out []PerfCase
	for _, n := range []int{10_000, 100_000, 1_000_000} {
		for _, c := range []int{5, 20, 50} {
			for _, info := range []float64{0, 0.05} {
				for _, planted := range []bool{false, true} {
					out = append(out, PerfCase{Ops: n, Keys: 10, ClientsPerKey: c, InfoRate: info, Planted: planted, Seed: 1})
				}
			}
		}
	}
	return out
}

// SimulatePerf simulates the case's history, unplanted (see
// SimHistory.PlantStaleRead).
func SimulatePerf(c PerfCase) *SimHistory {
	return Simulate(SimConfig{Seed: c.Seed, Ops: c.Ops, Keys: c.Keys, ClientsPerKey: c.ClientsPerKey,
		InfoRate: c.InfoRate, Tick: 1_000_000, MaxDur: 40, MaxThink: 10, Acquires: true})
}

// WritePerfHistory simulates the case's history and writes it to path as
// JSON Lines, as `fencecheck check` would read it.
func WritePerfHistory(c PerfCase, path string) error {
	h := SimulatePerf(c)
	if c.Planted && !h.PlantStaleRead() {
		return fmt.Errorf("%v: no read to plant a stale value in", c)
	}
	return h.WriteFile(path)
}

// WriteFile writes the history to path as JSON Lines.
func (h *SimHistory) WriteFile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := h.WriteJSONL(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

const heapObjects = "/memory/classes/heap/objects:bytes"

func heapBytes() uint64 {
	s := []metrics.Sample{{Name: heapObjects}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// PeakHeap runs fn once, sampling the Go heap every millisecond, and returns
// the peak above what was live before fn started: what a checker needs on
// top of its input.
func PeakHeap(fn func()) uint64 {
	runtime.GC()
	base := heapBytes()
	peak := base
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				peak = max(peak, heapBytes())
			}
		}
	}()
	fn()
	close(stop)
	wg.Wait()
	return max(peak, heapBytes()) - base
}

// plainEvent is the plain decode's struct: the history schema's fields.
type plainEvent struct {
	Index     int64                      `json:"index"`
	Time      int64                      `json:"time"`
	Process   int                        `json:"process"`
	Type      string                     `json:"type"`
	F         string                     `json:"f"`
	Key       string                     `json:"key"`
	Token     string                     `json:"token"`
	Value     string                     `json:"value"`
	Error     string                     `json:"error"`
	HighWater string                     `json:"high_water"`
	Node      string                     `json:"node"`
	Extra     map[string]json.RawMessage `json:"extra"`
}

// PlainDecode is the baseline the whole check is measured against (issue
// 12): an encoding/json decode of every line of the file at path into a
// struct of the schema's fields, nothing else. It returns the line count.
func PlainDecode(path string) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 64<<10), history.MaxLine)
	n := 0
	for s.Scan() {
		var e plainEvent
		if err := json.Unmarshal(s.Bytes(), &e); err != nil {
			return n, fmt.Errorf("line %d: %w", n+1, err)
		}
		n++
	}
	return n, s.Err()
}
