// Package reports turns a run's history and the checkers' verdict into what
// people and CI systems read after a run: results.json (stable, versioned),
// report.html (one self-contained offline page), junit.xml; it keeps the run
// store (STORE/<target>/<timestamp>/, STORE/latest) and serves it.
//
// Reports sits at the end of the pipeline: it reads history and models and
// never the harness, so a stored run can be re-rendered (and re-checked,
// through a CheckFunc the caller passes) without running anything.
package reports

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/fencecheck/fencecheck/models"
)

// SchemaVersion is results.json's schema_version. It changes only when a
// field is removed or changes meaning; new fields may appear without a bump,
// so consumers must ignore fields they do not know.
const SchemaVersion = 1

// File names inside a run directory.
const (
	HistoryFile = "history.jsonl"
	ConfigFile  = "config.json"
	ResultsFile = "results.json"
	ReportFile  = "report.html"
	JUnitFile   = "junit.xml"
	LogsDir     = "logs"
)

// RunInfo describes the run a report is about. Everything is optional except
// Target; zero times are shown as unknown.
type RunInfo struct {
	RunID  string `json:"run_id,omitempty"`
	Target string `json:"target"`
	Seed   int64  `json:"seed"`
	// Command is the exact command line that reproduces the run.
	Command string    `json:"command,omitempty"`
	Start   time.Time `json:"start,omitzero"`
	End     time.Time `json:"end,omitzero"`
	Nemeses []string  `json:"nemeses,omitempty"`
	// Semantics is what the target declared (shown, and given to a recheck).
	Semantics *models.Semantics `json:"semantics,omitempty"`
	// Config is every setting of the run, as the harness marshals it into
	// config.json. The report shows it; results.json does not repeat it.
	Config any `json:"-"`
	// Notes are things the reader must know about the run itself (a nemesis
	// that was not applicable, a phase that failed).
	Notes []string `json:"notes,omitempty"`
}

// Duration is End-Start, or 0 when either is unknown.
func (r RunInfo) Duration() time.Duration {
	if r.Start.IsZero() || r.End.IsZero() {
		return 0
	}
	return r.End.Sub(r.Start)
}

// Check is the checkers' answer on a run's history.
type Check struct {
	// Verdict is the overall verdict. Empty means: derive it from Results
	// (any invalid -> invalid, else any unknown -> unknown, else valid).
	Verdict models.Verdict
	Results []models.Result
	// Reason says why the verdict is what it is when the results alone do
	// not (e.g. "only 4 operations completed": unknown).
	Reason string
	// FirstInvalidAt is the history time (ns) at which the history first
	// showed a violation; 0 means "derive from the anomalies".
	FirstInvalidAt int64
	// Metrics are named findings and measures that are not verdicts, e.g.
	// "lease-overlap": 3. Values must marshal to JSON.
	Metrics map[string]any
	// Visualizations maps a key to its Porcupine visualization, a path
	// relative to the run directory.
	Visualizations map[string]string
}

// CheckFunc re-checks a stored history. The CLI passes one built on models
// so that reports never depends on how a check is configured.
type CheckFunc func(historyPath string, info RunInfo) (Check, error)

// Results is results.json. See docs/reports.md for the contract.
type Results struct {
	SchemaVersion int            `json:"schema_version"`
	Tool          string         `json:"tool"`
	GeneratedAt   time.Time      `json:"generated_at"`
	Verdict       models.Verdict `json:"verdict"`
	// ExitCode is the process exit code this verdict maps to (0, 1, 2).
	ExitCode int `json:"exit_code"`
	// Summary is the verdict in one sentence.
	Summary string `json:"summary"`
	// Reason is the overall reason given with the verdict, if any.
	Reason   string        `json:"reason,omitempty"`
	Run      RunInfo       `json:"run"`
	Duration time.Duration `json:"duration_ns"`
	// FirstInvalidAt is the time to detection: history time (ns since the
	// run's start) at which the first violation became visible.
	FirstInvalidAt *int64 `json:"first_invalid_at_ns,omitempty"`
	// AfterFault is the fault period that was active or most recently
	// started when the first violation became visible.
	AfterFault *FaultRef       `json:"after_fault,omitempty"`
	Checks     []models.Result `json:"checks"`
	// AnomalyKinds counts violations (not findings) by kind over all checks.
	AnomalyKinds map[string]int `json:"anomaly_kinds,omitempty"`
	Metrics      map[string]any `json:"metrics,omitempty"`
	Counts       Counts         `json:"counts"`
	Latency      []Latency      `json:"latency,omitempty"`
	Faults       []Fault        `json:"faults,omitempty"`
	Files        Files          `json:"files"`
	// Notes are warnings about the history (damaged lines, pairing errors)
	// and the run.
	Notes []string `json:"notes,omitempty"`
}

