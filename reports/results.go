// Package reports renders what the analysis concluded from a run's history
// into what people and CI systems read after a run: results.json (stable,
// versioned), report.html (one self-contained offline page), junit.xml and
// Porcupine's visualizations; it keeps the run store
// (STORE/<target>/<timestamp>/, STORE/latest) and serves it.
//
// Reports sits at the end of the pipeline: every fact it shows comes from an
// *analysis.Result (the verdict, the anomalies and their causes, the fault
// periods, counts, latency, findings); it only lays them out. It never reads
// the harness, so a stored run can be re-rendered (and re-checked, by
// analysis) without running anything.
package reports

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/fencecheck/fencecheck/analysis"
	"github.com/fencecheck/fencecheck/checkers"
)

// SchemaVersion is results.json's schema_version. It changes only when a
// field is removed or changes meaning; new fields may appear without a bump,
// so consumers must ignore fields they do not know.
//
// Version 2: after_fault is the fault the one cause rule names for the first
// violation (one that can explain it, or else the last fault event before
// it), no longer the fault that most recently started; anomalies carry their
// cause; the verdict is combined once (complete checkers that disagree give
// unknown).
//
// Version 3: anomaly_kinds counts distinct violations (the checkers'
// reports of one violation merged, each under its most precise kind), no
// longer every checker's reports added up; they sum to anomaly_count, the
// one count; root_causes and finding_kinds are new.
//
// Version 4: coverage counts a situation only when the operation that
// completes it reached the system (ok or fail, never info), and an idle
// one only when no fault touched its nodes meanwhile; the idle periods a
// fault touched are during_faults and during_by_nemesis, no longer the
// during map of every idle period.
//
// Version 5: a cause (after_fault, an anomaly's, a root cause's) may name
// idle time instead of a fault: fault -1, no nemesis, idle_ns set
// (analysis/causeidle.go).
const SchemaVersion = 5

// File names inside a run directory.
const (
	HistoryFile = "history.jsonl"
	ConfigFile  = "config.json"
	ResultsFile = "results.json"
	// ScheduleFile and ShrinkSummaryFile are written by the harness and by
	// `fencecheck shrink`; results.json and the report link them.
	ScheduleFile      = "schedule.json"
	ShrinkSummaryFile = "shrink/summary.txt"
	ReportFile        = "report.html"
	JUnitFile         = "junit.xml"
	LogsDir           = "logs"
	// ErrorFile, in a run folder kept without a history (its target did
	// not start; the folder holds its logs), says why the run ended there.
	ErrorFile = "error.txt"
)

// RunInfo describes the run a report is about: what its history does not
// say. Everything is optional except Target; zero times are shown as
// unknown.
type RunInfo struct {
	RunID  string `json:"run_id,omitempty"`
	Target string `json:"target"`
	// System is the release and size of the system the target ran ("etcd
	// v3.6.17, 3 members"), when the target says.
	System string `json:"system,omitempty"`
	Seed   int64  `json:"seed"`
	// Command is the exact command line that reproduces the run.
	Command string    `json:"command,omitempty"`
	Start   time.Time `json:"start,omitzero"`
	End     time.Time `json:"end,omitzero"`
	// Nemeses are the nemeses that ran (from the history's run events when
	// it has them).
	Nemeses []string `json:"nemeses,omitempty"`
	// Semantics is what the target declared (results.json shows the
	// analysis's; a recheck reads it back).
	Semantics *checkers.Semantics `json:"semantics,omitempty"`
	// Config is every setting of the run, as the harness marshals it into
	// config.json. The report shows it; results.json does not repeat it.
	Config any `json:"-"`
	// Notes are things the reader must know about the run that its history
	// does not record; results.json adds the run events' own notes.
	Notes []string `json:"notes,omitempty"`
}

// Duration is End-Start, or 0 when either is unknown.
func (r RunInfo) Duration() time.Duration {
	if r.Start.IsZero() || r.End.IsZero() {
		return 0
	}
	return r.End.Sub(r.Start)
}

// Results is results.json. See docs/reports.md for the contract.
type Results struct {
	SchemaVersion int              `json:"schema_version"`
	Tool          string           `json:"tool"`
	GeneratedAt   time.Time        `json:"generated_at"`
	Verdict       checkers.Verdict `json:"verdict"`
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
	// AfterFault is the cause named for the first violation.
	AfterFault *checkers.Cause   `json:"after_fault,omitempty"`
	Checks     []checkers.Result `json:"checks"`
	// AnomalyCount is the one count of anomalies: distinct violations, the
	// checkers' reports of one merged; AnomalyLine says it with the number
	// of root causes, as every rendering does.
	AnomalyCount int    `json:"anomaly_count"`
	AnomalyLine  string `json:"anomaly_line,omitempty"`
	// AnomalyKinds counts the same violations by kind (they sum to
	// AnomalyCount).
	AnomalyKinds map[string]int `json:"anomaly_kinds,omitempty"`
	// RootCauses group the violations by what explains them, first first.
	RootCauses []analysis.RootCause `json:"root_causes,omitempty"`
	// FindingKinds summarise the findings (not violations) a line per kind.
	FindingKinds []analysis.FindingKind `json:"finding_kinds,omitempty"`
	Metrics      map[string]any         `json:"metrics,omitempty"`
	Counts       analysis.Counts        `json:"counts"`
	// LateWrites counts the seeds' scenario: writes by expired holders
	// (sent with a token older than one already granted for the same lock)
	// and how each ended.
	LateWrites analysis.LateWrites `json:"late_writes"`
	// Coverage is what the run provoked: per failure class, the situations
	// that expose it and how many times the run created each.
	Coverage *analysis.Coverage `json:"coverage,omitempty"`
	Latency  []analysis.Latency `json:"latency,omitempty"`
	Faults   []analysis.Fault   `json:"faults,omitempty"`
	// Nemeses counts each nemesis's starts and failures to start.
	Nemeses map[string]analysis.NemesisCount `json:"nemeses,omitempty"`
	// GateReasons say why the run does not pass however the checkers
	// decided.
	GateReasons []string `json:"gate_reasons,omitempty"`
	// Completion is what the run events say about how far the run got
	// (absent for histories without run events).
	Completion *analysis.RunRecord `json:"completion,omitempty"`
	// Options are the settings the history was checked with; `fencecheck
	// report` checks it again with the same ones.
	Options analysis.Settings `json:"options"`
	Files   Files             `json:"files"`
	// Notes are warnings about the history (damaged lines) and the run (a
	// nemesis not applicable, a problem during the run).
	Notes []string `json:"notes,omitempty"`
}

