package reports

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/harness/history"
	"github.com/fencecheck/fencecheck/models"
)

// synthHistory writes a workload-like history of about nOps client
// operations: clients loop acquire → write → read → release over a few keys,
// a pause and a restart nemesis alternate, writes during a fault slow down
// and sometimes time out (info, and the client takes a new process number).
// It returns the IDs of two writes to name in a fake anomaly.
func synthHistory(t testing.TB, path string, nOps, clients, keys int, seed uint64) []int64 {
	f, err := os.Create(path)
	require.NoError(t, err)
	defer f.Close()
	w := bufio.NewWriterSize(f, 1<<20)
	enc := json.NewEncoder(w)
	rng := rand.New(rand.NewPCG(seed, 7))

	var index int64
	emit := func(e history.Event) int64 {
		e.Index = index
		index++
		require.NoError(t, enc.Encode(&e))
		return e.Index
	}
	type client struct {
		proc  int
		key   string
		token int
		step  int
		open  bool
		until int64 // busy until (ns)
		call  int64
		f     string
		id    int64
	}
	cs := make([]*client, clients)
	for i := range cs {
		cs[i] = &client{proc: i, key: fmt.Sprintf("r%d", i%keys)}
	}
	nextProc := clients
	tokens := map[string]int{}
	writes := 0
	var named []int64
	faultEvery, faultLen := int64(5e9), int64(1500e6)
	faultOn := false
	var faultID int64
	var now int64
	done := 0
	for done < nOps {
		now += int64(500e3 + rng.IntN(1000e3)) // ~1 ms between events: 10k ops take ~20 s
		phase := now % faultEvery
		if !faultOn && phase >= faultEvery-faultLen {
			faultOn = true
			faultID++
			name := "pause"
			if faultID%2 == 0 {
				name = "restart"
			}
			emit(history.Event{Time: now, Process: -1, Type: history.Info, F: name, Node: "n1",
				Extra: map[string]json.RawMessage{"action": json.RawMessage(`"start"`), "id": json.RawMessage(fmt.Sprint(faultID))}})
		} else if faultOn && phase < faultEvery-faultLen {
			faultOn = false
			name := "pause"
			if faultID%2 == 0 {
				name = "restart"
			}
			emit(history.Event{Time: now, Process: -1, Type: history.Info, F: name,
				Extra: map[string]json.RawMessage{"action": json.RawMessage(`"stop"`), "id": json.RawMessage(fmt.Sprint(faultID))}})
		}
		c := cs[rng.IntN(clients)]
		if c.open {
			if now < c.until {
				continue
			}
			e := history.Event{Time: now, Process: c.proc, F: c.f, Key: c.key, Type: history.Ok}
			switch c.f {
			case history.Acquire:
				tokens[c.key]++
				c.token = tokens[c.key]
				e.Token = fmt.Sprint(c.token)
			case history.Write:
				e.Token = fmt.Sprint(c.token)
				e.Value = fmt.Sprintf("c%d-%d", c.proc, c.step)
				if rng.IntN(10) == 0 {
					e.Type, e.Error, e.HighWater = history.Fail, "stale", fmt.Sprint(c.token+1)
				} else if faultOn && rng.IntN(8) == 0 {
					e.Type, e.Error = history.Info, "timeout"
				}
			case history.Read:
				e.Token, e.Value = fmt.Sprint(c.token), fmt.Sprintf("c%d-%d", c.proc, c.step-1)
			case history.Release:
				e.Token = fmt.Sprint(c.token)
			}
			emit(e)
			c.open = false
			done++
			if e.Type == history.Info {
				c.proc = nextProc
				nextProc++
				c.step = 0
			}
			continue
		}
		c.step++
		c.f = []string{history.Acquire, history.Write, history.Read, history.Release}[c.step%4]
		e := history.Event{Time: now, Process: c.proc, Type: history.Invoke, F: c.f, Key: c.key}
		switch c.f {
		case history.Write:
			e.Token, e.Value = fmt.Sprint(c.token), fmt.Sprintf("c%d-%d", c.proc, c.step)
			writes++
		case history.Release:
			e.Token = fmt.Sprint(c.token)
		}
		c.id = emit(e)
		if c.f == history.Write && len(named) < 2 && writes > nOps/8 {
			named = append(named, c.id)
		}
		c.open = true
		lat := int64(300e3 + rng.IntN(700e3))
		if faultOn {
			lat *= int64(1 + rng.IntN(20))
		}
		c.until = now + lat
	}
	require.NoError(t, w.Flush())
	return named
}

// synthRun writes a run folder with a synthetic history and returns the
// check to report with (invalid, naming two operations).
func synthRun(t testing.TB, dir string, nOps int) (RunInfo, Check) {
	require.NoError(t, os.MkdirAll(filepath.Join(dir, LogsDir), 0o755))
	named := synthHistory(t, filepath.Join(dir, HistoryFile), nOps, 10, 5, 1)
	require.NoError(t, os.WriteFile(filepath.Join(dir, LogsDir, "reference.log"), []byte("reference up\nrestarted from data dir\n"), 0o644))
	start := time.Date(2026, 11, 30, 6, 0, 0, 0, time.UTC)
	info := RunInfo{Target: "memory", Seed: 1, Start: start, End: start.Add(30 * time.Second),
		Command: "fencecheck test --target memory --bug counter-reset --nemesis pause,restart --seed 1 --time 30s",
		Nemeses: []string{"pause", "restart"}, Config: map[string]any{"target": "memory", "bug": "counter-reset", "seed": 1}}
	check := Check{Results: []models.Result{
		{Checker: "direct", Model: "fenced-register", Verdict: models.Invalid, Keys: 5, Ops: nOps, Anomalies: []models.Anomaly{{
			Kind: "stale-write-accepted", Model: "fenced-register", Key: "r1", Ops: named,
			Text: fmt.Sprintf("write %d with an old token was accepted after write %d with a newer one", named[1], named[0]), At: 3e9}}},
		{Checker: "porcupine", Model: "fenced-register", Verdict: models.Invalid, Keys: 5, Ops: nOps},
		{Checker: "porcupine", Model: "issuer", Verdict: models.Valid, Keys: 5, Ops: nOps / 4},
	}, Metrics: map[string]any{"lease-overlap": 3}}
	return info, check
}
