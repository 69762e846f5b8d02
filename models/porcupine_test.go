package models

import (
	"bytes"
	"context"
	"fmt"
	"math/rand"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencecheck/fencecheck/history"
	"github.com/fencecheck/fencecheck/models/historytest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// randomKeyHistory is a small random history on one key and one lock, with
// every outcome, info writes, equal tokens, missing and malformed tokens,
// reads of real and made-up values: mostly non-linearizable, often not.
//
// n operations are invoked within span ms; a long span leaves quiescent
// moments where keys are cut into segments.
func randomKeyHistory(rng *rand.Rand, n int, span int) []history.Event {
	b := historytest.New()
	type written struct{ value, token string }
	var ws []written
	for i := 0; i < n; i++ {
		call := int64(rng.Intn(span))
		ret := call + 1 + int64(rng.Intn(40))
		switch r := rng.Intn(10); {
		case r < 3 && len(ws) > 0:
			w := ws[rng.Intn(len(ws))]
			switch rng.Intn(6) {
			case 0:
				b.Read("r1", call, ret, "", "")
			case 1:
				b.Read("r1", call, ret, w.value, strconv.Itoa(1+rng.Intn(4)))
			default:
				b.Read("r1", call, ret, w.value, w.token)
			}
		case r < 4:
			tok := strconv.Itoa(1 + rng.Intn(5))
			if rng.Intn(2) == 0 {
				b.Acquire("l1", call, ret, tok)
			} else {
				b.AcquireInfo("l1", call, ret)
			}
		default:
			tok := strconv.Itoa(1 + rng.Intn(4) + 3*int(call)*4/span) // tokens mostly grow over time
			switch rng.Intn(12) {
			case 0:
				tok = ""
			case 1:
				tok = "x"
			}
			v := fmt.Sprintf("v%d", i)
			ws = append(ws, written{v, tok})
			switch o := rng.Intn(20); {
			case o < 8:
				b.Write("r1", tok, v, call, ret)
			case o < 13:
				b.WriteStale("r1", tok, v, call, ret, "")
			case o < 16:
				b.WriteInfo("r1", tok, v, call, ret)
			case o < 18:
				b.WriteInfo("r1", tok, v, call, historytest.Open)
			default:
				b.WriteFail("r1", tok, v, call, ret, "missing-token")
			}
		}
	}
	return b.Events()
}

func checkEvents(t *testing.T, events []history.Event, sem Semantics) *Report {
	t.Helper()
	rep, err := Check(context.Background(), events, Options{Semantics: sem, Checker: CheckerPorcupine, Timeout: testBudget, MinOps: -1})
	require.NoError(t, err)
	return rep
}

// The reductions (dropping no-op and useless unknown writes) never change
// Porcupine's verdict; the direct checks never flag a history Porcupine (on
// the unreduced history) finds linearizable; and Porcupine's first point of
// violation is never later than a direct check's.
func TestReductionsExactAndDirectChecksSound(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	counts := map[Verdict]int{}
	segmented := 0
	for i := 0; i < propertyRuns; i++ {
		var events []history.Event
		switch i % 3 {
		case 0:
			events = randomKeyHistory(rng, 3+rng.Intn(6), 100)
		case 1:
			events = randomKeyHistory(rng, 10+rng.Intn(15), 800)
		default:
			cfg := historytest.GenConfig{Ops: 20 + rng.Intn(30), Keys: 1, ClientsPerKey: 1 + rng.Intn(3), InfoRate: 0.15, Seed: int64(i)}
			if rng.Intn(2) == 0 {
				cfg.WritesPerToken = 2 // equal tokens: meaningful under accept
			}
			events = corrupt(rng, historytest.Generate(cfg))
		}
		// Also the history as it stood at a random moment (a run killed
		// there): open operations become unknown-outcome ones.
		truncated := events[:rng.Intn(len(events)+1)]
		for _, sem := range []Semantics{strict, reentrant} {
			porcReduce = false
			tv := porcupineVerdict(checkEvents(t, truncated, sem))
			porcReduce = true
			require.Equal(t, tv, porcupineVerdict(checkEvents(t, truncated, sem)), "reductions changed the verdict (equal=%s) on\n%s", sem.Equal, dump(truncated))

			reduced := checkEvents(t, events, sem)
			porcReduce = false
			full := checkEvents(t, events, sem)
			porcReduce = true
			pv := porcupineVerdict(full)
			require.NotEqual(t, Unknown, pv)
			counts[pv]++
			require.Equal(t, pv, porcupineVerdict(reduced), "reductions changed the verdict (equal=%s) on\n%s", sem.Equal, dump(events))
			if hasViolation(full.Anomalies()) && pv == Valid {
				t.Fatalf("direct checks flagged a linearizable history (equal=%s): %+v\n%s", sem.Equal, full.Anomalies(), dump(events))
			}
			for _, k := range reduced.Keys {
				if k.Segments > 1 && k.Model == ModelRegister {
					segmented++
				}
				if k.Verdict != Invalid {
					continue
				}
				require.GreaterOrEqual(t, k.FirstInvalidAt, int64(0))
				for _, a := range reduced.Anomalies() {
					if a.Model == k.Model && a.Key == k.Key && !a.Finding && a.Kind != KindNotLinearizable {
						require.LessOrEqual(t, k.FirstInvalidAt, a.At, "porcupine saw %s later than the direct check %s (equal=%s)\n%s", secs(k.FirstInvalidAt), a.Text, sem.Equal, dump(events))
					}
				}
			}
		}
	}
	// The generator must exercise both answers.
	assert.Greater(t, counts[Valid], 900)
	assert.Greater(t, counts[Invalid], 1200)
	assert.Greater(t, segmented, 1000, "register keys cut into segments")
	t.Logf("verdicts %v, segmented keys %d", counts, segmented)
}

// corrupt changes one completion in a generated history, two times in three:
// an accepted write becomes stale or the reverse, a read returns another
// write's value (or nothing), an acquire returns a neighbouring token.
func corrupt(rng *rand.Rand, events []history.Event) []history.Event {
	if rng.Intn(3) == 0 {
		return events
	}
	var values []history.Event
	for _, e := range events {
		if e.F == history.Write && e.Type == history.Invoke {
			values = append(values, e)
		}
	}
	for tries := 0; tries < 50; tries++ {
		i := rng.Intn(len(events))
		e := &events[i]
		switch {
		case e.F == history.Write && e.Type == history.Ok:
			e.Type, e.Error = history.Fail, "stale"
		case e.F == history.Write && e.Type == history.Fail:
			e.Type, e.Error, e.HighWater = history.Ok, "", ""
		case e.F == history.Read && e.Type == history.Ok && len(values) > 0:
			if w := values[rng.Intn(len(values))]; rng.Intn(4) > 0 {
				e.Value, e.Token = w.Value, w.Token
			} else {
				e.Value, e.Token = "", ""
			}
		case e.F == history.Acquire && e.Type == history.Ok:
			n, _ := strconv.Atoi(e.Token)
			e.Token = strconv.Itoa(max(1, n+rng.Intn(3)-1))
		default:
			continue
		}
		return events
	}
	return events
}

// propertyRuns is how many random histories the property test checks (about
// 2 ms each); raise it locally to search harder after changing a reduction
// (60000 ran clean when segments and fencing bounds were added).
var propertyRuns = 3000

func dump(events []history.Event) string {
	var sb strings.Builder
	for _, e := range events {
		fmt.Fprintf(&sb, "%d t=%dms p=%d %s %s %s tok=%q val=%q err=%q\n", e.Index, e.Time/1e6, e.Process, e.Type, e.F, e.Key, e.Token, e.Value, e.Error)
	}
	return sb.String()
}

func TestGeneratedHistoriesAreValid(t *testing.T) {
	for seed := int64(1); seed <= 12; seed++ {
		cfg := historytest.GenConfig{Ops: 600, Keys: 2, InfoRate: 0.1, Seed: seed}
		sem := strict
		if seed%2 == 0 {
			cfg.WritesPerToken, sem = 3, reentrant
		}
		rep := checkEvents(t, historytest.Generate(cfg), sem)
		require.Equal(t, Valid, rep.Verdict, "seed %d: %s %+v", seed, rep.Reason, rep.Anomalies())
		require.Empty(t, rep.Anomalies())
	}
}

func TestPlantedStaleReadIsFound(t *testing.T) {
	for seed := int64(1); seed <= 5; seed++ {
		events := historytest.Generate(historytest.GenConfig{Ops: 600, Keys: 2, InfoRate: 0.05, PlantStaleRead: true, Seed: seed})
		rep := checkEvents(t, events, strict)
		assert.Equal(t, Invalid, rep.Verdict, "seed %d", seed)
		assert.Equal(t, Invalid, porcupineVerdict(rep), "seed %d", seed)
		assert.Contains(t, directKinds(rep), KindStaleRead, "seed %d", seed)
	}
}

// A Porcupine timeout is Unknown, never valid, and makes the run unknown.
func TestPorcupineTimeoutIsUnknown(t *testing.T) {
	events := historytest.Generate(historytest.GenConfig{Ops: 20000, Keys: 1, ClientsPerKey: 30, InfoRate: 0.3, Seed: 3})
	rep, err := Check(context.Background(), events, Options{Checker: CheckerPorcupine, Timeout: time.Millisecond})
	require.NoError(t, err)
	assert.Equal(t, Unknown, resultOf(rep, CheckerPorcupine, ModelRegister).Verdict)
	assert.Contains(t, resultOf(rep, CheckerPorcupine, ModelRegister).Reason, "no answer within 1ms")
	assert.Equal(t, Unknown, rep.Verdict, rep.Reason)
	assert.Equal(t, 2, rep.ExitCode())
	// The issuer is decided by its (complete) direct check even when
	// Porcupine runs out of time on it.
	assert.Equal(t, Unknown, resultOf(rep, CheckerPorcupine, ModelIssuer).Verdict)
	assert.NotContains(t, rep.Reason, ModelIssuer)
	assert.Equal(t, int64(-1), rep.FirstInvalidAt)
}

// Cancelling the caller's context stops a running search promptly, with
// Unknown (the aborted search must not be read as Illegal).
func TestCancelledSearchIsUnknown(t *testing.T) {
	events := historytest.Generate(historytest.GenConfig{Ops: 40000, Keys: 1, ClientsPerKey: 40, InfoRate: 0.3, Seed: 4})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	rep, err := Check(ctx, events, Options{Checker: CheckerPorcupine, Timeout: time.Hour})
	require.NoError(t, err)
	assert.Less(t, time.Since(start), 10*time.Second)
	assert.Equal(t, Unknown, resultOf(rep, CheckerPorcupine, ModelRegister).Verdict)
	assert.Equal(t, Unknown, rep.Verdict)

	ctx, cancel = context.WithCancel(context.Background())
	cancel()
	rep, err = Check(ctx, events, Options{Checker: CheckerPorcupine})
	require.NoError(t, err)
	assert.Equal(t, Unknown, rep.Verdict)
}

func TestVisualize(t *testing.T) {
	b := historytest.New().
		Nemesis("restart", "start", 5).Nemesis("restart", "stop", 15).
		Write("r1", "34", "c2-9", 0, 10).Write("r1", "33", "c3-17", 20, 30).Read("r1", 40, 50, "c3-17", "33").
		Acquire("l1", 0, 10, "1")
	rep := checkHistory(t, b, strict)
	require.Equal(t, Invalid, rep.Verdict)
	var buf bytes.Buffer
	require.NoError(t, rep.Visualize(ModelRegister, "r1", &buf))
	html := buf.String()
	assert.Contains(t, html, "<html")
	assert.Contains(t, html, "write c3-17, token 33")
	assert.Contains(t, html, KindStaleWriteAccepted)
	assert.Contains(t, html, "restart")
	buf.Reset()
	require.NoError(t, rep.Visualize(ModelIssuer, "l1", &buf))
	assert.Contains(t, buf.String(), "acquire l1")
	assert.Error(t, rep.Visualize(ModelRegister, "nope", &buf))

	path := t.TempDir() + "/r1.html"
	require.NoError(t, rep.VisualizePath(ModelRegister, "r1", path))
}