// Files names the run directory's files, relative to it.
type Files struct {
	Report         string            `json:"report"`
	History        string            `json:"history"`
	JUnit          string            `json:"junit"`
	Config         string            `json:"config,omitempty"`
	Visualizations map[string]string `json:"visualizations,omitempty"`
	Logs           []string          `json:"logs,omitempty"`
	// Schedule is the run's faults as planned (schedule.json), Shrink the
	// summary of `fencecheck shrink` on the run (shrink/summary.txt), each
	// when the folder has it.
	Schedule string `json:"schedule,omitempty"`
	Shrink   string `json:"shrink,omitempty"`
}

func buildResults(info RunInfo, res *analysis.Result, files Files, now time.Time) *Results {
	sem := res.Semantics
	info.Semantics = &sem
	if res.Run != nil && len(res.Run.Nemeses) > 0 {
		info.Nemeses = res.Run.Nemeses
	}
	info.Notes = dedupe(append(append([]string(nil), info.Notes...), res.Run.Notes()...))
	r := &Results{
		SchemaVersion: SchemaVersion,
		Tool:          "fencecheck",
		GeneratedAt:   now.UTC(),
		Verdict:       res.Verdict,
		ExitCode:      res.ExitCode,
		Run:           info,
		Duration:      info.Duration(),
		Reason:        clip(res.Reason, 2000),
		Checks:        res.Checks,
		AnomalyCount:  res.AnomalyCount,
		AnomalyKinds:  res.ViolationKinds,
		RootCauses:    res.RootCauses,
		FindingKinds:  res.FindingKinds,
		Metrics:       metrics(res),
		Counts:        res.Counts,
		LateWrites:    res.LateWrites,
		Coverage:      res.Coverage,
		Latency:       res.Latency,
		Faults:        res.Faults,
		Nemeses:       res.Nemeses,
		GateReasons:   res.GateReasons,
		Completion:    res.Run,
		Options:       res.Settings,
		Files:         files,
	}
	if r.Checks == nil {
		r.Checks = []checkers.Result{}
	}
	if len(r.AnomalyKinds) == 0 {
		r.AnomalyKinds = nil
	}
	if res.AnomalyCount > 0 {
		r.AnomalyLine = res.AnomalyLine()
	}
	if r.Duration == 0 {
		r.Duration = time.Duration(res.End)
	}
	if v := res.FirstViolation; v != nil {
		at := v.At
		r.FirstInvalidAt = &at
		r.AfterFault = v.Cause
	}
	r.Notes = dedupe(append(append([]string(nil), info.Notes...), res.Notes...))
	r.Summary = summarize(r)
	return r
}

// metrics are the named measures shown beside the verdict.
func metrics(res *analysis.Result) map[string]any {
	if res.Leases == nil {
		return nil
	}
	return map[string]any{
		"lease_overlaps":                          res.Leases.Count,
		"lease_overlap_ms":                        res.Leases.Total.Milliseconds(),
		"stale_writes_fenced_off_during_overlaps": res.Leases.Rejected,
	}
}

func dedupe(xs []string) []string {
	seen := map[string]bool{}
	out := xs[:0]
	for _, x := range xs {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// summarize says the verdict in one sentence, e.g. "invalid: 2 anomalies
// (stale-write-accepted ×2), first visible at 12.41 s, explained by the
// restart of n1 (11.02–11.80 s) since the overwritten write".
func summarize(r *Results) string {
	var b strings.Builder
	b.WriteString(string(r.Verdict))
	switch r.Verdict {
	case checkers.Invalid:
		if r.AnomalyCount > 0 {
			kinds := make([]string, 0, len(r.AnomalyKinds))
			for k := range r.AnomalyKinds {
				kinds = append(kinds, k)
			}
			sort.Strings(kinds)
			fmt.Fprintf(&b, ": %s (", r.AnomalyLine)
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
				b.WriteString(", " + r.AfterFault.Text)
			}
		}
	case checkers.Valid:
		fmt.Fprintf(&b, ": %d %s on %d %s checked, no violation", r.Counts.Ops, plural(r.Counts.Ops, "operation", "operations"),
			r.Counts.Keys, plural(r.Counts.Keys, "key", "keys"))
	default:
		if r.Reason != "" {
			b.WriteString(": " + r.Reason)
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
