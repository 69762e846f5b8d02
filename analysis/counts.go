package analysis

import (
	"fmt"
	"slices"
	"strings"

	"github.com/fencecheck/fencecheck/history"
	"github.com/fencecheck/fencecheck/nemesis"
)

// Counts are the sizes of the history.
type Counts struct {
	Events int `json:"events"`
	// Ops counts client operations; Definite those that ended ok or fail.
	Ops      int `json:"ops"`
	Definite int `json:"definite_ops"`
	// Keys counts the distinct keys (resources and locks) of client events,
	// Processes the distinct client processes.
	Keys      int `json:"keys"`
	Processes int `json:"processes"`
	// ByOp counts operations by f and outcome ("ok", "fail", "info").
	ByOp map[string]map[string]int `json:"by_op"`
	// TamperedWrites counts writes whose token the strip proxy changed.
	TamperedWrites int `json:"tampered_writes,omitempty"`
	// Faults counts the fault periods and markers.
	Faults int `json:"faults"`
}

// NemesisCount is how often a nemesis acted, as results.json says it: the
// one count (nemesis.Count, read from the nemesis's events) rendered.
type NemesisCount struct {
	Started int `json:"started"`
	// Failed counts tries that failed to start (error events), LastError
	// the last one's error.
	Failed    int    `json:"failed,omitempty"`
	LastError string `json:"last_error,omitempty"`
	// Modes counts the same by fault mode (the events' extra.mode: "node",
	// "step", "minority"...; "" for faults without one) for a nemesis that
	// both applied and failed to: a mode that never applied was never
	// exercised, whatever the others did.
	Modes map[string]ModeCount `json:"modes,omitempty"`
	// EndFailed counts faults that could not be undone, even by the final
	// heal (a killed node that did not start again, a pause not lifted: the
	// stop event's error), LastEndError the last one's error. EndRetried
	// counts faults that could not be undone when they were due to end
	// (stop-failed events) and were left for the final heal to try again.
	EndFailed    int    `json:"failed_to_end,omitempty"`
	LastEndError string `json:"last_end_error,omitempty"`
	EndRetried   int    `json:"retried_at_heal,omitempty"`
}

// ModeCount is how often one mode of a nemesis applied and failed to.
type ModeCount struct {
	Started   int    `json:"started"`
	Failed    int    `json:"failed,omitempty"`
	LastError string `json:"last_error,omitempty"`
}

// FaultLines says in a line how many faults of each nemesis applied and,
// when any failed to apply, in another how many and the last error: for
// the summary and the report.
func FaultLines(nemeses map[string]NemesisCount) []string {
	if len(nemeses) == 0 {
		return nil
	}
	var applied, failed, unended, retried []string
	for _, n := range sortedKeys(nemeses) {
		c := nemeses[n]
		applied = append(applied, fmt.Sprintf("%s %d", n, c.Started))
		if c.Failed > 0 {
			failed = append(failed, fmt.Sprintf("%s %d of %d (last error: %s)", n, c.Failed, c.Started+c.Failed, c.LastError))
		}
		if c.EndFailed > 0 {
			unended = append(unended, fmt.Sprintf("%s %d (last error: %s)", n, c.EndFailed, c.LastEndError))
		}
		if c.EndRetried > 0 {
			retried = append(retried, fmt.Sprintf("%s %d", n, c.EndRetried))
		}
	}
	out := []string{"faults applied: " + strings.Join(applied, ", ")}
	if len(failed) > 0 {
		out = append(out, "faults that failed to apply: "+strings.Join(failed, "; "))
	}
	if len(retried) > 0 {
		out = append(out, "faults not undone when due, left to the final heal: "+strings.Join(retried, ", "))
	}
	if len(unended) > 0 {
		out = append(out, "faults that could not be undone: "+strings.Join(unended, "; "))
	}
	return out
}

