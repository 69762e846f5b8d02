package analysis

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/checkers/historytest"
)

// CounterReset is the history of an issuer that keeps its counter in
// memory: on each of locks, tokens 1..4 before a restart of node "n1"
// (1000–1100 ms), then tokens 1..2 again after it, and a paused-holder
// style pair of a lock after a second restart. Every checker reports the
// reused tokens, each in its own words.
func counterReset(locks int) *historytest.Builder {
	b := historytest.New().OnNode("n1")
	at := int64(0)
	for l := range locks {
		lock := fmt.Sprintf("L%d", l)
		for tok := 1; tok <= 4; tok++ {
			b.OnProcess(l).Acquire(lock, at, at+5, fmt.Sprint(tok))
			at += 10
		}
	}
	b.Fault("restart", "n1", 1000, 1100)
	at = 1200
	for l := range locks {
		lock := fmt.Sprintf("L%d", l)
		for tok := 1; tok <= 2; tok++ {
			b.OnProcess(l).Acquire(lock, at, at+5, fmt.Sprint(tok))
			at += 10
		}
	}
	return b
}

func TestRootCausesOfACounterReset(t *testing.T) {
	res, err := Check(context.Background(), counterReset(6).Events(), Options{MinOps: 0})
	require.NoError(t, err)
	require.Equal(t, checkers.Invalid, res.Verdict)

	// 6 locks × 2 acquires that returned a token already handed out: 12
	// violations, each reported by three checkers (and by the direct checks
	// under two kinds), counted once.
	assert.Equal(t, 12, res.AnomalyCount)
	assert.Equal(t, "12 anomalies in 1 root cause", res.AnomalyLine())
	n := 0
	for _, c := range res.ViolationKinds {
		n += c
	}
	assert.Equal(t, res.AnomalyCount, n, "the kinds count the same violations")

	require.Len(t, res.RootCauses, 1, "one restart explains them all")
	g := res.RootCauses[0]
	assert.Equal(t, 12, g.Count)
	assert.Equal(t, 6, g.Keys)
	require.NotNil(t, g.Cause)
	assert.True(t, g.Cause.Explains)
	assert.Equal(t, "restart", g.Cause.Nemesis)
	assert.Equal(t, []string{checkers.CheckerDirect, checkers.CheckerFast, checkers.CheckerPorcupine}, g.Checkers, "the checkers' agreement: marks on one group")
	assert.Empty(t, g.Missed)
	assert.LessOrEqual(t, len(g.Witness), 5)
	require.Len(t, g.Witness, 2, "a duplicate token's witness is its two acquires")
	assert.Equal(t, checkers.KindDuplicateToken, g.WitnessKind)
	ops := res.WitnessOps(g.Witness)
	assert.Equal(t, ops[0].Token.Raw, ops[1].Token.Raw)
	assert.Less(t, ops[0].Completed, ops[1].Call)
	assert.True(t, strings.HasPrefix(g.Sentence, "The issuer handed out tokens it had already handed out: 12 violations on 6 locks"), g.Sentence)
	assert.Contains(t, g.Sentence, "restart")
	assert.NotEmpty(t, g.Listed, "the checkers' anomalies, in words, under the group")
}

// With no fault, violations group by their key.
func TestRootCausesWithoutAFaultGroupByKey(t *testing.T) {
	b := historytest.New()
	b.Acquire("A", 0, 5, "1").Acquire("A", 10, 15, "1").Acquire("B", 20, 25, "3").Acquire("B", 30, 35, "2")
	res, err := Check(context.Background(), b.Events(), Options{MinOps: 0})
	require.NoError(t, err)
	require.Len(t, res.RootCauses, 2)
	assert.Equal(t, "A", res.RootCauses[0].Key)
	assert.Equal(t, "B", res.RootCauses[1].Key)
	assert.Contains(t, res.RootCauses[0].Sentence, "no fault explains them")
	assert.Equal(t, 2, res.AnomalyCount)
}

// A valid run's findings are one line per kind, with a few examples.
func TestFindingKindsSummarise(t *testing.T) {
	checks := []checkers.Result{{Checker: "direct", Model: checkers.ModelLease, Verdict: checkers.Valid,
		KindCounts: map[string]int{checkers.KindLeaseOverlap: 38}}}
	for i := range 20 {
		checks[0].Anomalies = append(checks[0].Anomalies, checkers.Anomaly{Kind: checkers.KindLeaseOverlap, Finding: true, At: int64(i), Text: "overlap"})
	}
	fs := findingKinds(checks)
	require.Len(t, fs, 1)
	assert.Equal(t, 38, fs[0].Count)
	assert.Len(t, fs[0].Examples, maxFindingExamples)
	assert.True(t, strings.HasPrefix(fs[0].Line, "lease-overlap ×38: "), fs[0].Line)
}