// FaultRef points from the first violation to the fault it followed.
type FaultRef struct {
	Nemesis string `json:"nemesis"`
	Start   int64  `json:"start_ns"`
	// Delay is how long after the fault started the violation showed.
	Delay int64 `json:"delay_ns"`
}

// Counts are the sizes of the history.
type Counts struct {
	Events    int `json:"events"`
	Ops       int `json:"ops"`
	Keys      int `json:"keys"`
	Processes int `json:"processes"`
	// ByOp counts operations by f and outcome ("ok", "fail", "info").
	ByOp map[string]map[string]int `json:"by_op"`
	// TamperedWrites counts writes whose token the strip proxy changed.
	TamperedWrites int `json:"tampered_writes,omitempty"`
	Faults         int `json:"faults"`
}

// Files names the run directory's files, relative to it.
type Files struct {
	Report         string            `json:"report"`
	History        string            `json:"history"`
	JUnit          string            `json:"junit"`
	Config         string            `json:"config,omitempty"`
	Visualizations map[string]string `json:"visualizations,omitempty"`
	Logs           []string          `json:"logs,omitempty"`
}

// ExitCode maps a verdict to the process exit code (0 valid, 1 invalid,
// 2 unknown). Anything else is unknown: never fold doubt into valid.
func ExitCode(v models.Verdict) int {
	switch v {
	case models.Valid:
		return 0
	case models.Invalid:
		return 1
	}
	return 2
}

// OverallVerdict combines checker verdicts: one invalid makes the run
// invalid; otherwise one unknown makes it unknown; no results is unknown.
func OverallVerdict(results []models.Result) models.Verdict {
	if len(results) == 0 {
		return models.Unknown
	}
	v := models.Valid
	for _, r := range results {
		switch r.Verdict {
		case models.Invalid:
			return models.Invalid
		case models.Valid:
		default:
			v = models.Unknown
		}
	}
	return v
}

func buildResults(info RunInfo, check Check, a *analysis, files Files, now time.Time) *Results {
	verdict := check.Verdict
	if verdict == "" {
		verdict = OverallVerdict(check.Results)
	}
	r := &Results{
		SchemaVersion: SchemaVersion,
		Tool:          "fencecheck",
		GeneratedAt:   now.UTC(),
		Verdict:       verdict,
		ExitCode:      ExitCode(verdict),
		Run:           info,
		Duration:      info.Duration(),
		Reason:        clip(check.Reason, 2000),
		Checks:        check.Results,
		Metrics:       check.Metrics,
		Latency:       a.latencies(),
		Faults:        a.Faults,
		Files:         files,
	}
	if r.Checks == nil {
		r.Checks = []models.Result{}
	}
	if r.Duration == 0 {
		r.Duration = time.Duration(a.End)
	}
	procs := 0
	for _, l := range a.Lanes {
		procs += len(l)
	}
	r.Counts = Counts{Events: a.Events, Ops: len(a.Ops), Keys: len(a.Keys), Processes: procs,
		ByOp: a.Counts, TamperedWrites: a.Tampered, Faults: len(a.Faults)}
	first := int64(-1)
	for _, res := range check.Results {
		for kind, n := range violationKinds(res) {
			if r.AnomalyKinds == nil {
				r.AnomalyKinds = map[string]int{}
			}
			r.AnomalyKinds[kind] += n
		}
		for _, an := range res.Anomalies {
			if isViolation(res, an) && (first < 0 || an.At < first) {
				first = an.At
			}
		}
	}
	if check.FirstInvalidAt > 0 {
		first = check.FirstInvalidAt
	}
	if first >= 0 && verdict == models.Invalid {
		r.FirstInvalidAt = &first
		r.AfterFault = faultBefore(a.Faults, first)
	}
	r.Notes = append(append([]string(nil), info.Notes...), a.Notes...)
	r.Summary = summarize(r)
	return r
}

