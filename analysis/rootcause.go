package analysis

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/history"
)

// The one count and the root causes. Three checkers may report one
// violation (the direct checks, Porcupine and the fast checker each see the
// acquire that returned a reused token), one checker may report it under two
// kinds (a reused token is both a duplicate and a regression), and one fault
// (a restart that reset the issuer's counter) explains dozens of them. The
// reader wants the opposite order: what happened, once, then how often.
//
// A violation is identified by the operation that shows it (Brief.Shows: the
// latest invoked of its operations); reports that share it are one
// violation. Porcupine's not-linearizable names a key, not a pattern: it
// joins the earliest other violation on that key, and counts on its own only
// when no other checker found one there. AnomalyCount is the number of
// distinct violations: the count the CLI's verdict line, the report's header
// and Anomalies tab, results.json and JUnit all show (AnomalyLine).
//
// The violations are then grouped by what explains them: the fault
// occurrence the cause rule names (Cause.Explains), else their key. Each
// group has one sentence, its count, the checkers that agree (marks) and a
// minimal witness: the fewest operations that show its first violation.

// Hypothesis is what a named cause is, and how to prove it: the words each
// root cause's sentence ends with.
const Hypothesis = "a hypothesis: `fencecheck shrink RUN_DIR` keeps only the faults the failure needs"

// IdleHypothesis ends the sentence of a root cause that idle time explains
// (causeidle.go): no fault to shrink to.
const IdleHypothesis = "a hypothesis: no fault touched the state before them; a run with `--nemesis none` leaves keys and locks idle too"

// maxWitnessOps bounds a witness: a handful of operations a reader checks
// by hand.
const maxWitnessOps = 5

// maxGroupListed bounds the anomalies (with their words) kept under one
// group; the count counts them all.
const maxGroupListed = 50

// Violation is one distinct violation, the checkers' reports of it merged.
type Violation struct {
	Model string `json:"model"`
	Key   string `json:"key,omitempty"`
	// Op is the operation that shows it (-1: a key-level report that names
	// none).
	Op int64 `json:"op"`
	// Kind is its kind as the most precise report names it (the direct
	// checks' first, not-linearizable last); Kinds every kind reported.
	Kind     string   `json:"kind"`
	Kinds    []string `json:"kinds"`
	Checkers []string `json:"checkers"`
	// Witness is the fewest operations a report of it names.
	Witness []int64         `json:"witness"`
	At      int64           `json:"at_ns"`
	Cause   *checkers.Cause `json:"cause,omitempty"`
}

// RootCause is a group of violations one thing explains.
type RootCause struct {
	// Sentence says it in one sentence.
	Sentence string `json:"sentence"`
	Count    int    `json:"count"`
	// Kinds counts its violations by Violation.Kind.
	Kinds map[string]int `json:"kinds"`
	// Keys counts the keys (locks or resources) its violations are on.
	Keys  int    `json:"keys"`
	Model string `json:"model"`
	// Key is the key of a group no fault explains.
	Key string `json:"key,omitempty"`
	// Checkers are those that reported its violations (the marks of their
	// agreement); Missed those that found its model valid (a disagreement:
	// a checker bug, or a pattern a sound check does not know). A checker
	// that found the model invalid but reports only a key's first
	// violation (Porcupine) is in neither for a later group.
	Checkers []string `json:"checkers"`
	Missed   []string `json:"missed,omitempty"`
	// Witness is the first violation's minimal witness (at most
	// maxWitnessOps operations), WitnessKind its kind.
	Witness     []int64 `json:"witness"`
	WitnessKind string  `json:"witness_kind"`
	At          int64   `json:"first_at_ns"`
	// Cause is what the cause rule names for the first violation: the
	// fault that explains them all (nil: none does).
	Cause *checkers.Cause `json:"cause,omitempty"`
	// Listed are the checkers' listed anomalies of this group, in words,
	// earliest first (at most maxGroupListed; Count counts them all).
	Listed []checkers.Anomaly `json:"-"`
}