// unendedFaults is the gate's rule for faults that could not be undone: the
// system was left faulted (a node down, frozen or cut off) for the rest of
// the run, which the schedule never meant and no verdict should rest on.
func unendedFaults(nemeses map[string]NemesisCount) []string {
	var why []string
	for _, n := range sortedKeys(nemeses) {
		if c := nemeses[n]; c.EndFailed > 0 {
			why = append(why, fmt.Sprintf("nemesis %s: %s could not be undone (the system stayed faulted): %s", n, faultsWord(c.EndFailed), c.LastEndError))
		}
	}
	return why
}

func faultsWord(n int) string {
	if n == 1 {
		return "a fault"
	}
	return fmt.Sprintf("%d faults", n)
}

// failedModes is the gate's rule for faults that failed to apply: a mode of
// a nemesis that was tried and never applied was never exercised, even when
// other modes of it were (in-container cuts that all failed while the
// client black-holes worked), and a nemesis that failed every try was not
// exercised at all; either leaves a valid verdict unknown. A mode that
// applied at least once beside failures is only counted (FaultLines).
// Nemeses in named that never took effect are said by the gate already.
func failedModes(nemeses map[string]NemesisCount, named []string) []string {
	var why []string
	for _, n := range sortedKeys(nemeses) {
		c := nemeses[n]
		if c.Failed == 0 {
			continue
		}
		if c.Started == 0 {
			if !slices.Contains(named, n) {
				why = append(why, fmt.Sprintf("nemesis %s failed to apply every time it was tried (%s): %s", n, times(c.Failed), c.LastError))
			}
			continue
		}
		for _, m := range sortedKeys(c.Modes) {
			mc := c.Modes[m]
			if mc.Failed == 0 || mc.Started > 0 {
				continue
			}
			what := fmt.Sprintf("its %q faults", m)
			if m == "" {
				what = "its faults without a mode"
			}
			why = append(why, fmt.Sprintf("nemesis %s: %s failed to apply every time they were tried (%s), so they were never exercised: %s", n, what, times(mc.Failed), mc.LastError))
		}
	}
	return why
}

func times(n int) string {
	if n == 1 {
		return "once"
	}
	return fmt.Sprintf("%d times", n)
}