// isViolation tells a violation from a finding. A check that passed can
// still report observations (lease overlaps that fencing survived); those are
// findings even when the checker did not mark them so.
func isViolation(res models.Result, an models.Anomaly) bool {
	return !an.Finding && res.Verdict != models.Valid
}

// violationKinds counts a result's violations by kind. A checker that lists
// only the earliest anomaly of each kind counts them all in KindCounts.
func violationKinds(res models.Result) map[string]int {
	out := map[string]int{}
	if res.Verdict == models.Valid {
		return out
	}
	if len(res.KindCounts) > 0 {
		for k, n := range res.KindCounts {
			out[k] = n
		}
		return out
	}
	for _, an := range res.Anomalies {
		if !an.Finding {
			out[an.Kind]++
		}
	}
	return out
}

// faultBefore is the latest fault that started at or before t.
func faultBefore(faults []Fault, t int64) *FaultRef {
	var best *Fault
	for i := range faults {
		f := &faults[i]
		if f.Start <= t && f.Stop > f.Start && (best == nil || f.Start > best.Start) {
			best = f
		}
	}
	if best == nil {
		return nil
	}
	return &FaultRef{Nemesis: best.Nemesis, Start: best.Start, Delay: t - best.Start}
}

// summarize says the verdict in one sentence, e.g. "invalid: 2 anomalies
// (stale-write-accepted ×2), first at 12.41 s, 1.30 s after pause started".
func summarize(r *Results) string {
	var b strings.Builder
	b.WriteString(string(r.Verdict))
	switch r.Verdict {
	case models.Invalid:
		n := 0
		kinds := make([]string, 0, len(r.AnomalyKinds))
		for k, c := range r.AnomalyKinds {
			n += c
			kinds = append(kinds, k)
		}
		sort.Strings(kinds)
		if n > 0 {
			fmt.Fprintf(&b, ": %d %s (", n, plural(n, "anomaly", "anomalies"))
			for i, k := range kinds {
				if i > 0 {
					b.WriteString(", ")
				}
				fmt.Fprintf(&b, "%s ×%d", k, r.AnomalyKinds[k])
			}
			b.WriteString(")")
		} else {
			b.WriteString(": the checkers found the history not linearizable")
		}
		if r.FirstInvalidAt != nil {
			fmt.Fprintf(&b, ", first visible at %s", seconds(*r.FirstInvalidAt))
			if r.AfterFault != nil {
				fmt.Fprintf(&b, ", %s after %s started", seconds(r.AfterFault.Delay), r.AfterFault.Nemesis)
			}
		}
	case models.Valid:
		fmt.Fprintf(&b, ": %d %s on %d %s checked, no violation", r.Counts.Ops, plural(r.Counts.Ops, "operation", "operations"),
			r.Counts.Keys, plural(r.Counts.Keys, "key", "keys"))
	default:
		var reasons []string
		if r.Reason != "" {
			reasons = append(reasons, r.Reason)
		}
		for _, c := range r.Checks {
			if c.Verdict != models.Valid && c.Reason != "" {
				reasons = append(reasons, c.Checker+"/"+c.Model+": "+c.Reason)
			}
		}
		if len(reasons) == 0 {
			// A gate (too few operations, a fault that never ran) turned a
			// valid history into unknown: the run's notes say why.
			reasons = r.Run.Notes
		}
		if len(reasons) > 0 {
			b.WriteString(": ")
			b.WriteString(strings.Join(reasons, "; "))
		} else if len(r.Checks) == 0 {
			b.WriteString(": no checker result")
		}
	}
	return clip(b.String(), 600)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// seconds formats history time as seconds with two decimals: "12.41 s".
func seconds(ns int64) string {
	return fmt.Sprintf("%.2f s", float64(ns)/1e9)
}

// marshalResults is results.json's bytes: indented, so diffs and humans can
// read it, and with invalid UTF-8 already replaced by encoding/json.
func marshalResults(r *Results) ([]byte, error) {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}
