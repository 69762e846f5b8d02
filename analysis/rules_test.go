package analysis

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/checkers/historytest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var (
	strict     = checkers.DefaultSemantics()
	reentrant  = checkers.Semantics{Equal: checkers.EqualAccept, Scope: checkers.ScopePerLock}
	global     = checkers.Semantics{Equal: checkers.EqualReject, Scope: checkers.ScopeGlobal}
	authentic  = checkers.Semantics{Equal: checkers.EqualReject, Scope: checkers.ScopePerLock, Authenticated: true}
	testBudget = 20 * time.Second
)

// checkHistory runs Porcupine and the direct checks (not the fast checker:
// these tests are about the first two) with no minimum size.
func checkHistory(t *testing.T, b *historytest.Builder, sem checkers.Semantics) *Result {
	t.Helper()
	rep, err := Check(context.Background(), b.Events(), Options{Semantics: sem, Checker: CheckerPorcupine, Timeout: testBudget, MinOps: -1})
	require.NoError(t, err)
	return rep
}

func resultOf(rep *Result, checker, model string) checkers.Result {
	for _, r := range rep.Checks {
		if r.Checker == checker && r.Model == model {
			return r
		}
	}
	return checkers.Result{}
}

// porcupineVerdict combines Porcupine's two models.
func porcupineVerdict(rep *Result) checkers.Verdict {
	v := checkers.Valid
	for _, m := range []string{checkers.ModelRegister, checkers.ModelIssuer} {
		switch resultOf(rep, checkers.CheckerPorcupine, m).Verdict {
		case checkers.Invalid:
			return checkers.Invalid
		case checkers.Unknown:
			v = checkers.Unknown
		}
	}
	return v
}

