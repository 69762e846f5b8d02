package analysis

import (
	"fmt"
	"slices"
	"strings"

	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/history"
	"github.com/fencecheck/fencecheck/nemesis"
)

// The cause rule, the one place a violation is attributed to a fault: the
// anomaly text, results.json's after_fault, the CLI summary and the report
// all show what nameCauses sets.
//
// A fault explains an anomaly when it is of a kind that can produce it
// (causeRules: by the effects nemeses declare, nemesis.Effect), lies in the
// anomaly's window (from the earliest call among
// its operations to when the history showed it: between the two acquires of
// a token regression, since the overwritten write of a stale read), and,
// preferably, acted on a node the operations went to. Of the kinds a rule
// lists, earlier tiers are preferred (a counter that resets is likelier
// after a restart than after a partition); within a tier the latest such
// fault. An accepted write without a valid token whose token the strip proxy
// changed is explained by that strip fault. Only when nothing fits is the
// last fault event (a start, or a stop) before the anomaly named, and the
// words then say that it is only that. The rule names a fault; it does not
// prove causation.

// causeSeparator joins an anomaly's text and its cause's.
const causeSeparator = " — "

type causeRule struct {
	// tiers are the effects of faults that can produce the anomaly,
	// likeliest first.
	tiers [][]nemesis.Effect
	// window says in words where the fault lies.
	window string
	// tamper: the strip proxy's tampering with the accepted write explains it.
	tamper bool
}

var (
	lostState = [][]nemesis.Effect{{nemesis.LosesState}, {nemesis.FailsWrites}, {nemesis.Separates}}
	lateWrite = [][]nemesis.Effect{{nemesis.LosesState}, {nemesis.FailsWrites}, {nemesis.Separates}, {nemesis.Delays}}

	issuerRule   = causeRule{tiers: [][]nemesis.Effect{{nemesis.LosesState}, {nemesis.FailsWrites}, {nemesis.Separates}, {nemesis.SkewsClocks}}, window: "between the acquires"}
	readRule     = causeRule{tiers: lostState, window: "since the overwritten write"}
	writeRule    = causeRule{tiers: lateWrite, window: "since the overwritten write"}
	strippedRule = causeRule{tamper: true, window: "tampering with this write's token"}
)

// causeRules maps anomaly kinds to what can explain them; other kinds get
// the last fault event before them.
var causeRules = map[string]causeRule{
	checkers.KindTokenRegression:        issuerRule,
	checkers.KindDuplicateToken:         issuerRule,
	checkers.KindStaleRead:              readRule,
	checkers.KindStaleWriteAccepted:     writeRule,
	checkers.KindReplayAccepted:         writeRule,
	checkers.KindMissingTokenAccepted:   strippedRule,
	checkers.KindMalformedTokenAccepted: strippedRule,
}

// notLinearizableRules: Porcupine names no pattern, only the operations
// whose completion made the key non-linearizable, which bound nothing: a
// key's not-linearizable gets the cause of another checker's anomaly on that
// key when there is one (the same fault, in every rendering), else a fault
// of a kind the model's anomalies come from, anywhere before it.
var notLinearizableRules = map[string]causeRule{
	checkers.ModelIssuer:   {tiers: issuerRule.tiers, window: "before it"},
	checkers.ModelRegister: {tiers: lateWrite, window: "before it"},
}

// nameCauses sets the Cause of every violation in r.Checks and appends its
// words to the anomaly's text.
func nameCauses(r *Result) {
	type keyOf struct{ model, key string }
	explained := map[keyOf][]*checkers.Anomaly{}
	each := func(fn func(a *checkers.Anomaly)) {
		for i := range r.Checks {
			for j := range r.Checks[i].Anomalies {
				if a := &r.Checks[i].Anomalies[j]; !a.Finding {
					fn(a)
				}
			}
		}
	}
	set := func(a *checkers.Anomaly, c *checkers.Cause) {
		if c != nil {
			a.Cause = c
			a.Text += causeSeparator + c.Text
		}
	}
	each(func(a *checkers.Anomaly) {
		if a.Kind == checkers.KindNotLinearizable {
			return
		}
		set(a, r.cause(a))
		if a.Cause != nil && a.Cause.Explains {
			k := keyOf{a.Model, a.Key}
			explained[k] = append(explained[k], a)
		}
	})
	each(func(a *checkers.Anomaly) {
		if a.Kind != checkers.KindNotLinearizable {
			return
		}
		var best *checkers.Anomaly
		for _, o := range explained[keyOf{a.Model, a.Key}] {
			if o.At <= a.At && (best == nil || o.At > best.At) {
				best = o
			}
		}
		if best == nil {
			set(a, r.cause(a))
			return
		}
		c := *best.Cause
		c.Delay = a.At - c.Start
		set(a, &c)
	})
}

