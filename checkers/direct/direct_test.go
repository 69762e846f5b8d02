package direct

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/checkers/historytest"
	"github.com/fencecheck/fencecheck/history"
)

// The direct checks' own words and bounds. Their soundness against
// Porcupine, rule by rule, is analysis/rules_test.go (it needs both
// checkers and the combined verdict).

var strict = checkers.DefaultSemantics()

// checkDirect runs the direct checks alone: the register's result, then the
// issuer's.
func checkDirect(t *testing.T, b *historytest.Builder, sem checkers.Semantics) []checkers.Result {
	t.Helper()
	ops, err := b.Ops()
	require.NoError(t, err)
	res := New().Check(context.Background(), history.OpsOf(ops), sem)
	require.Len(t, res, 2)
	require.Equal(t, checkers.ModelRegister, res[0].Model)
	for _, r := range res {
		require.True(t, r.Proofs, "the direct checks' violations are proofs")
		require.Equal(t, r.Model == checkers.ModelIssuer, r.Complete, "complete for the issuer only")
	}
	return res
}

func directAnomaly(t *testing.T, rep []checkers.Result, kind string) checkers.Anomaly {
	t.Helper()
	for _, r := range rep {
		for _, a := range r.Anomalies {
			if a.Kind == kind {
				return a
			}
		}
	}
	t.Fatalf("no direct anomaly of kind %s in %+v", kind, rep)
	return checkers.Anomaly{}
}

// firstViolationAt is when the earliest violation became visible (-1: none).
func firstViolationAt(rep []checkers.Result) int64 {
	first := int64(-1)
	for _, r := range rep {
		for _, a := range r.Anomalies {
			if !a.Finding && (first < 0 || a.At < first) {
				first = a.At
			}
		}
	}
	return first
}

func TestTextsNameOperationsAndTimes(t *testing.T) {
	b := historytest.New().Write("r1", "34", "c2-9", 10000, 11020).Write("r1", "33", "c3-17", 12000, 12410)
	rep := checkDirect(t, b, strict)
	a := directAnomaly(t, rep, checkers.KindStaleWriteAccepted)
	assert.Equal(t, "write c3-17 (op 2) with token 33 was accepted at 12.41 s after write c2-9 (op 0) with token 34 was accepted at 11.02 s, before the later write began (12.00 s)", a.Text)
	assert.Equal(t, []int64{2, 0}, a.Ops)
	assert.Equal(t, int64(12410e6), a.At)
	assert.Equal(t, "r1", a.Key)
	assert.Equal(t, checkers.ModelRegister, a.Model)
	assert.Equal(t, int64(12410e6), firstViolationAt(rep))

	b = historytest.New().Acquire("l1", 13000, 13900, "48").Acquire("l1", 14000, 14200, "3")
	rep = checkDirect(t, b, strict)
	a = directAnomaly(t, rep, checkers.KindTokenRegression)
	assert.Equal(t, "token 3 returned by acquire op 2 (lock l1) at 14.20 s after token 48 was returned by acquire op 0 (lock l1) at 13.90 s, before op 2 began (14.00 s)", a.Text)
	assert.Equal(t, int64(14200e6), a.At)

	b = historytest.New().Write("r1", "1", "a", 0, 10).Write("r1", "7", "b", 20, 30).Strip("r1", "b", "", "remove", 25)
	rep = checkDirect(t, b, strict)
	a = directAnomaly(t, rep, checkers.KindMissingTokenAccepted)
	assert.Contains(t, a.Text, "write b (op 2) without a token")
	assert.Contains(t, a.Text, "strip proxy")
	assert.Contains(t, a.Text, "7")
	assert.Contains(t, a.Text, "was accepted at 0.03 s")

	b = historytest.New().Write("r1", "3", "a", 0, 10).WriteStale("r1", "5", "b", 20, 30, "3")
	rep = checkDirect(t, b, strict)
	a = directAnomaly(t, rep, checkers.KindFalseStaleRejection)
	assert.Contains(t, a.Text, "write b (op 2) with token 5 was rejected as stale at 0.03 s (the target reported high-water 3)")
	assert.Contains(t, a.Text, "no write with a token ≥ 5")

	b = historytest.New().Write("r1", "1", "a", 0, 10).WriteInfo("r1", "2", "b", 12, 30).Read("r1", 40, 50, "b", "2").Read("r1", 60, 70, "a", "1")
	rep = checkDirect(t, b, strict)
	a = directAnomaly(t, rep, checkers.KindStaleRead)
	assert.Contains(t, a.Text, "read op 6 returned a (token 1) at 0.07 s, but write b (op 2) with token 2 had an unknown outcome but took effect (read op 4 returned its value at 0.05 s)")
	assert.Equal(t, int64(70e6), a.At)
}

func TestAnomaliesAreCappedPerKindButCounted(t *testing.T) {
	b := historytest.New().Acquire("l1", 0, 10, "1000")
	for i := 0; i < 50; i++ {
		b.Acquire("l1", int64(20+20*i), int64(30+20*i), "1")
	}
	rep := checkDirect(t, b, strict)
	r := rep[1]
	assert.Len(t, r.Anomalies, checkers.MaxAnomaliesPerKind)
	assert.Equal(t, 50, r.KindCounts[checkers.KindTokenRegression]+r.KindCounts[checkers.KindDuplicateToken])
	assert.Equal(t, 50-checkers.MaxAnomaliesPerKind, r.OmittedAnomalies)
	assert.Equal(t, int64(30e6), firstViolationAt(rep))
}
