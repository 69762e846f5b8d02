// Package models checks fencecheck histories against the fenced-register and
// issuer models.
//
// Check (or CheckOps, for operations already paired by a streaming Pairer)
// runs, on the same paired operations:
//
//   - the direct checks (direct.go, worded in explain.go): sound, fast
//     checks that name each anomaly with its operations and the history time
//     it became visible; always on;
//   - Porcupine (porcupine.go), per key, within a time budget: complete, but
//     exponential in a key's concurrency, so it may answer Unknown;
//   - the fast checker (fast*.go), plugged in through RegisterFastChecker:
//     complete and polynomial for these models.
//
// Report combines them (see Report.Verdict), gives the time to detection
// (FirstInvalidAt) and writes Porcupine's visualization per key.
package models

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/fencecheck/fencecheck/history"
)

// Defaults for Options.
const (
	// DefaultTimeout bounds Porcupine's search over a whole history.
	DefaultTimeout = time.Minute
	// DefaultMinOps is the fewest definite (ok or fail) client operations a
	// history needs for a "valid" verdict to mean anything.
	DefaultMinOps = 10
)

// CheckerBoth selects Porcupine and the fast checker (Options.Checker).
const CheckerBoth = "both"

// Options configure Check. The direct checks (anomalies in words) always run;
// Checker selects the complete checkers beside them.
type Options struct {
	Semantics Semantics
	// Checker is "porcupine", "fast" or "both" ("" means both). With "both",
	// a fast checker that is not built in is skipped; with "fast" it is an
	// error.
	Checker string
	// Timeout bounds Porcupine's search over the whole history (0 means
	// DefaultTimeout). Keys not decided in time are Unknown, never Valid.
	Timeout time.Duration
	// MinOps: with fewer definite client operations the verdict is Unknown
	// unless a violation was found (0 means DefaultMinOps, negative means no
	// minimum).
	MinOps int
	_      struct{}
}

// FastCheckFunc is the specialised checker's entry point (models/fast*.go). It
// receives the paired operations (shared: it must not modify them) and the
// declared semantics, honours ctx, and returns one Result per model it
// checks, with Checker "fast" and Model ModelRegister or ModelIssuer.
type FastCheckFunc func(ctx context.Context, ops []*history.Op, sem Semantics) []Result

var fastChecker FastCheckFunc

// RegisterFastChecker plugs the specialised checker into Check. Call it from
// an init function.
func RegisterFastChecker(fc FastCheckFunc) { fastChecker = fc }

// Report is the answer of every checker on one history.
type Report struct {
	Semantics Semantics `json:"semantics"`
	Checker   string    `json:"checker"`
	// Verdict is the overall verdict: invalid when a direct check found a
	// violation (each is a proof), or a complete checker said invalid and
	// none said valid; unknown when complete checkers disagree (a checker
	// bug: both answers are in Reason), when none decided a model, or when
	// the history is too short; valid otherwise. The complete checkers are
	// porcupine and fast, and for the issuer also direct (see
	// issuerAnomalies); so a Porcupine timeout is decided by another
	// complete checker when there is one, and is Unknown otherwise.
	Verdict Verdict `json:"verdict"`
	Reason  string  `json:"reason,omitempty"`
	// Results holds one Result per checker and model.
	Results []Result `json:"results"`
	// FirstInvalidAt is the earliest history time (ns) at which some
	// violation became visible (time to detection); -1 when none.
	FirstInvalidAt int64 `json:"first_invalid_at_ns"`
	// Ops counts client operations; Definite those that ended ok or fail.
	Ops      int `json:"ops"`
	Definite int `json:"definite_ops"`
	// Keys are Porcupine's per-key verdicts (for visualizations).
	Keys    []KeyResult   `json:"porcupine_keys,omitempty"`
	Elapsed time.Duration `json:"duration_ns"`

	porcupine map[string]*porcupineKey
	faults    []faultPeriod
	end       int64
	timeout   time.Duration
}

// ExitCode maps the verdict to the process exit code: 0 valid, 1 invalid,
// 2 unknown.
func (r *Report) ExitCode() int {
	switch r.Verdict {
	case Valid:
		return 0
	case Invalid:
		return 1
	}
	return 2
}

// Anomalies lists every result's anomalies, earliest first.
func (r *Report) Anomalies() []Anomaly {
	var out []Anomaly
	for _, res := range r.Results {
		out = append(out, res.Anomalies...)
	}
	sortAnomalies(out)
	return out
}

// Check pairs a history and checks it.
func Check(ctx context.Context, events []history.Event, opts Options) (*Report, error) {
	ops, err := history.Pair(events)
	if err != nil {
		return nil, err
	}
	rep, err := CheckOps(ctx, ops, opts)
	if rep != nil {
		rep.faults, rep.end = faultPeriods(events)
	}
	return rep, err
}