// maxNamedSuspects bounds the faults a cause's words name; Cause.Also
// holds them all.
const maxNamedSuspects = 3

// cause applies the rule to one anomaly: every fault that can explain it,
// in the rule's order, the first as the Cause's fault and the others in
// Also; the words name them all (up to maxNamedSuspects) as what can
// explain it, a hypothesis, never as the one cause.
func (r *Result) cause(a *checkers.Anomaly) *checkers.Cause {
	rule, ok := causeRules[a.Kind]
	if a.Kind == checkers.KindNotLinearizable {
		rule, ok = notLinearizableRules[a.Model]
	}
	var ops []*history.Op
	for _, id := range a.Ops {
		if op := r.Op(id); op != nil {
			ops = append(ops, op)
		}
	}
	rec, w := r.writeWindow(a, ops)
	var fs []int
	window := rule.window
	if ok && len(ops) > 0 {
		if rec.held >= 0 {
			// The resource rejected a token at least as new after the
			// faults: a late arrival alone cannot have it accepted now.
			window, rule.tiers = heldWindow(rec), withoutDelays(rule.tiers)
		}
		fs = r.explaining(rule, a, ops, rec.held)
	}
	suspects := func(c *checkers.Cause, fs []int) {
		for _, fi := range fs {
			f := r.Faults[fi]
			c.Also = append(c.Also, checkers.Suspect{Fault: fi, Nemesis: f.Nemesis, Node: f.Node, Start: f.Start, Stop: f.Stop})
		}
	}
	// Idle time goes before faults that only delay requests: they make a
	// write late, not a resource forget. After faults that can lose state,
	// it is named as one more hypothesis.
	losing := slices.DeleteFunc(slices.Clone(fs), r.onlyDelays)
	from, to, idleWords, idle := r.idleTime(a, ops, rec, w, losing)
	if idle && len(losing) == 0 {
		text := "can be explained by " + idleWords
		if rec.held >= 0 {
			text += heldWords(rec)
		}
		if len(fs) > 0 {
			text += ", or by " + r.faultNames(fs) // in the window the words named
		}
		c := idleOf(a, from, to, text)
		suspects(c, fs)
		return c
	}
	if len(fs) > 0 {
		text := "can be explained by " + r.faultNames(fs) + " " + window
		if idle {
			text += ", or by " + idleWords
		}
		c := r.causeOf(fs[0], a, true, text)
		suspects(c, fs[1:])
		return c
	}
	return r.lastFaultBefore(a)
}

// faultNames names faults fs in words, at most maxNamedSuspects of them.
func (r *Result) faultNames(fs []int) string {
	var names []string
	for i, fi := range fs {
		if i == maxNamedSuspects {
			names = append(names, fmt.Sprintf("%d more %s", len(fs)-i, plural(len(fs)-i, "fault", "faults")))
			break
		}
		names = append(names, r.Faults[fi].what()+" "+span(r.Faults[fi]))
	}
	return strings.Join(names, ", or ")
}

// lossRank is how much a fault that loses state can lose: one that loses
// unsynced writes (a power loss) can explain all a kill can and more, one
// that wipes durable data more again. The rule names the one that explains
// the most first.
func lossRank(name string) int {
	n := 0
	for _, e := range []nemesis.Effect{nemesis.LosesUnsynced, nemesis.LosesDurable} {
		if nemesis.HasEffect(name, e) {
			n++
		}
	}
	return n
}

