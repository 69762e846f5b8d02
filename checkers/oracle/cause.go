package oracle

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// A Cause is a feature of a history that a checker may misjudge, with a
// rewrite that takes the feature out. When a checker and the oracle
// disagree on a history and agree once a cause's rewrite is applied, that
// feature is (at least part of) why they disagreed.
type Cause struct {
	Name string
	// Preserving: the rewrite does not change what the history means, so
	// the oracle's verdict must not change either (checked).
	Preserving bool
	Rewrite    func(evs []map[string]any, sem Semantics) []map[string]any
}

// Explain names the causes whose rewrite makes the checker agree with the
// oracle on d's history: the first single cause that does, else the first
// pair, else all of them together, joined with "+"; "" when none does.
func Explain(d Disagreement, check Checker, causes []Cause) (string, error) {
	return explainFirst(d, check, causes, nil)
}

// explainFirst is Explain trying the cause sets named in first before the
// others (the causes of earlier disagreements that looked alike).
func explainFirst(d Disagreement, check Checker, causes []Cause, first []string) (string, error) {
	evs, err := decodeLines(d.History)
	if err != nil {
		return "", err
	}
	sets := causeSets(causes)
	var ordered [][]Cause
	for _, name := range first {
		for _, set := range sets {
			if combine(set).Name == name {
				ordered = append(ordered, set)
			}
		}
	}
	for _, set := range append(ordered, sets...) {
		c := combine(set)
		ok, err := explains(evs, d, check, c)
		if err != nil || ok {
			return c.Name, err
		}
	}
	return "", nil
}

// causeSets are the sets Explain tries, in order: each cause, each pair,
// all.
func causeSets(causes []Cause) [][]Cause {
	var sets [][]Cause
	for i := range causes {
		sets = append(sets, causes[i:i+1])
	}
	for i := range causes {
		for j := i + 1; j < len(causes); j++ {
			sets = append(sets, []Cause{causes[i], causes[j]})
		}
	}
	if len(causes) > 2 {
		sets = append(sets, causes)
	}
	return sets
}

// combine is the causes' rewrites applied in turn.
func combine(set []Cause) Cause {
	if len(set) == 1 {
		return set[0]
	}
	c := Cause{Name: set[0].Name, Preserving: true}
	for _, s := range set[1:] {
		c.Name += "+" + s.Name
	}
	for _, s := range set {
		c.Preserving = c.Preserving && s.Preserving
	}
	c.Rewrite = func(evs []map[string]any, sem Semantics) []map[string]any {
		for _, s := range set {
			evs = s.Rewrite(evs, sem)
		}
		return evs
	}
	return c
}

// explains reports whether c's rewrite of evs makes check agree with the
// oracle.
func explains(evs []map[string]any, d Disagreement, check Checker, c Cause) (bool, error) {
	h := encodeLines(c.Rewrite(cloneEvents(evs), d.Sem))
	want, err := Expect(h, d.Sem)
	if err != nil {
		return false, err
	}
	if c.Preserving && want.Verdict != d.Oracle.Verdict {
		return false, fmt.Errorf("cause %s: the rewrite changed the oracle's verdict from %s to %s", c.Name, d.Oracle.Verdict, want.Verdict)
	}
	return Agree(want, check(h, d.Sem)), nil
}