// CheckOps checks paired operations (see Pair and Pairer, which stream).
func CheckOps(ctx context.Context, ops []*history.Op, opts Options) (*Report, error) {
	start := time.Now()
	sem := opts.Semantics
	if sem.Equal == "" {
		sem.Equal = EqualReject
	}
	if sem.Scope == "" {
		sem.Scope = ScopePerLock
	}
	if sem.Equal != EqualReject && sem.Equal != EqualAccept {
		return nil, fmt.Errorf("semantics: equal must be %q or %q, not %q", EqualReject, EqualAccept, sem.Equal)
	}
	if sem.Scope != ScopePerLock && sem.Scope != ScopeGlobal {
		return nil, fmt.Errorf("semantics: scope must be %q or %q, not %q", ScopePerLock, ScopeGlobal, sem.Scope)
	}
	checker := opts.Checker
	if checker == "" {
		checker = CheckerBoth
	}
	runPorc, runFast := false, false
	switch checker {
	case CheckerBoth:
		runPorc, runFast = true, fastChecker != nil
	case CheckerPorcupine:
		runPorc = true
	case CheckerFast:
		if fastChecker == nil {
			return nil, errors.New("checker \"fast\" is not built into this binary")
		}
		runFast = true
	default:
		return nil, fmt.Errorf("checker must be fast, porcupine or both, not %q", checker)
	}
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	minOps := opts.MinOps
	if minOps == 0 {
		minOps = DefaultMinOps
	}

	h := groupOps(ops, sem)
	rep := &Report{Semantics: sem, Checker: checker, Ops: len(ops), Definite: h.definite,
		FirstInvalidAt: -1, timeout: timeout, porcupine: map[string]*porcupineKey{}}

	rep.Results = append(rep.Results, checkDirect(ctx, h, sem)...)
	if runPorc {
		rep.Results = append(rep.Results, rep.checkPorcupine(ctx, h, sem, timeout)...)
	}
	if runFast {
		fs := time.Now()
		res := fastChecker(ctx, ops, sem)
		for i := range res {
			if res[i].Duration == 0 {
				res[i].Duration = time.Since(fs)
			}
		}
		rep.Results = append(rep.Results, res...)
	}
	rep.decide(minOps)
	rep.Elapsed = time.Since(start)
	return rep, nil
}

// opsByKey is a history's operations as the models see them.
type opsByKey struct {
	register     map[string]*keyOps
	registerKeys []string
	// issuer holds ok acquires per token scope (lock, or "" for global).
	issuer      map[string][]*history.Op
	issuerKeys  []string
	allAcquires []*history.Op
	definite    int
}

type keyOps struct {
	writes []*history.Op // every outcome
	reads  []*history.Op // ok only
}

func groupOps(ops []*history.Op, sem Semantics) *opsByKey {
	h := &opsByKey{register: map[string]*keyOps{}, issuer: map[string][]*history.Op{}}
	reg := func(k string) *keyOps {
		ko := h.register[k]
		if ko == nil {
			ko = &keyOps{}
			h.register[k] = ko
			h.registerKeys = append(h.registerKeys, k)
		}
		return ko
	}
	for _, op := range ops {
		if op.Outcome != history.OutcomeInfo {
			h.definite++
		}
		switch op.F {
		case history.Write:
			ko := reg(op.Key)
			ko.writes = append(ko.writes, op)
		case history.Read:
			if op.Outcome == history.OutcomeOk {
				ko := reg(op.Key)
				ko.reads = append(ko.reads, op)
			}
		case history.Acquire:
			if op.Outcome != history.OutcomeOk {
				continue
			}
			scope := op.Key
			if sem.Scope == ScopeGlobal {
				scope = ""
			}
			if _, ok := h.issuer[scope]; !ok {
				h.issuerKeys = append(h.issuerKeys, scope)
			}
			h.issuer[scope] = append(h.issuer[scope], op)
			h.allAcquires = append(h.allAcquires, op)
		}
	}
	// Operations in invoke order within each key: deterministic output.
	byID := func(ops []*history.Op) {
		sort.Slice(ops, func(i, j int) bool { return ops[i].ID < ops[j].ID })
	}
	for _, ko := range h.register {
		byID(ko.writes)
		byID(ko.reads)
	}
	for _, acqs := range h.issuer {
		byID(acqs)
	}
	sort.Strings(h.registerKeys)
	sort.Strings(h.issuerKeys)
	return h
}

func pkKey(model, key string) string { return model + "\x00" + key }