// nemesisCounts renders the counts of a history's fault events. Modes tell
// apart only a nemesis that both applied and failed.
func nemesisCounts(counts map[string]*nemesis.Count) map[string]NemesisCount {
	out := make(map[string]NemesisCount, len(counts))
	for n, c := range counts {
		r := NemesisCount{Started: c.Started, Failed: c.Failed, LastError: c.Error,
			EndFailed: c.EndFailed, LastEndError: c.EndError, EndRetried: c.EndRetried}
		if c.Failed > 0 && c.Started > 0 {
			r.Modes = map[string]ModeCount{}
			for m, mc := range c.Modes {
				r.Modes[m] = ModeCount{Started: mc.Started, Failed: mc.Failed, LastError: mc.Error}
			}
		}
		out[n] = r
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func (a *analyzer) count(ops *history.Ops) Counts {
	c := Counts{Events: a.events, Ops: ops.Len(), Keys: len(a.keys), Processes: len(a.procs),
		ByOp: map[string]map[string]int{}, TamperedWrites: a.tampered}
	// By OpOrder and outcome (ok, fail, other) first: two map updates per
	// operation cost more than the rest of the pass.
	var n [6][3]int
	for i := range ops.Len() {
		o := ops.Brief(i)
		if o.Outcome != history.OutcomeInfo {
			c.Definite++
		}
		if f := OpOrder(o.F); f < 5 {
			n[f][outcomeSlot(o.Outcome)]++
			continue
		}
		m := c.ByOp[o.F]
		if m == nil {
			m = map[string]int{}
			c.ByOp[o.F] = m
		}
		m[o.Outcome.String()]++
	}
	for f := range 5 {
		for s, k := range n[f] {
			if k == 0 {
				continue
			}
			m := c.ByOp[opByOrder[f]]
			if m == nil {
				m = map[string]int{}
				c.ByOp[opByOrder[f]] = m
			}
			m[slotOutcome[s]] += k
		}
	}
	return c
}

// opByOrder are the client operations by OpOrder.
var opByOrder = [...]string{history.Acquire, history.Renew, history.Release, history.Write, history.Read}

// outcomeSlot indexes outcomes as their words tell them apart (every
// value but ok and fail reads "info").
func outcomeSlot(o history.Outcome) int {
	switch o {
	case history.OutcomeOk:
		return 0
	case history.OutcomeFail:
		return 1
	}
	return 2
}

var slotOutcome = [...]string{history.OutcomeOk.String(), history.OutcomeFail.String(), history.OutcomeInfo.String()}

// Latency is how long completed operations of one kind took. Info operations
// have no latency (their effect may come at any time) and are only counted.
type Latency struct {
	F       string `json:"f"`
	Outcome string `json:"outcome"`
	Count   int    `json:"count"`
	P50     int64  `json:"p50_ns"`
	P90     int64  `json:"p90_ns"`
	P99     int64  `json:"p99_ns"`
	Max     int64  `json:"max_ns"`
}

// latencies computes quantiles per operation and outcome over the operations
// that completed ok or fail.
func latencies(ops *history.Ops) []Latency {
	groups := map[[2]string][]int64{}
	var byOrder [5][3][]int64 // the client operations' first: no map per operation
	// Each made once at its size, counted first (grown by appending, they
	// were several times their size in garbage).
	var sizes [5][3]int
	for i := range ops.Len() {
		o := ops.Brief(i)
		if o.Outcome == history.OutcomeInfo || o.Completed == history.Never {
			continue
		}
		if f := OpOrder(o.F); f < 5 {
			sizes[f][outcomeSlot(o.Outcome)]++
		}
	}
	for f := range byOrder {
		for s := range byOrder[f] {
			byOrder[f][s] = make([]int64, 0, sizes[f][s])
		}
	}
	for i := range ops.Len() {
		o := ops.Brief(i)
		if o.Outcome == history.OutcomeInfo || o.Completed == history.Never {
			continue
		}
		if f := OpOrder(o.F); f < 5 {
			s := &byOrder[f][outcomeSlot(o.Outcome)]
			*s = append(*s, o.Completed-o.Call)
			continue
		}
		k := [2]string{o.F, o.Outcome.String()}
		groups[k] = append(groups[k], o.Completed-o.Call)
	}
	for f := range byOrder {
		for s, ds := range byOrder[f] {
			if len(ds) > 0 {
				groups[[2]string{opByOrder[f], slotOutcome[s]}] = ds
			}
		}
	}
	var out []Latency
	for k, ds := range groups {
		slices.Sort(ds)
		out = append(out, Latency{F: k[0], Outcome: k[1], Count: len(ds),
			P50: quantile(ds, 0.5), P90: quantile(ds, 0.9), P99: quantile(ds, 0.99), Max: ds[len(ds)-1]})
	}
	slices.SortFunc(out, func(x, y Latency) int {
		if c := OpOrder(x.F) - OpOrder(y.F); c != 0 {
			return c
		}
		return strings.Compare(x.Outcome, y.Outcome)
	})
	return out
}

// quantile of sorted values, nearest-rank.
func quantile(sorted []int64, q float64) int64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// OpOrder sorts operations the way a user reads them: the lock's life, then
// the resource.
func OpOrder(f string) int {
	switch f {
	case history.Acquire:
		return 0
	case history.Renew:
		return 1
	case history.Release:
		return 2
	case history.Write:
		return 3
	case history.Read:
		return 4
	}
	return 5
}

// seen notes a client event's key and process, for Counts. A history has
// a few keys and processes, seen over and over: the last few keys (the
// reader's, interned: most compare by their address) and small process
// numbers are looked up without a map.
func (a *analyzer) seen(key string, proc int) {
	if proc >= 0 && proc < 1<<16 {
		for proc >= len(a.procSeen) {
			a.procSeen = append(a.procSeen, false)
		}
		if !a.procSeen[proc] {
			a.procSeen[proc] = true
			a.procs[proc] = true
		}
	} else {
		a.procs[proc] = true
	}
	for _, k := range a.recentKeys {
		if k == key && k != "" {
			return
		}
	}
	a.keys[key] = true
	a.recentKeys[a.recentAt] = key
	a.recentAt = (a.recentAt + 1) % len(a.recentKeys)
}