func decodeLines(h []byte) ([]map[string]any, error) {
	var out []map[string]any
	for _, l := range splitLines(bytes.TrimPrefix(h, bom)) {
		if len(bytes.TrimSpace(l)) == 0 {
			continue
		}
		d := json.NewDecoder(bytes.NewReader(l))
		d.UseNumber()
		var m map[string]any
		if err := d.Decode(&m); err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, nil
}

func encodeLines(evs []map[string]any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	for _, e := range evs {
		if err := enc.Encode(e); err != nil {
			panic(err)
		}
	}
	return b.Bytes()
}

func cloneEvents(evs []map[string]any) []map[string]any {
	out := make([]map[string]any, len(evs))
	for i, e := range evs {
		c := make(map[string]any, len(e))
		for k, v := range e {
			c[k] = v
		}
		out[i] = c
	}
	return out
}

func field(e map[string]any, k string) string {
	s, _ := e[k].(string)
	return s
}

// Causes are the rewrites for the features issue 12 names, and for the
// rules the oracle checks that the checkers did not when it was written.
var Causes = []Cause{
	{Name: "token-on-completion", Preserving: true, Rewrite: tokenOnInvoke},
	{Name: "empty-value", Preserving: true, Rewrite: noEmptyValues},
	{Name: "strip-value-shared-across-keys", Preserving: true, Rewrite: uniqueValuesAcrossKeys},
	{Name: "unsealed-rejection", Rewrite: dropRejections(func(t token, _ bool) bool { return t.kind == tokValid && !t.sealed })},
	{Name: "forged-rejection", Rewrite: dropRejections(func(t token, authentic bool) bool { return t.kind == tokValid && !authentic })},
	{Name: "high-water", Rewrite: dropHighWater},
	{Name: "forgery-rule", Rewrite: dropDoubtfulSealedWrites},
	{Name: "renew-release", Rewrite: failRenewRelease},
	{Name: "value-without-token", Rewrite: dropTokenlessValueReads},
}

// tokenOnInvoke copies each write's token and value from its completion
// to its invoke when the invoke has none (as the project's recorder
// writes them).
func tokenOnInvoke(evs []map[string]any, _ Semantics) []map[string]any {
	open := map[string]map[string]any{}
	for _, e := range evs {
		if field(e, "f") != "write" {
			continue
		}
		p := fmt.Sprint(e["process"])
		if field(e, "type") == "invoke" {
			open[p] = e
			continue
		}
		if inv := open[p]; inv != nil {
			for _, k := range []string{"token", "value"} {
				if field(inv, k) == "" && field(e, k) != "" {
					inv[k] = e[k]
				}
			}
			delete(open, p)
		}
	}
	return evs
}

// noEmptyValues gives the empty value a non-empty spelling: on writes
// that have no value on either event, their strip events, and reads that
// returned a token.
func noEmptyValues(evs []map[string]any, _ Semantics) []map[string]any {
	open := map[string]map[string]any{}
	for _, e := range evs {
		f, typ := field(e, "f"), field(e, "type")
		switch {
		case f == "write" && typ == "invoke":
			open[fmt.Sprint(e["process"])] = e
		case f == "write":
			p := fmt.Sprint(e["process"])
			if inv := open[p]; inv != nil && field(inv, "value") == "" && field(e, "value") == "" {
				inv["value"], e["value"] = "(empty)", "(empty)"
			}
			delete(open, p)
		case f == "strip" && e["process"] == json.Number("-1") && e["key"] != nil && field(e, "value") == "":
			e["value"] = "(empty)"
		case f == "read" && typ == "ok" && field(e, "token") != "" && field(e, "value") == "":
			e["value"] = "(empty)"
		}
	}
	for _, inv := range open { // never completed
		if field(inv, "value") == "" {
			inv["value"] = "(empty)"
		}
	}
	return evs
}

// uniqueValuesAcrossKeys suffixes every value with its key, so that a
// strip event's value names one write whatever the key.
func uniqueValuesAcrossKeys(evs []map[string]any, _ Semantics) []map[string]any {
	for _, e := range evs {
		if _, keyed := e["key"]; keyed && field(e, "value") != "" {
			e["value"] = field(e, "value") + "@" + field(e, "key")
		}
	}
	return evs
}

// dropRejections removes rejected writes whose token drop selects (with
// whether the oracle holds it authentic), under authenticated semantics.
func dropRejections(drop func(t token, authentic bool) bool) func([]map[string]any, Semantics) []map[string]any {
	return func(evs []map[string]any, sem Semantics) []map[string]any {
		if !sem.Authenticated {
			return evs
		}
		ops, err := parse(encodeLines(evs))
		if err != nil {
			return evs
		}
		gone := map[int]bool{} // lines, 1-based
		for _, o := range ops {
			if o.f == "write" && o.outcome == outFail && drop(o.tok, authenticIn(ops, o)) {
				gone[o.line], gone[o.doneLine] = true, true
			}
		}
		var out []map[string]any
		for i, e := range evs {
			if !gone[i+1] {
				out = append(out, e)
			}
		}
		return out
	}
}

// authenticIn is the oracle's authenticity rule for w among ops.
func authenticIn(ops []*op, w *op) bool {
	var acquires []*op
	for _, o := range ops {
		if o.f == "acquire" {
			acquires = append(acquires, o)
		}
	}
	return w.tok.sealed && (len(acquires) == 0 || issuedBefore(acquires, w))
}

// dropDoubtfulSealedWrites removes, under authenticated semantics, the
// writes that may have taken effect with a sealed token the oracle holds
// forged, or whose number no acquire returned: where the oracle's
// forgery rule (an acquire invoked before the write could have issued
// the number) and a looser or stricter one differ.
func dropDoubtfulSealedWrites(evs []map[string]any, sem Semantics) []map[string]any {
	if !sem.Authenticated {
		return evs
	}
	ops, err := parse(encodeLines(evs))
	if err != nil {
		return evs
	}
	returned := map[uint64]bool{}
	for _, o := range ops {
		if o.f == "acquire" && o.outcome == outOk && o.tok.kind == tokValid {
			returned[o.tok.n] = true
		}
	}
	gone := map[int]bool{}
	for _, o := range ops {
		if o.f == "write" && o.outcome != outFail && o.tok.kind == tokValid && o.tok.sealed &&
			(!authenticIn(ops, o) || !returned[o.tok.n]) {
			gone[o.line], gone[o.doneLine] = true, true
		}
	}
	var out []map[string]any
	for i, e := range evs {
		// A strip event of a removed write goes with it.
		if gone[i+1] || (field(e, "f") == "strip" && stripOfGone(e, ops, gone)) {
			continue
		}
		out = append(out, e)
	}
	return out
}

func stripOfGone(e map[string]any, ops []*op, gone map[int]bool) bool {
	for _, o := range ops {
		if gone[o.line] && o.f == "write" && o.key == field(e, "key") && o.value == field(e, "value") {
			return true
		}
	}
	return false
}

func dropHighWater(evs []map[string]any, _ Semantics) []map[string]any {
	for _, e := range evs {
		delete(e, "high_water")
	}
	return evs
}

// dropTokenlessValueReads removes the reads that answered a value with no
// token (which the oracle holds impossible: a 200 carries the token).
func dropTokenlessValueReads(evs []map[string]any, _ Semantics) []map[string]any {
	var kept []map[string]any
	open := map[string]int{}
	for _, e := range evs {
		if field(e, "f") == "read" {
			p := fmt.Sprint(e["process"])
			if field(e, "type") == "invoke" {
				open[p] = len(kept)
				kept = append(kept, e)
				continue
			}
			if i, ok := open[p]; ok && field(e, "type") == "ok" && field(e, "token") == "" && field(e, "value") != "" {
				kept[i] = nil
				delete(open, p)
				continue
			}
			delete(open, p)
		}
		kept = append(kept, e)
	}
	var out []map[string]any
	for _, e := range kept {
		if e != nil {
			out = append(out, e)
		}
	}
	return out
}

// failRenewRelease turns the renews and releases that answered 200 into
// refusals (409 lost), which claim nothing.
func failRenewRelease(evs []map[string]any, _ Semantics) []map[string]any {
	for _, e := range evs {
		if f := field(e, "f"); (f == "renew" || f == "release") && field(e, "type") == "ok" {
			e["type"], e["error"] = "fail", "lost"
		}
	}
	return evs
}