// checkPorcupine runs Porcupine on every key and sums up per model.
func (r *Report) checkPorcupine(ctx context.Context, h *opsByKey, sem Semantics, timeout time.Duration) []Result {
	start := time.Now()
	deadline := start.Add(timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	var keys []*porcupineKey
	for _, k := range h.registerKeys {
		ko := h.register[k]
		keys = append(keys, &porcupineKey{model: ModelRegister, key: k, writes: ko.writes, reads: ko.reads, sem: sem})
	}
	for _, k := range h.issuerKeys {
		keys = append(keys, &porcupineKey{model: ModelIssuer, key: k, acquires: h.issuer[k], sem: sem})
	}
	runPorcupine(ctx, keys, deadline)
	elapsed := time.Since(start)

	results := map[string]*Result{
		ModelRegister: {Checker: CheckerPorcupine, Model: ModelRegister, Verdict: Valid},
		ModelIssuer:   {Checker: CheckerPorcupine, Model: ModelIssuer, Verdict: Valid},
	}
	unknown := map[string][]string{}
	for _, k := range keys {
		r.porcupine[pkKey(k.model, k.key)] = k
		r.Keys = append(r.Keys, k.result)
		res := results[k.model]
		res.Keys++
		res.Ops += k.result.Ops
		switch k.result.Verdict {
		case Invalid:
			res.Verdict = Invalid
			res.Anomalies = append(res.Anomalies, notLinearizable(k))
		case Unknown:
			if res.Verdict != Invalid {
				res.Verdict = Unknown
			}
			unknown[k.model] = append(unknown[k.model], scopeName(k.model, k.key))
		}
	}
	sort.Slice(r.Keys, func(i, j int) bool {
		if r.Keys[i].Model != r.Keys[j].Model {
			return r.Keys[i].Model < r.Keys[j].Model
		}
		return r.Keys[i].Key < r.Keys[j].Key
	})
	var out []Result
	for _, m := range []string{ModelRegister, ModelIssuer} {
		res := results[m]
		res.Duration = elapsed
		if u := unknown[m]; len(u) > 0 {
			why := fmt.Sprintf("no answer within %s", timeout)
			if ctx.Err() != nil {
				why = "interrupted: " + ctx.Err().Error()
			}
			res.Reason = fmt.Sprintf("%s on %d of %d keys (%s)", why, len(u), res.Keys, abbreviate(u, 5))
		}
		capAnomalies(res, MaxAnomaliesPerKind)
		out = append(out, *res)
	}
	return out
}

func scopeName(model, key string) string {
	if model == ModelIssuer && key == "" {
		return "all locks"
	}
	return key
}

func abbreviate(names []string, n int) string {
	sort.Strings(names)
	if len(names) <= n {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:n], ", "), len(names)-n)
}

// notLinearizable explains an invalid Porcupine key.
func notLinearizable(k *porcupineKey) Anomaly {
	what := "key " + k.key
	if k.model == ModelIssuer {
		what = "lock " + k.key
		if k.key == "" {
			what = "the global token scope"
		}
	}
	a := Anomaly{Kind: KindNotLinearizable, Model: k.model, Key: k.key}
	if k.result.FirstInvalidAt >= 0 {
		a.At = k.result.FirstInvalidAt
		a.Ops = k.result.Culprits
		a.Text = fmt.Sprintf("porcupine found no linearization of the %d operations on %s; the history was first non-linearizable at %s, when %s completed",
			k.result.Ops, what, secs(a.At), opList(a.Ops))
		return a
	}
	// Not narrowed down in time: the history showed it at the latest by
	// its last completion.
	for _, list := range [][]*history.Op{k.writes, k.reads, k.acquires} {
		for _, op := range list {
			if op.Completed != history.Never && op.Completed > a.At {
				a.At = op.Completed
			}
		}
	}
	a.Text = fmt.Sprintf("porcupine found no linearization of the %d operations on %s (the first point of violation was not narrowed down in time; %s is an upper bound)",
		k.result.Ops, what, secs(a.At))
	return a
}

func opList(ids []int64) string {
	if len(ids) == 0 {
		return "an operation"
	}
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = fmt.Sprint(id)
	}
	if len(s) == 1 {
		return "op " + s[0]
	}
	return "ops " + strings.Join(s, ", ")
}

