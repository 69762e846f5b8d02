package fast

import (
	"fmt"
	"sort"

	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/history"
)

// checkIssuerScope decides the issuer model for one lock (or, for global
// scope, all locks): the ok acquires must be orderable by strictly
// increasing token consistently with real time. That holds iff no two share
// a token and no acquire returned a token not greater than one returned by
// an acquire that completed before it began (then sorting by token is a
// linear extension of real-time order). One sweep in call order, merging
// the acquires in return order into a running maximum, finds the first
// regression; a sort by token finds duplicates.
func checkIssuerScope(k *keyLog, sem checkers.Semantics, max int) []checkers.Anomaly {
	var out []checkers.Anomaly
	add := func(a checkers.Anomaly) {
		if len(out) < max {
			a.Model = checkers.ModelIssuer
			out = append(out, a)
		}
	}
	name := func(o *record) string { return fmt.Sprintf("acquire op %d (lock %s)", o.id, k.value(o)) }
	var valid []int
	for i := range k.ops {
		o := &k.ops[i]
		if o.ts != history.TokenValid {
			add(checkers.Anomaly{Kind: checkers.KindInvalidTokenIssued, Key: k.value(o), At: o.ret, Ops: []int64{o.id},
				Text: fmt.Sprintf("%s succeeded at %s without returning a valid token", name(o), checkers.Secs(o.ret))})
			continue
		}
		valid = append(valid, i)
	}
	byTok := append([]int(nil), valid...)
	sort.Slice(byTok, func(a, b int) bool {
		x, y := &k.ops[byTok[a]], &k.ops[byTok[b]]
		if x.tok != y.tok {
			return x.tok < y.tok
		}
		return x.ret < y.ret
	})
	for i := 1; i < len(byTok); i++ {
		a, b := &k.ops[byTok[i-1]], &k.ops[byTok[i]]
		if a.tok == b.tok {
			add(checkers.Anomaly{Kind: checkers.KindDuplicateToken, Key: k.value(b), At: maxI64(a.ret, b.ret), Ops: []int64{a.id, b.id},
				Text: fmt.Sprintf("%s and %s both returned token %d (at %s and %s)", name(a), name(b), a.tok, checkers.Secs(a.ret), checkers.Secs(b.ret))})
		}
	}
	byCall := append([]int(nil), valid...)
	sort.Slice(byCall, func(a, b int) bool { return k.ops[byCall[a]].call < k.ops[byCall[b]].call })
	byRet := valid // reuse: sort in place
	sort.Slice(byRet, func(a, b int) bool { return k.ops[byRet[a]].ret < k.ops[byRet[b]].ret })
	high, highBy, rp := uint64(0), -1, 0
	for _, bi := range byCall {
		b := &k.ops[bi]
		for rp < len(byRet) && k.ops[byRet[rp]].ret < b.call {
			if a := &k.ops[byRet[rp]]; highBy < 0 || a.tok > high {
				high, highBy = a.tok, byRet[rp]
			}
			rp++
		}
		if highBy >= 0 && b.tok < high { // equal tokens: reported as duplicates above
			a := &k.ops[highBy]
			add(checkers.Anomaly{Kind: checkers.KindTokenRegression, Key: k.value(b), At: b.ret, Ops: []int64{a.id, b.id},
				Text: fmt.Sprintf("%s returned token %d at %s, but %s had already returned token %d at %s, before it began at %s",
					name(b), b.tok, checkers.Secs(b.ret), name(a), a.tok, checkers.Secs(a.ret), checkers.Secs(b.call))})
		}
	}
	if sem.Scope != checkers.ScopeGlobal {
		for i := range out {
			out[i].Key = k.name
		}
	}
	return out
}

func maxI64(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}
