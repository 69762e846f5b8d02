package analysis

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/checkers/historytest"
	"github.com/fencecheck/fencecheck/history"
)

// servedHistory is a run of 10 s: node n1 (issuer and resource) answers every
// 100 ms until deadAt (ms), then only refuses connections; n2 answers
// throughout. The phases and the end are recorded as the harness does.
func servedHistory(deadAt int64) *historytest.Builder {
	b := historytest.New().Run(history.RunStart, 0, map[string]any{"requested": "none"}).
		Run(history.RunPhase, 0, map[string]any{"phase": history.PhaseMain})
	tok := 0
	for t := int64(10); t < 10000; t += 100 {
		tok++
		ts := strconv.Itoa(tok)
		b.OnNode("n2").Acquire("l2", t, t+2, ts).OnNode("n2").Write("r2", ts, "v"+ts, t+3, t+5)
		if t < deadAt {
			b.OnNode("n1").Acquire("l1", t, t+2, ts).OnNode("n1").Write("r1", ts, "w"+ts, t+3, t+5)
		} else {
			b.OnNode("n1").WriteFail("r1", ts, "w"+ts, t+3, t+4, "refused")
		}
	}
	return b.Run(history.RunPhase, 10000, map[string]any{"phase": history.PhaseFinal})
}

func endRun(b *historytest.Builder) []history.Event {
	return b.Run(history.RunEnd, 10500, map[string]any{"complete": true, "cut_short": false}).Events()
}

// A node that stops serving for most of the main phase (containers removed
// under a live run: every request refused, each a definite failure) makes
// the valid history unknown, with the node named; a shorter silence, or one
// under a fault, does not.
func TestNodeThatServedNothingForMostOfTheRun(t *testing.T) {
	check := func(events []history.Event) *Result {
		t.Helper()
		rep, err := Check(t.Context(), events, Options{Checker: CheckerFast})
		require.NoError(t, err)
		return rep
	}
	t.Run("dead from 2 s of 10 s: unknown", func(t *testing.T) {
		rep := check(endRun(servedHistory(2000)))
		assert.Equal(t, checkers.Unknown, rep.Verdict, rep.Reason)
		assert.Equal(t, ExitUnknown, rep.ExitCode)
		require.Len(t, rep.GateReasons, 1, "%v", rep.GateReasons)
		assert.Contains(t, rep.GateReasons[0], "node n1 served nothing from 1.92 s to 10.00 s")
		assert.Contains(t, rep.GateReasons[0], "the system stopped serving")
		assert.Contains(t, rep.Reason, "the history is valid, but node n1 served nothing")
	})
	t.Run("never served: unknown", func(t *testing.T) {
		rep := check(endRun(servedHistory(0)))
		assert.Equal(t, checkers.Unknown, rep.Verdict, rep.Reason)
		require.Len(t, rep.GateReasons, 1, "%v", rep.GateReasons)
		assert.Contains(t, rep.GateReasons[0], "node n1 served nothing at all")
	})
	t.Run("dead for the last 4 s of 10: valid", func(t *testing.T) {
		rep := check(endRun(servedHistory(6000)))
		assert.Equal(t, checkers.Valid, rep.Verdict, rep.Reason)
		assert.Empty(t, rep.GateReasons)
	})
	t.Run("silent under a fault: valid", func(t *testing.T) {
		rep := check(endRun(servedHistory(2000).Fault("pause", "n1", 1500, 10000)))
		assert.Equal(t, checkers.Valid, rep.Verdict, rep.Reason)
	})
	t.Run("the final phase does not count", func(t *testing.T) {
		b := servedHistory(10000)
		for t := int64(10000); t < 30000; t += 100 {
			b.OnNode("n1").ReadInfo("r1", t, t+50)
		}
		rep := check(b.Run(history.RunEnd, 30000, map[string]any{"complete": true}).Events())
		assert.Equal(t, checkers.Valid, rep.Verdict, rep.Reason)
	})
	t.Run("a violation is still a violation", func(t *testing.T) {
		b := servedHistory(2000).OnNode("n2").Write("r2", "1", "late", 9000, 9001)
		rep := check(endRun(b))
		assert.Equal(t, checkers.Invalid, rep.Verdict, rep.Reason)
		assert.Contains(t, rep.Reason, "node n1 served nothing")
	})
	t.Run("a history without phases is judged on its operations", func(t *testing.T) {
		b := historytest.New()
		for t := int64(0); t < 10000; t += 100 {
			b.OnNode("n1").WriteFail("r1", "1", "v", t, t+1, "refused")
		}
		rep := check(b.Acquire("l", 1, 2, "1").OnNode("n1").Write("r1", "1", "x", 3, 4).Events())
		for _, g := range rep.GateReasons {
			assert.NotContains(t, g, "served nothing")
		}
	})
}
