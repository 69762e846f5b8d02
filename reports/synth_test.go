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

	"github.com/fencecheck/fencecheck/history"
	"github.com/fencecheck/fencecheck/models"
)

// synthHistory writes a workload-like history of about nOps client
// operations: clients loop acquire → write → read → release over a few keys,
// a pause and a restart nemesis alternate, writes during a fault slow down
// and sometimes time out (info, and the client takes a new process number).
// With wipe, the first restart loses every counter and high-water mark
// (the "resource forgets" bug) and the result names the stale write that
// the resource then accepted, as a checker would.
func synthHistory(t testing.TB, path string, nOps, clients, keys int, seed uint64, wipe bool) planted {
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
		// One client per key (keys <= clients share): the lock serialises
		// writers, so the history is valid unless a test says otherwise.
		cs[i] = &client{proc: i, key: fmt.Sprintf("r%d", i%keys), step: -1}
	}
	nextProc := clients
	tokens := map[string]int{}
	lastVal, lastTok := map[string]string{}, map[string]int{}
	type write struct {
		id, at int64
		token  int
		value  string
	}
	lastWrite := map[string]write{}
	var p planted
	wiped := false
	faultEvery, faultLen := int64(5e9), int64(1500e6)
	faultOn := false
	var faultID int64
	var now int64
	done := 0
	for done < nOps {
		now += int64(500e3 + rng.IntN(1000e3)) // ~1 ms between events: 10k ops take ~20 s
		phase := now % faultEvery
		if faultOn != (phase >= faultEvery-faultLen) {
			faultOn = !faultOn
			action := "stop"
			if faultOn {
				faultID++
				action = "start"
			}
			name := "pause"
			if faultID%2 == 0 {
				name = "restart"
			}
			extra := map[string]json.RawMessage{"action": json.RawMessage(`"` + action + `"`), "id": json.RawMessage(fmt.Sprint(faultID))}
			if name == "restart" && faultOn {
				extra["wipe"] = json.RawMessage(fmt.Sprint(wipe))
			}
			emit(history.Event{Time: now, Process: -1, Type: history.Info, F: name, Node: "n1", Extra: extra})
			if wipe && !wiped && name == "restart" && !faultOn {
				wiped = true
				p.before = lastWrite["r1"]
				tokens, lastVal, lastTok = map[string]int{}, map[string]string{}, map[string]int{}
			}
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
				if faultOn && rng.IntN(8) == 0 {
					e.Type, e.Error = history.Info, "timeout"
				} else if c.token <= lastTok[c.key] {
					e.Type, e.Error, e.HighWater = history.Fail, "stale", fmt.Sprint(lastTok[c.key])
				} else {
					lastVal[c.key], lastTok[c.key] = e.Value, c.token
					w := write{id: c.id, at: now, token: c.token, value: e.Value}
					lastWrite[c.key] = w
					if wiped && c.key == "r1" && p.after.value == "" && c.token <= p.before.token {
						p.after = w
					}
				}
			case history.Read:
				if v, ok := lastVal[c.key]; ok {
					e.Token, e.Value = fmt.Sprint(lastTok[c.key]), v
				}
			case history.Release:
				e.Token = fmt.Sprint(c.token)
			}
			emit(e)
			c.open = false
			done++
			if e.Type == history.Info {
				c.proc = nextProc
				nextProc++
				c.step = -1
			}
			continue
		}
		c.step++
		c.f = []string{history.Acquire, history.Write, history.Read, history.Release}[c.step%4]
		e := history.Event{Time: now, Process: c.proc, Type: history.Invoke, F: c.f, Key: c.key}
		switch c.f {
		case history.Write:
			e.Token, e.Value = fmt.Sprint(c.token), fmt.Sprintf("c%d-%d", c.proc, c.step)
		case history.Release:
			e.Token = fmt.Sprint(c.token)
		}
		c.id = emit(e)
		c.open = true
		lat := int64(300e3 + rng.IntN(700e3))
		if faultOn {
			lat *= int64(1 + rng.IntN(20))
		}
		c.until = now + lat
	}
	require.NoError(t, w.Flush())
	return p
}

// planted is the stale write a wiping restart let through, and the write
// before the restart whose token it did not exceed.
type planted struct {
	before, after struct {
		id, at int64
		token  int
		value  string
	}
}

// synthRun writes a run folder with a synthetic history and returns the
// run info and the check a checker would give: with wipe, invalid, naming
// the stale write the wiped resource accepted; otherwise valid.
func synthRun(t testing.TB, dir string, nOps int, wipe bool) (RunInfo, Check) {
	require.NoError(t, os.MkdirAll(filepath.Join(dir, LogsDir), 0o755))
	p := synthHistory(t, filepath.Join(dir, HistoryFile), nOps, 10, 5, 1, wipe)
	require.NoError(t, os.WriteFile(filepath.Join(dir, LogsDir, "reference.log"),
		[]byte("listening on 127.0.0.1:7001\nkilled (SIGKILL)\nstarting with an empty data dir\nlistening on 127.0.0.1:7001\n"), 0o644))
	start := time.Date(2026, 11, 30, 6, 0, 0, 0, time.UTC)
	info := RunInfo{Target: "memory", Seed: 1, Start: start, End: start.Add(30 * time.Second),
		Command: "fencecheck test --target memory --bug resource-forgets --nemesis pause,restart --seed 1 --time 30s",
		Nemeses: []string{"pause", "restart"}, Config: map[string]any{"target": "memory", "bug": "resource-forgets", "seed": 1}}
	results := []models.Result{
		{Checker: "direct", Model: "fenced-register", Verdict: models.Valid, Keys: 5, Ops: nOps / 2},
		{Checker: "porcupine", Model: "fenced-register", Verdict: models.Valid, Keys: 5, Ops: nOps / 2},
		{Checker: "porcupine", Model: "issuer", Verdict: models.Valid, Keys: 5, Ops: nOps / 4},
	}
	check := Check{Results: results, Metrics: map[string]any{"lease_overlaps": 0}}
	if wipe {
		require.NotEmpty(t, p.after.value, "the history is too short to plant a stale write")
		results[0].Verdict, results[1].Verdict = models.Invalid, models.Invalid
		results[0].Anomalies = []models.Anomaly{{Kind: "stale-write-accepted", Model: "fenced-register", Key: "r1",
			Ops: []int64{p.after.id, p.before.id}, At: p.after.at,
			Text: fmt.Sprintf("write %s with token %d accepted at %.2f s after write %s with token %d was accepted at %.2f s",
				p.after.value, p.after.token, float64(p.after.at)/1e9, p.before.value, p.before.token, float64(p.before.at)/1e9)}}
		results[1].Anomalies = []models.Anomaly{{Kind: "not-linearizable", Model: "fenced-register", Key: "r1",
			Ops: []int64{p.after.id}, At: p.after.at, Text: "key r1: no order of its operations explains the history (see porcupine/fenced-register-r1.html)"}}
	}
	return info, check
}