// directKinds is the sorted set of kinds the direct checks reported.
func directKinds(rep *Result) []string {
	seen := map[string]bool{}
	for _, r := range rep.Checks {
		if r.Checker != checkers.CheckerDirect || r.Model == checkers.ModelLease {
			continue
		}
		for _, a := range r.Anomalies {
			seen[a.Kind] = true
		}
	}
	out := []string{}
	for k := range seen {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func directAnomaly(t *testing.T, rep *Result, kind string) checkers.Anomaly {
	t.Helper()
	for _, r := range rep.Checks {
		for _, a := range r.Anomalies {
			if r.Checker == checkers.CheckerDirect && a.Kind == kind {
				return a
			}
		}
	}
	t.Fatalf("no direct anomaly of kind %s in %+v", kind, rep.Anomalies())
	return checkers.Anomaly{}
}

type ruleCase struct {
	name      string
	sem       checkers.Semantics
	build     func(b *historytest.Builder)
	porcupine checkers.Verdict
	kinds     []string
	// beyondModel: the direct checks use knowledge the register model does
	// not have (which tokens were issued), so Porcupine may say valid.
	beyondModel bool
}

// ruleCases are hand-written histories, valid and invalid, for each rule.
// Times are in ms.
var ruleCases = []ruleCase{
	// --- writes and reads, valid ---
	{name: "sequential writes with growing tokens, fresh read", sem: strict, porcupine: checkers.Valid, build: func(b *historytest.Builder) {
		b.Write("r1", "1", "a", 0, 10).Write("r1", "2", "b", 20, 30).Read("r1", 40, 50, "b", "2")
	}},
	{name: "concurrent writes accepted out of token order", sem: strict, porcupine: checkers.Valid, build: func(b *historytest.Builder) {
		b.Write("r1", "5", "a", 0, 10).Write("r1", "3", "b", 2, 12).Read("r1", 20, 30, "a", "5")
	}},
	{name: "read concurrent with the first write sees nothing", sem: strict, porcupine: checkers.Valid, build: func(b *historytest.Builder) {
		b.Write("r1", "1", "a", 0, 10).Read("r1", 5, 15, "", "")
	}},
	{name: "read concurrent with a newer write sees the older value", sem: strict, porcupine: checkers.Valid, build: func(b *historytest.Builder) {
		b.Write("r1", "1", "a", 0, 10).Write("r1", "2", "b", 20, 40).Read("r1", 25, 30, "a", "1")
	}},
	{name: "info write later observed", sem: strict, porcupine: checkers.Valid, build: func(b *historytest.Builder) {
		b.Write("r1", "1", "a", 0, 10).WriteInfo("r1", "2", "b", 12, 30).Read("r1", 40, 50, "b", "2")
	}},
	{name: "info write observed after the run ended it", sem: strict, porcupine: checkers.Valid, build: func(b *historytest.Builder) {
		b.Write("r1", "1", "a", 0, 10).WriteInfo("r1", "2", "b", 12, historytest.Open).Read("r1", 40, 50, "b", "2")
	}},
	{name: "info write never observed", sem: strict, porcupine: checkers.Valid, build: func(b *historytest.Builder) {
		b.Write("r1", "1", "a", 0, 10).WriteInfo("r1", "2", "b", 12, 30).Read("r1", 40, 50, "a", "1").Read("r1", 60, 70, "a", "1")
	}},
	{name: "info write observed late, after reads of the old value", sem: strict, porcupine: checkers.Valid, build: func(b *historytest.Builder) {
		b.Write("r1", "1", "a", 0, 10).WriteInfo("r1", "2", "b", 12, 30).Read("r1", 40, 50, "a", "1").Read("r1", 60, 70, "b", "2")
	}},
	{name: "unknown write justifies a stale rejection", sem: strict, porcupine: checkers.Valid, build: func(b *historytest.Builder) {
		b.WriteInfo("r1", "5", "a", 0, historytest.Open).WriteStale("r1", "4", "b", 10, 20, "5")
	}},
	{name: "stale rejection justified by a concurrent accepted write", sem: strict, porcupine: checkers.Valid, build: func(b *historytest.Builder) {
		b.Write("r1", "5", "a", 0, 30).WriteStale("r1", "4", "b", 10, 20, "5")
	}},
	{name: "reject: replay rejected as stale", sem: strict, porcupine: checkers.Valid, build: func(b *historytest.Builder) {
		b.Write("r1", "5", "a", 0, 10).WriteStale("r1", "5", "b", 20, 30, "5")
	}},
	{name: "accept: equal tokens both accepted", sem: reentrant, porcupine: checkers.Valid, build: func(b *historytest.Builder) {
		b.Write("r1", "5", "a", 0, 10).Write("r1", "5", "b", 20, 30).Read("r1", 40, 50, "b", "5")
	}},
	{name: "accept: concurrent equal tokens, either order", sem: reentrant, porcupine: checkers.Valid, build: func(b *historytest.Builder) {
		b.Write("r1", "5", "a", 0, 10).Write("r1", "5", "b", 5, 15).Read("r1", 20, 30, "a", "5")
	}},
	{name: "accept: older token rejected", sem: reentrant, porcupine: checkers.Valid, build: func(b *historytest.Builder) {
		b.Write("r1", "5", "a", 0, 10).WriteStale("r1", "4", "b", 20, 30, "5")
	}},
	{name: "missing token rejected", sem: strict, porcupine: checkers.Valid, build: func(b *historytest.Builder) {
		b.WriteFail("r1", "", "a", 0, 10, "missing-token").Write("r1", "1", "b", 20, 30)
	}},
	{name: "malformed token rejected", sem: strict, porcupine: checkers.Valid, build: func(b *historytest.Builder) {
		b.WriteFail("r1", "12abc", "a", 0, 10, "malformed-token")
	}},
	{name: "strip: emptied token rejected", sem: strict, porcupine: checkers.Valid, build: func(b *historytest.Builder) {
		b.Write("r1", "1", "a", 0, 10).WriteFail("r1", "2", "b", 20, 30, "missing-token").Strip("r1", "b", "", "empty", 25)
	}},
	{name: "strip: info write without token never observed", sem: strict, porcupine: checkers.Valid, build: func(b *historytest.Builder) {
		b.Write("r1", "1", "a", 0, 10).WriteInfo("r1", "2", "b", 20, 30).Strip("r1", "b", "", "remove", 25).Read("r1", 40, 50, "a", "1")
	}},
	{name: "authenticated: sealed token accepted, unsealed rejected", sem: authentic, porcupine: checkers.Valid, build: func(b *historytest.Builder) {
		b.Acquire("r1", 0, 5, "42.9f86").Write("r1", "42.9f86", "a", 10, 20).WriteFail("r1", "43", "b", 30, 40, "forged").Read("r1", 50, 60, "a", "42.9f86")
	}},
	{name: "unauthenticated target accepts a token never issued (finding)", sem: strict, porcupine: checkers.Valid, kinds: []string{checkers.KindTokensNotAuthenticated}, build: func(b *historytest.Builder) {
		b.Acquire("r1", 0, 5, "5").Write("r1", "5", "a", 10, 20).Write("r1", "999999", "forged", 30, 40)
	}},

	// --- writes and reads, invalid ---
	{name: "stale write accepted", sem: strict, porcupine: checkers.Invalid, kinds: []string{checkers.KindStaleWriteAccepted}, build: func(b *historytest.Builder) {
		b.Write("r1", "34", "c2-9", 10000, 11020).Write("r1", "33", "c3-17", 12000, 12410)
	}},
	{name: "stale write accepted after an observed info write", sem: strict, porcupine: checkers.Invalid, kinds: []string{checkers.KindStaleWriteAccepted}, build: func(b *historytest.Builder) {
		b.WriteInfo("r1", "34", "a", 0, 10).Read("r1", 20, 30, "a", "34").Write("r1", "33", "b", 40, 50)
	}},
	{name: "reject: replay accepted", sem: strict, porcupine: checkers.Invalid, kinds: []string{checkers.KindReplayAccepted}, build: func(b *historytest.Builder) {
		b.Write("r1", "5", "a", 0, 10).Write("r1", "5", "b", 20, 30)
	}},
	{name: "reject: concurrent equal tokens both accepted", sem: strict, porcupine: checkers.Invalid, kinds: []string{checkers.KindReplayAccepted}, build: func(b *historytest.Builder) {
		b.Write("r1", "5", "a", 0, 10).Write("r1", "5", "b", 5, 15)
	}},
	{name: "accept: equal token rejected as stale", sem: reentrant, porcupine: checkers.Invalid, kinds: []string{checkers.KindFalseStaleRejection}, build: func(b *historytest.Builder) {
		b.Write("r1", "5", "a", 0, 10).WriteStale("r1", "5", "b", 20, 30, "5")
	}},
	{name: "false stale rejection: newer than everything before it", sem: strict, porcupine: checkers.Invalid, kinds: []string{checkers.KindFalseStaleRejection, checkers.KindWrongHighWater}, build: func(b *historytest.Builder) {
		b.Write("r1", "3", "a", 0, 10).WriteStale("r1", "5", "b", 20, 30, "3")
	}},
	{name: "false stale rejection on a never-written key", sem: strict, porcupine: checkers.Invalid, kinds: []string{checkers.KindFalseStaleRejection}, build: func(b *historytest.Builder) {
		b.WriteStale("r1", "1", "a", 0, 10, "")
	}},
	{name: "false stale rejection: the newer write began after it", sem: strict, porcupine: checkers.Invalid, kinds: []string{checkers.KindFalseStaleRejection, checkers.KindWrongHighWater}, build: func(b *historytest.Builder) {
		b.Write("r1", "3", "a", 0, 10).WriteStale("r1", "5", "b", 20, 30, "9").WriteInfo("r1", "9", "c", 40, 50)
	}},
	{name: "missing token accepted", sem: strict, porcupine: checkers.Invalid, kinds: []string{checkers.KindMissingTokenAccepted}, build: func(b *historytest.Builder) {
		b.Write("r1", "", "a", 0, 10)
	}},
	{name: "malformed token accepted", sem: strict, porcupine: checkers.Invalid, kinds: []string{checkers.KindMalformedTokenAccepted}, build: func(b *historytest.Builder) {
		b.Write("r1", "1", "a", 0, 10).Write("r1", "12abc", "b", 20, 30)
	}},
	{name: "strip: removed token accepted", sem: strict, porcupine: checkers.Invalid, kinds: []string{checkers.KindMissingTokenAccepted}, build: func(b *historytest.Builder) {
		b.Write("r1", "1", "a", 0, 10).Write("r1", "2", "b", 20, 30).Strip("r1", "b", "", "remove", 25)
	}},
	{name: "strip: info write without token observed", sem: strict, porcupine: checkers.Invalid, kinds: []string{checkers.KindMissingTokenAccepted, checkers.KindReadWithoutToken}, build: func(b *historytest.Builder) {
		b.WriteInfo("r1", "2", "b", 20, 30).Strip("r1", "b", "", "remove", 25).Read("r1", 40, 50, "b", "")
	}},
	{name: "strip: garbled token accepted", sem: strict, porcupine: checkers.Invalid, kinds: []string{checkers.KindMalformedTokenAccepted}, build: func(b *historytest.Builder) {
		b.Write("r1", "2", "b", 20, 30).Strip("r1", "b", "2x!", "garble", 25)
	}},
	{name: "authenticated: unsealed token accepted", sem: authentic, porcupine: checkers.Invalid, kinds: []string{checkers.KindForgedTokenAccepted}, build: func(b *historytest.Builder) {
		b.Write("r1", "42", "a", 0, 10)
	}},
	{name: "authenticated: sealed token never issued accepted", sem: authentic, porcupine: checkers.Invalid, kinds: []string{checkers.KindForgedTokenAccepted}, build: func(b *historytest.Builder) {
		b.Acquire("r1", 0, 5, "5.aa").Write("r1", "5.aa", "a", 10, 20).Write("r1", "999.bb", "b", 30, 40)
	}},
	{name: "stale read of the older of two sequential writes", sem: strict, porcupine: checkers.Invalid, kinds: []string{checkers.KindStaleRead}, build: func(b *historytest.Builder) {
		b.Write("r1", "1", "a", 0, 10).Write("r1", "2", "b", 20, 30).Read("r1", 40, 50, "a", "1")
	}},
	{name: "stale read: lower token after both concurrent writes", sem: strict, porcupine: checkers.Invalid, kinds: []string{checkers.KindStaleRead}, build: func(b *historytest.Builder) {
		b.Write("r1", "5", "a", 0, 10).Write("r1", "3", "b", 2, 12).Read("r1", 20, 30, "b", "3")
	}},
	{name: "stale read after an observed info write", sem: strict, porcupine: checkers.Invalid, kinds: []string{checkers.KindStaleRead}, build: func(b *historytest.Builder) {
		b.Write("r1", "1", "a", 0, 10).WriteInfo("r1", "2", "b", 12, 30).Read("r1", 40, 50, "b", "2").Read("r1", 60, 70, "a", "1")
	}},
	{name: "stale read of the initial value", sem: strict, porcupine: checkers.Invalid, kinds: []string{checkers.KindStaleRead}, build: func(b *historytest.Builder) {
		b.Write("r1", "1", "a", 0, 10).Read("r1", 20, 30, "", "")
	}},
	{name: "read of a rejected write", sem: strict, porcupine: checkers.Invalid, kinds: []string{checkers.KindReadOfRejectedWrite}, build: func(b *historytest.Builder) {
		b.Write("r1", "5", "a", 0, 10).WriteStale("r1", "4", "b", 20, 30, "5").Read("r1", 40, 50, "b", "4")
	}},
	{name: "phantom read", sem: strict, porcupine: checkers.Invalid, kinds: []string{checkers.KindPhantomRead}, build: func(b *historytest.Builder) {
		b.Read("r1", 0, 10, "zzz", "1")
	}},
	{name: "read from the future", sem: strict, porcupine: checkers.Invalid, kinds: []string{checkers.KindFutureRead}, build: func(b *historytest.Builder) {
		b.Read("r1", 0, 10, "a", "1").Write("r1", "1", "a", 20, 30)
	}},
	{name: "read returns the wrong token", sem: strict, porcupine: checkers.Invalid, kinds: []string{checkers.KindReadTokenMismatch}, build: func(b *historytest.Builder) {
		b.Write("r1", "1", "a", 0, 10).Read("r1", 20, 30, "a", "2")
	}},
	{name: "keys are independent", sem: strict, porcupine: checkers.Valid, build: func(b *historytest.Builder) {
		b.Write("r1", "5", "a", 0, 10).Write("r2", "1", "b", 20, 30).Read("r1", 40, 50, "a", "5").Read("r2", 40, 50, "b", "1")
	}},

	// --- issuer ---
	{name: "issuer: sequential growing tokens", sem: strict, porcupine: checkers.Valid, build: func(b *historytest.Builder) {
		b.Acquire("l1", 0, 10, "1").Release("l1", "1", 11, 12).Acquire("l1", 20, 30, "2")
	}},
	{name: "issuer: concurrent acquires in either order", sem: strict, porcupine: checkers.Valid, build: func(b *historytest.Builder) {
		b.Acquire("l1", 0, 10, "2").Acquire("l1", 2, 12, "1").Acquire("l1", 20, 30, "3")
	}},
	{name: "issuer: failed and timed-out acquires are ignored", sem: strict, porcupine: checkers.Valid, build: func(b *historytest.Builder) {
		b.Acquire("l1", 0, 10, "1").AcquireFail("l1", 20, 30).AcquireInfo("l1", 40, 50).Acquire("l1", 60, 70, "3")
	}},
	{name: "issuer: per-lock tokens are independent", sem: strict, porcupine: checkers.Valid, build: func(b *historytest.Builder) {
		b.Acquire("l1", 0, 10, "5").Acquire("l2", 20, 30, "3")
	}},
	{name: "issuer: global scope orders all locks", sem: global, porcupine: checkers.Invalid, kinds: []string{checkers.KindTokenRegression}, build: func(b *historytest.Builder) {
		b.Acquire("l1", 0, 10, "5").Acquire("l2", 20, 30, "3")
	}},
	{name: "issuer: token regression (counter reset)", sem: strict, porcupine: checkers.Invalid, kinds: []string{checkers.KindTokenRegression}, build: func(b *historytest.Builder) {
		b.Acquire("l1", 13000, 13900, "48").Acquire("l1", 14000, 14200, "3")
	}},
	{name: "issuer: same token twice in a row", sem: strict, porcupine: checkers.Invalid, kinds: []string{checkers.KindDuplicateToken}, build: func(b *historytest.Builder) {
		b.Acquire("l1", 0, 10, "5").Acquire("l1", 20, 30, "5")
	}},
	{name: "issuer: same token to concurrent acquires (split brain)", sem: strict, porcupine: checkers.Invalid, kinds: []string{checkers.KindDuplicateToken}, build: func(b *historytest.Builder) {
		b.Acquire("l1", 0, 10, "5").Acquire("l1", 2, 12, "5")
	}},
	{name: "issuer: acquire ok without a token", sem: strict, porcupine: checkers.Invalid, kinds: []string{checkers.KindInvalidTokenIssued}, build: func(b *historytest.Builder) {
		b.Acquire("l1", 0, 10, "")
	}},
}

func TestRules(t *testing.T) {
	for _, tc := range ruleCases {
		t.Run(tc.name, func(t *testing.T) {
			b := historytest.New()
			tc.build(b)
			rep := checkHistory(t, b, tc.sem)
			want := tc.kinds
			if want == nil {
				want = []string{}
			}
			assert.Equal(t, want, directKinds(rep), "direct anomalies: %+v", rep.Anomalies())
			assert.Equal(t, tc.porcupine, porcupineVerdict(rep), "porcupine")
			violation := false
			for _, k := range tc.kinds {
				violation = violation || k != checkers.KindTokensNotAuthenticated
			}
			// Soundness: the direct checks never flag what Porcupine accepts
			// (except where they know more than the model).
			if tc.porcupine == checkers.Valid && !tc.beyondModel {
				assert.False(t, violation, "direct check reported a violation on a linearizable history")
			}
			wantVerdict := tc.porcupine
			if violation {
				wantVerdict = checkers.Invalid
			}
			assert.Equal(t, wantVerdict, rep.Verdict, rep.Reason)
			if wantVerdict == checkers.Invalid {
				require.NotNil(t, rep.FirstViolation)
				assert.GreaterOrEqual(t, rep.FirstViolation.At, int64(0))
			} else {
				assert.Nil(t, rep.FirstViolation)
			}
		})
	}
}

// Time to detection: At is when the history first showed the anomaly, even
// when the anomaly's last operation was invoked long before.
func TestAtIsWhenTheHistoryShowedIt(t *testing.T) {
	// The stale rejection returns at 30 ms, but a write with a newer token
	// was still in flight then: only its own rejection at 90 ms shows that
	// nothing justified the first.
	// (No high-water reported: the threshold rule alone.)
	b := historytest.New().Write("r1", "3", "a", 0, 10).WriteStale("r1", "5", "b", 20, 30, "").WriteStale("r1", "8", "c", 25, 90, "")
	rep := checkHistory(t, b, strict)
	var ats []int64
	for _, a := range resultOf(rep, checkers.CheckerDirect, checkers.ModelRegister).Anomalies {
		require.Equal(t, checkers.KindFalseStaleRejection, a.Kind)
		ats = append(ats, a.At)
	}
	assert.Equal(t, []int64{90e6, 90e6}, ats)
	// Porcupine's own first point agrees: at 30 ms the 8 might still land.
	k := rep.Keys[0]
	assert.Equal(t, checkers.Invalid, k.Verdict)
	assert.Equal(t, int64(90e6), k.FirstInvalidAt)
	assert.Equal(t, []int64{3}, k.Culprits)
}

// Values identify writes only when unique; a value written twice must not
// be pinned on the wrong write.
func TestDuplicateValuesAreNotPinnedOnOneWrite(t *testing.T) {
	// The first attempt was rejected, the retry with a newer token and the
	// same value was accepted, and a read saw it.
	b := historytest.New().Write("r1", "5", "a", 0, 10).
		WriteStale("r1", "4", "x", 20, 30, "5").Write("r1", "6", "x", 40, 50).Read("r1", 60, 70, "x", "6")
	rep := checkHistory(t, b, strict)
	assert.Equal(t, checkers.Valid, rep.Verdict, "%+v", rep.Anomalies())

	// A read of an empty value with a token saw an empty write.
	b = historytest.New().Write("r1", "1", "", 0, 10).Read("r1", 20, 30, "", "1")
	rep = checkHistory(t, b, strict)
	assert.Equal(t, checkers.Valid, rep.Verdict, "%+v", rep.Anomalies())
}