// decide sets the overall verdict, its reason and FirstInvalidAt.
func (r *Report) decide(minOps int) {
	for _, res := range r.Results {
		for _, a := range res.Anomalies {
			if !a.Finding && (r.FirstInvalidAt < 0 || a.At < r.FirstInvalidAt) {
				r.FirstInvalidAt = a.At
			}
		}
	}
	find := func(checker, model string) *Result {
		for i := range r.Results {
			if r.Results[i].Checker == checker && r.Results[i].Model == model {
				return &r.Results[i]
			}
		}
		return nil
	}
	decisive := func(res *Result) bool { return res != nil && (res.Verdict == Valid || res.Verdict == Invalid) }

	var invalid, unknown, disagree []string
	for _, m := range []string{ModelRegister, ModelIssuer} {
		if d := find(CheckerDirect, m); d != nil && d.Verdict == Invalid {
			invalid = append(invalid, fmt.Sprintf("%s: %s", m, kindSummary(d)))
		}
		// The complete checkers of this model: each decides it alone.
		complete := []*Result{find(CheckerPorcupine, m), find(CheckerFast, m)}
		if m == ModelIssuer {
			complete = append(complete, find(CheckerDirect, m)) // see issuerAnomalies
		}
		var answers []string
		verdicts := map[Verdict]bool{}
		for _, c := range complete {
			if decisive(c) {
				verdicts[c.Verdict] = true
				answers = append(answers, fmt.Sprintf("%s says %s", c.Checker, c.Verdict))
			}
		}
		switch {
		case len(verdicts) > 1:
			disagree = append(disagree, fmt.Sprintf("%s: %s", m, strings.Join(answers, ", ")))
		case verdicts[Invalid]:
			for _, c := range complete {
				if decisive(c) && c.Checker != CheckerDirect {
					invalid = append(invalid, fmt.Sprintf("%s: %s says invalid", m, c.Checker))
				}
			}
		case !verdicts[Valid]:
			for _, c := range complete {
				if c != nil {
					unknown = append(unknown, fmt.Sprintf("%s: %s: %s", m, c.Checker, c.Reason))
				}
			}
		}
	}
	directInvalid := false
	for _, res := range r.Results {
		directInvalid = directInvalid || (res.Checker == CheckerDirect && res.Verdict == Invalid)
	}
	switch {
	case directInvalid:
		r.Verdict = Invalid
		r.Reason = strings.Join(invalid, "; ")
		if len(disagree) > 0 {
			r.Reason += "; complete checkers disagree: " + strings.Join(disagree, "; ")
		}
	case len(disagree) > 0:
		r.Verdict = Unknown
		r.Reason = "complete checkers disagree (a checker bug; see both answers): " + strings.Join(disagree, "; ")
	case len(invalid) > 0:
		r.Verdict = Invalid
		r.Reason = strings.Join(invalid, "; ")
	case len(unknown) > 0:
		r.Verdict = Unknown
		r.Reason = strings.Join(unknown, "; ")
	case minOps > 0 && r.Definite < minOps:
		r.Verdict = Unknown
		r.Reason = fmt.Sprintf("too few operations to judge: %d ended ok or fail, at least %d needed", r.Definite, minOps)
	default:
		r.Verdict = Valid
	}
}

func kindSummary(res *Result) string {
	counts := res.KindCounts
	if counts == nil {
		counts = map[string]int{}
		for _, a := range res.Anomalies {
			counts[a.Kind]++
		}
	}
	var parts []string
	for k, n := range counts {
		if k == KindTokensNotAuthenticated {
			continue
		}
		parts = append(parts, fmt.Sprintf("%d %s", n, k))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

// faultPeriod is one nemesis fault, for visualization annotations and for
// naming the fault before a violation.
type faultPeriod struct {
	name, mode string
	start, end int64
	detail     string
	// stopped: the history has its stop event (end is then that event's
	// time, not the history's end).
	stopped bool
}

// faultPeriods pairs nemesis start/stop events (a stop closes the open start
// of the same nemesis and extra.id, the oldest one first); faults never
// stopped last until the end of the history (the returned end time).
func faultPeriods(events []history.Event) ([]faultPeriod, int64) {
	var end int64
	open := map[string][]int{}
	var out []faultPeriod
	for _, e := range events {
		end = max(end, e.Time)
		if e.Process != history.NemesisProcess || e.IsTamper() || e.IsRun() {
			continue
		}
		key := e.F + "\x00" + string(e.Extra["id"])
		switch strings.Trim(string(e.Extra["action"]), `"`) {
		case "start":
			open[key] = append(open[key], len(out))
			out = append(out, faultPeriod{name: e.F, mode: strings.Trim(string(e.Extra["mode"]), `"`),
				start: e.Time, end: -1, detail: e.Node})
		case "stop":
			if q := open[key]; len(q) > 0 {
				out[q[0]].end, out[q[0]].stopped = e.Time, true
				open[key] = q[1:]
			}
		}
	}
	for i := range out {
		if out[i].end < 0 {
			out[i].end = end
		}
	}
	return out, end
}

// AnnotateFaults gives a report made by CheckOps (from a streamed history)
// the fault periods its visualizations shade: faults are the history's
// nemesis events (few, so a streaming reader can keep them) and end the
// time of its last event.
func (r *Report) AnnotateFaults(faults []history.Event, end int64) {
	r.faults, r.end = faultPeriods(append(faults, history.Event{Time: end, Process: history.NemesisProcess}))
}