// AnomalyLine is the one count in words, as every rendering shows it:
// "105 anomalies in 3 root causes".
func (r *Result) AnomalyLine() string {
	n, g := r.AnomalyCount, len(r.RootCauses)
	return fmt.Sprintf("%d %s in %d %s", n, plural(n, "anomaly", "anomalies"), g, plural(g, "root cause", "root causes"))
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// kindRank orders kinds by how precisely they name a violation: the direct
// checks' patterns before the fast checker's, not-linearizable last.
func kindRank(k string) int {
	switch k {
	case checkers.KindNotLinearizable:
		return 2
	case checkers.KindTokenRegression, checkers.KindDuplicateToken:
		// A reused token is both; "duplicate" says more (the same token).
		if k == checkers.KindDuplicateToken {
			return 0
		}
		return 1
	}
	return 0
}

func checkerRank(c string) int {
	switch c {
	case checkers.CheckerDirect:
		return 0
	case checkers.CheckerFast:
		return 1
	case checkers.CheckerPorcupine:
		return 3
	}
	return 2
}

// rootCauses merges the violations of r.Checks and groups them; the
// causes must be named already (nameCauses).
func (r *Result) rootCauses() {
	type report struct {
		checker string
		b       checkers.Brief
	}
	byOp := map[int64]*Violation{}
	var keyLevel []report
	valid := map[string][]string{} // model -> checkers that found it valid
	partial := false
	for _, c := range r.Checks {
		if c.Model == checkers.ModelLease {
			continue
		}
		if c.Verdict == checkers.Valid {
			// It decided the model and found nothing: a mark against.
			valid[c.Model] = appendNew(valid[c.Model], c.Checker)
			continue
		}
		found := c.Found
		if found == nil && c.OmittedAnomalies > 0 && !partial {
			partial = true
			r.Notes = append(r.Notes, "the anomaly count covers only the anomalies the stored checker results list (they list the earliest of each kind); check the history again (without --stored) for the full count")
		}
		if found == nil { // a replayed or hand-made result: its listed ones
			for _, a := range c.Anomalies {
				if !a.Finding {
					found = append(found, checkers.Brief{Kind: a.Kind, Model: orElse(a.Model, c.Model), Key: a.Key, Ops: a.Ops, At: a.At})
				}
			}
		}
		for _, b := range found {
			if b.Kind == checkers.KindTokensNotAuthenticated || b.Kind == checkers.KindLeaseOverlap {
				continue
			}
			if b.Kind == checkers.KindNotLinearizable || b.Shows() < 0 {
				keyLevel = append(keyLevel, report{c.Checker, b})
				continue
			}
			v := byOp[b.Shows()]
			if v == nil {
				v = &Violation{Model: b.Model, Key: b.Key, Op: b.Shows(), Kind: b.Kind, At: b.At}
				byOp[v.Op] = v
			}
			merge(v, c.Checker, b)
		}
	}
	vs := make([]*Violation, 0, len(byOp))
	for _, v := range byOp {
		vs = append(vs, v)
	}
	sortViolations(vs)
	// Key-level reports join the earliest violation on their key, or count
	// on their own.
	for _, rep := range keyLevel {
		var into *Violation
		for _, v := range vs {
			if v.Model == rep.b.Model && v.Key == rep.b.Key && (into == nil || v.At < into.At) {
				into = v
			}
		}
		if into == nil {
			into = &Violation{Model: rep.b.Model, Key: rep.b.Key, Op: rep.b.Shows(), Kind: rep.b.Kind, At: rep.b.At}
			vs = append(vs, into)
		}
		merge(into, rep.checker, rep.b)
	}
	sortViolations(vs)
	for _, v := range vs {
		v.Cause = r.cause(&checkers.Anomaly{Kind: v.Kind, Model: v.Model, Key: v.Key, Ops: r.window(v), At: v.At})
	}
	r.AnomalyCount = len(vs)
	r.ViolationKinds = map[string]int{}
	for _, v := range vs {
		r.ViolationKinds[v.Kind]++
	}
	var in []int
	r.RootCauses, in = group(vs, valid)
	r.listUnder(vs, in)
}

// maxWindowScan bounds the operations window looks back over.
const maxWindowScan = 50_000

// window is the operations that bound where the cause of v lies: its
// witness, narrowed for a reused token to the latest acquire of the same
// lock that had already returned a token at least as new before the
// acquire that shows it began. A witness names the first such acquire (a
// duplicate of token 1 from the run's first second); the counter reset
// happened after the latest one, and the faults before it cannot explain it.
func (r *Result) window(v *Violation) []int64 {
	if v.Model != checkers.ModelIssuer || v.Op < 0 || r.Ops == nil {
		return v.Witness
	}
	at := r.Ops.Find(v.Op)
	if at < 0 {
		return v.Witness
	}
	var b, o history.Op
	r.Ops.Load(at, &b)
	if b.F != history.Acquire || b.Token.State != history.TokenValid {
		return v.Witness
	}
	for i := at - 1; i >= 0 && i >= at-maxWindowScan; i-- {
		r.Ops.Load(i, &o)
		if o.F == history.Acquire && o.Outcome == history.OutcomeOk && o.Token.State == history.TokenValid &&
			(o.Key == b.Key || r.Semantics.Scope == checkers.ScopeGlobal) && o.Token.N >= b.Token.N && o.Completed < b.Call {
			return []int64{o.ID, b.ID}
		}
	}
	return v.Witness
}

func orElse(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func appendNew(xs []string, x string) []string {
	if slices.Contains(xs, x) {
		return xs
	}
	return append(xs, x)
}

// merge adds one checker's report b to v: its kind and checker, the
// earliest time, the fewest operations as the witness (the more precise
// report's on a tie).
func merge(v *Violation, checker string, b checkers.Brief) {
	v.Kinds = appendNew(v.Kinds, b.Kind)
	v.Checkers = appendNew(v.Checkers, checker)
	better := len(v.Witness) == 0 && len(b.Ops) > 0 ||
		len(b.Ops) > 0 && (kindRank(b.Kind) < kindRank(v.Kind) || kindRank(b.Kind) == kindRank(v.Kind) && len(b.Ops) < len(v.Witness))
	if better {
		v.Kind = b.Kind
		v.Witness = witness(b.Ops)
	}
	if b.Kind != checkers.KindNotLinearizable || v.Kind == checkers.KindNotLinearizable {
		v.At = min(v.At, b.At)
	}
	sort.Strings(v.Kinds)
	sort.Slice(v.Checkers, func(i, j int) bool { return checkerRank(v.Checkers[i]) < checkerRank(v.Checkers[j]) })
}

// witness is at most maxWitnessOps of ops: the operation that shows the
// violation (the latest invoked) and the earliest of the others.
func witness(ops []int64) []int64 {
	out := slices.Clone(ops)
	slices.Sort(out)
	out = slices.Compact(out)
	if len(out) > maxWitnessOps {
		out = append(out[:maxWitnessOps-1], out[len(out)-1])
	}
	return out
}

func sortViolations(vs []*Violation) {
	sort.SliceStable(vs, func(i, j int) bool {
		if vs[i].At != vs[j].At {
			return vs[i].At < vs[j].At
		}
		return vs[i].Op < vs[j].Op
	})
}

// group puts violations explained by one fault occurrence together, and
// the others by key; groups by their first violation.
func group(vs []*Violation, valid map[string][]string) ([]RootCause, []int) {
	var out []RootCause
	in := make([]int, len(vs))
	idx := map[string]int{}
	keys := map[int]map[string]bool{}
	for vi, v := range vs {
		id := "key\x00" + v.Model + "\x00" + v.Key
		switch {
		case v.Cause != nil && v.Cause.Explains && v.Cause.Idle > 0:
			id = "idle\x00" + v.Model // idle time, on every key it left alone
		case v.Cause != nil && v.Cause.Explains:
			id = fmt.Sprintf("fault\x00%d", v.Cause.Fault)
		}
		i, ok := idx[id]
		if !ok {
			i = len(out)
			idx[id] = i
			g := RootCause{Kinds: map[string]int{}, Model: v.Model, Witness: v.Witness, WitnessKind: v.Kind, At: v.At, Cause: v.Cause}
			if v.Cause == nil || !v.Cause.Explains {
				g.Key = v.Key
			}
			out = append(out, g)
			keys[i] = map[string]bool{}
		}
		in[vi] = i
		g := &out[i]
		g.Count++
		g.Kinds[v.Kind]++
		if g.Model != v.Model {
			g.Model = "" // one fault, both models
		}
		keys[i][v.Model+"\x00"+v.Key] = true
		for _, c := range v.Checkers {
			g.Checkers = appendNew(g.Checkers, c)
		}
	}
	for i := range out {
		g := &out[i]
		g.Keys = len(keys[i])
		sort.Slice(g.Checkers, func(a, b int) bool { return checkerRank(g.Checkers[a]) < checkerRank(g.Checkers[b]) })
		if g.Model != "" {
			g.Missed = valid[g.Model]
		}
		g.Sentence = sentence(g)
	}
	return out, in
}

// whatWentWrong says in words what a group's violations are.
var whatWentWrong = map[string]string{
	checkers.KindDuplicateToken:         "the issuer handed out tokens it had already handed out",
	checkers.KindTokenRegression:        "the issuer handed out tokens older than ones already returned",
	checkers.KindInvalidTokenIssued:     "acquires succeeded without a valid token",
	checkers.KindStaleWriteAccepted:     "the resource accepted writes with stale tokens",
	checkers.KindReplayAccepted:         "the resource accepted a token equal to its high-water mark again",
	checkers.KindMissingTokenAccepted:   "the resource accepted writes without a token",
	checkers.KindMalformedTokenAccepted: "the resource accepted writes with malformed tokens",
	checkers.KindForgedTokenAccepted:    "the resource accepted tokens no issuer sealed",
	checkers.KindFalseStaleRejection:    "the resource rejected writes as stale that were not",
	checkers.KindStaleRead:              "reads returned values already overwritten",
	checkers.KindReadOfRejectedWrite:    "reads returned values of rejected writes",
	checkers.KindPhantomRead:            "reads returned values no write wrote",
	checkers.KindFutureRead:             "reads returned values of writes not yet sent",
	checkers.KindReadTokenMismatch:      "reads returned a token other than their write's",
	checkers.KindReadWithoutToken:       "reads returned values without a valid token",
	checkers.KindWrongHighWater:         "stale rejections named a high-water mark the resource cannot have had",
	checkers.KindNotLinearizable:        "the operations have no linearization",
}

func sentence(g *RootCause) string {
	kinds := sortedKeys(g.Kinds)
	sort.SliceStable(kinds, func(i, j int) bool { return g.Kinds[kinds[i]] > g.Kinds[kinds[j]] })
	var whats []string
	for _, k := range kinds {
		w := whatWentWrong[k]
		if w == "" {
			w = k
		}
		if len(whats) < 2 && k != checkers.KindNotLinearizable && !slices.Contains(whats, w) {
			whats = append(whats, w)
		}
	}
	if len(whats) == 0 {
		whats = []string{whatWentWrong[checkers.KindNotLinearizable]}
	}
	if g.Kinds[checkers.KindDuplicateToken] > 0 && g.Kinds[checkers.KindTokenRegression] > 0 {
		// One reset counter gives both: say it once.
		whats = slices.DeleteFunc(whats, func(w string) bool {
			return w == whatWentWrong[checkers.KindDuplicateToken] || w == whatWentWrong[checkers.KindTokenRegression]
		})
		whats = append([]string{"the issuer handed out tokens again (ones it had already handed out, or older than ones already returned)"}, whats...)
	}
	what := strings.Join(whats, "; ")
	on := "key"
	if g.Model == checkers.ModelIssuer {
		on = "lock"
	}
	where := fmt.Sprintf("on %d %s", g.Keys, plural(g.Keys, on, on+"s"))
	switch {
	case g.Cause == nil || !g.Cause.Explains:
		where = fmt.Sprintf("on %s %s", on, clipNote(g.Key))
		if g.Key == "" && g.Model == checkers.ModelIssuer {
			where = "in the global token scope"
		}
	}
	var parts []string
	for _, k := range kinds {
		parts = append(parts, fmt.Sprintf("%s ×%d", k, g.Kinds[k]))
	}
	s := fmt.Sprintf("%s: %d %s %s (%s)", upper(what), g.Count, plural(g.Count, "violation", "violations"), where, strings.Join(parts, ", "))
	switch {
	case g.Cause != nil && g.Cause.Explains && g.Cause.Idle > 0:
		s += "; they " + g.Cause.Text + " (" + IdleHypothesis + ")"
	case g.Cause != nil && g.Cause.Explains:
		s += "; they " + g.Cause.Text + " (" + Hypothesis + ")"
	case g.Cause != nil:
		s += "; no fault explains them (" + g.Cause.Text + ")"
	default:
		s += "; no fault explains them"
	}
	return s
}

func upper(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// listUnder puts each listed anomaly (with its words) under the group of
// its violation: vs are the violations, in[i] the group of vs[i].
func (r *Result) listUnder(vs []*Violation, in []int) {
	at := map[int64]int{}     // shown op -> group
	byKey := map[string]int{} // model, key -> the group of its first violation
	for i, v := range vs {
		at[v.Op] = in[i]
		if _, ok := byKey[v.Model+"\x00"+v.Key]; !ok {
			byKey[v.Model+"\x00"+v.Key] = in[i]
		}
	}
	for _, a := range r.Anomalies() {
		if a.Finding || a.Model == checkers.ModelLease {
			continue
		}
		gi, ok := at[checkers.Brief{Ops: a.Ops}.Shows()]
		if !ok || a.Kind == checkers.KindNotLinearizable {
			gi, ok = byKey[a.Model+"\x00"+a.Key]
		}
		if ok && len(r.RootCauses[gi].Listed) < maxGroupListed {
			r.RootCauses[gi].Listed = append(r.RootCauses[gi].Listed, a)
		}
	}
}

// WitnessOps are the operations of a witness, for a renderer (nil for an
// id the history lacks).
func (r *Result) WitnessOps(ids []int64) []*history.Op {
	out := make([]*history.Op, 0, len(ids))
	for _, id := range ids {
		out = append(out, r.Op(id))
	}
	return out
}