// explaining lists the faults that explain a under rule, in the rule's
// order: by tier; within one, faults on a node the operations went to
// first, then those that can lose more (lossRank), then the latest. A fault
// that ended before notBefore (the resource showed it still knew the mark
// then: writeWindow) explains nothing.
func (r *Result) explaining(rule causeRule, a *checkers.Anomaly, ops []*history.Op, notBefore int64) []int {
	if rule.tamper {
		w := ops[0]
		if w.F != history.Write || w.Tampered == "" {
			return nil
		}
		best := -1
		for i, f := range r.Faults {
			if nemesis.HasEffect(f.Nemesis, nemesis.Tampers) && !f.Instant() && f.Start <= w.Completed && f.Stop >= w.Call {
				best = i
			}
		}
		if best < 0 {
			return nil
		}
		return []int{best}
	}
	from := ops[0].Call
	nodes := map[string]bool{}
	for _, op := range ops {
		from = min(from, op.Call)
		if op.Node != "" {
			nodes[op.Node] = true
		}
	}
	if a.Kind == checkers.KindNotLinearizable {
		from = 0
	}
	from = max(from, notBefore)
	var out []int
	for _, tier := range rule.tiers {
		var in []int
		for i, f := range r.Faults {
			if f.Instant() || f.Start > a.At || f.Stop < from || !hasEffect(f.Nemesis, tier) || slices.Contains(out, i) {
				continue
			}
			in = append(in, i)
		}
		onNode := func(i int) bool { return len(nodes) == 0 || r.Faults[i].on(nodes) }
		slices.SortStableFunc(in, func(x, y int) int {
			if ox, oy := onNode(x), onNode(y); ox != oy {
				if ox {
					return -1
				}
				return 1
			}
			if d := lossRank(r.Faults[y].Nemesis) - lossRank(r.Faults[x].Nemesis); d != 0 {
				return d
			}
			return y - x // faults are by start: the latest first
		})
		out = append(out, in...)
	}
	return out
}

// lastFaultBefore names the fault event (a start, or the stop of a fault:
// a node coming back) that came last at or before the anomaly.
func (r *Result) lastFaultBefore(a *checkers.Anomaly) *checkers.Cause {
	t := a.At
	if t <= 0 {
		return nil
	}
	last, lastAt, ended := -1, int64(-1), false
	for i, f := range r.Faults {
		if f.Instant() {
			continue
		}
		if !f.Open && f.Stop <= t && f.Stop >= lastAt {
			last, lastAt, ended = i, f.Stop, true
		}
		if f.Start <= t && f.Start > lastAt {
			last, lastAt, ended = i, f.Start, false
		}
	}
	if last < 0 {
		return nil
	}
	f := r.Faults[last]
	text := fmt.Sprintf("the last fault event before it: %s began at %s, %s before", f.what(), checkers.Secs(f.Start), checkers.Secs(t-f.Start))
	if ended {
		text = fmt.Sprintf("the last fault event before it: %s %s ended %s before", f.what(), span(f), checkers.Secs(t-f.Stop))
	}
	return r.causeOf(last, a, false, text)
}

func (r *Result) causeOf(i int, a *checkers.Anomaly, explains bool, text string) *checkers.Cause {
	f := r.Faults[i]
	return &checkers.Cause{Fault: i, Nemesis: f.Nemesis, Node: f.Node, Start: f.Start, Stop: f.Stop, Open: f.Open,
		Delay: a.At - f.Start, Explains: explains, Text: text}
}

// span is a fault's period in words: "(2.25–2.88 s)", "(from 2.25 s)".
func span(f Fault) string {
	if f.Open {
		return fmt.Sprintf("(from %s)", checkers.Secs(f.Start))
	}
	return fmt.Sprintf("(%s–%s)", strings.TrimSuffix(checkers.Secs(f.Start), " s"), checkers.Secs(f.Stop))
}

// hasEffect reports whether the nemesis of the name declares one of effects.
func hasEffect(name string, effects []nemesis.Effect) bool {
	for _, e := range effects {
		if nemesis.HasEffect(name, e) {
			return true
		}
	}
	return false
}
