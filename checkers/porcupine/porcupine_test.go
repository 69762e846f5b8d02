package porcupine

import (
	"context"
	"fmt"
	"math/rand"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/checkers/direct"
	"github.com/fencecheck/fencecheck/checkers/historytest"
	"github.com/fencecheck/fencecheck/history"
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

// checked is Porcupine's and the direct checks' answers on one history.
type checked struct {
	porcupine, direct []checkers.Result
	Keys              []checkers.KeyResult
}

// Anomalies are both checkers' anomalies.
func (c checked) Anomalies() []checkers.Anomaly {
	var out []checkers.Anomaly
	for _, r := range append(append([]checkers.Result(nil), c.porcupine...), c.direct...) {
		out = append(out, r.Anomalies...)
	}
	return out
}

var testBudget = 20 * time.Second

func checkEvents(t *testing.T, events []history.Event, sem checkers.Semantics) checked {
	t.Helper()
	ops, err := history.Pair(events)
	require.NoError(t, err)
	p := New(testBudget)
	c := checked{porcupine: p.Check(context.Background(), history.OpsOf(ops), sem), direct: direct.New().Check(context.Background(), history.OpsOf(ops), sem)}
	c.Keys = p.KeyResults()
	return c
}

// porcupineVerdict combines Porcupine's two models.
func porcupineVerdict(c checked) checkers.Verdict {
	v := checkers.Valid
	for _, r := range c.porcupine {
		switch r.Verdict {
		case checkers.Invalid:
			return checkers.Invalid
		case checkers.Unknown:
			v = checkers.Unknown
		}
	}
	return v
}

var (
	strict    = checkers.DefaultSemantics()
	reentrant = checkers.Semantics{Equal: checkers.EqualAccept, Scope: checkers.ScopePerLock}
)

// The reductions (dropping no-op and useless unknown writes) never change
// Porcupine's verdict; the direct checks never flag a history Porcupine (on
// the unreduced history) finds linearizable; and Porcupine's first point of
// violation is never later than a direct check's.
func TestReductionsExactAndDirectChecksSound(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	counts := map[checkers.Verdict]int{}
	segmented := 0
	for i := 0; i < propertyRuns; i++ {
		var events []history.Event
		switch i % 3 {
		case 0:
			events = randomKeyHistory(rng, 3+rng.Intn(6), 100)
		case 1:
			events = randomKeyHistory(rng, 10+rng.Intn(15), 800)
		default:
			cfg := historytest.SimConfig{Ops: 20 + rng.Intn(30), Keys: 1, ClientsPerKey: 1 + rng.Intn(3), InfoRate: 0.15,
				Seed: uint64(i), Acquires: rng.Intn(2) == 0, MaxThink: 10}
			if rng.Intn(2) == 0 {
				cfg.Semantics = reentrant // equal tokens accepted: meaningful under accept
			}
			events = corrupt(rng, historytest.Simulate(cfg).Events())
		}
		// Also the history as it stood at a random moment (a run killed
		// there): open operations become unknown-outcome ones.
		truncated := events[:rng.Intn(len(events)+1)]
		for _, sem := range []checkers.Semantics{strict, reentrant} {
			porcReduce = false
			tv := porcupineVerdict(checkEvents(t, truncated, sem))
			porcReduce = true
			require.Equal(t, tv, porcupineVerdict(checkEvents(t, truncated, sem)), "reductions changed the verdict (equal=%s) on\n%s", sem.Equal, dump(truncated))

			reduced := checkEvents(t, events, sem)
			porcReduce = false
			full := checkEvents(t, events, sem)
			porcReduce = true
			pv := porcupineVerdict(full)
			require.NotEqual(t, checkers.Unknown, pv)
			counts[pv]++
			require.Equal(t, pv, porcupineVerdict(reduced), "reductions changed the verdict (equal=%s) on\n%s", sem.Equal, dump(events))
			if checkers.HasViolation(full.Anomalies()) && pv == checkers.Valid {
				t.Fatalf("direct checks flagged a linearizable history (equal=%s): %+v\n%s", sem.Equal, full.Anomalies(), dump(events))
			}
			for _, k := range reduced.Keys {
				if k.Segments > 1 && k.Model == checkers.ModelRegister {
					segmented++
				}
				if k.Verdict != checkers.Invalid {
					continue
				}
				require.GreaterOrEqual(t, k.FirstInvalidAt, int64(0))
				for _, a := range reduced.Anomalies() {
					if a.Model == k.Model && a.Key == k.Key && !a.Finding && a.Kind != checkers.KindNotLinearizable {
						require.LessOrEqual(t, k.FirstInvalidAt, a.At, "porcupine saw %s later than the direct check %s (equal=%s)\n%s", checkers.Secs(k.FirstInvalidAt), a.Text, sem.Equal, dump(events))
					}
				}
			}
		}
	}
	// The generator must exercise both answers.
	assert.Greater(t, counts[checkers.Valid], 900)
	assert.Greater(t, counts[checkers.Invalid], 1200)
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
