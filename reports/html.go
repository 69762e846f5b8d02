package reports

import (
	"bufio"
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/fencecheck/fencecheck/analysis"
	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/history"
)

//go:embed report.tmpl.html
var reportTemplateText string

//go:embed report.css
var reportCSS string

//go:embed report.js
var reportJS string

var reportTemplate = template.Must(template.New("report").Funcs(template.FuncMap{
	"f1":     func(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) },
	"plural": plural,
	"pct": func(n, total int) string {
		if total == 0 {
			return "0%"
		}
		return fmt.Sprintf("%.1f%%", 100*float64(n)/float64(total))
	},
}).Parse(reportTemplateText))

// Page limits. Each keeps report.html bounded whatever the history holds.
const (
	// maxHTMLAnomalies: anomalies written out in full; results.json has all.
	maxHTMLAnomalies = 200
	// maxAnomalyOps: operations tabulated under one anomaly.
	maxAnomalyOps = 12
	// timelineTextLimit clips each token, value and error in the timeline's
	// data (the full strings are in history.jsonl).
	timelineTextLimit = 40
	// displayTextLimit clips strings shown in tables.
	displayTextLimit = 200
	logTailLines     = 30
	logTailBytes     = 64 << 10
	maxListedFiles   = 300
)

type pageData struct {
	Title           string
	Verdict         string
	Info            RunInfo
	Res             *Results
	Start           string
	Duration        string
	Phases          string
	Semantics       string
	FirstInvalid    string
	Gate            []string
	Completion      string
	Notes           []string
	Checks          []checkRow
	Anomalies       []anomalyView
	AnomaliesHidden int
	// Omitted anomalies were found but not listed by the checkers (they
	// list the earliest of each kind and count the rest).
	Omitted        int
	Findings       []anomalyView
	FindingsHidden int
	// RootCauses and FindingLines are the analysis's groups (rootcauses.go).
	RootCauses   []rootCauseView
	FindingLines []findingView
	Metrics      []keyValue
	Faults       []faultRow
	FaultLines   []string // applied and failed to apply, per nemesis
	// LateWrites is the seeds' scenario counted, LateWriteOps the invoke
	// indices of examples (for the timeline).
	LateWrites     string
	LateWriteOps   string
	FaultLegend    []keyValue
	Throughput     *plot
	Latency        []*plot
	LatencyRows    []latencyRow
	Counts         []countRow
	CountTotal     countRow
	Lanes          int
	TimelineOps    int
	TimelineNote   string
	Logs           []logView
	Visualizations []keyValue
	Files          []string
	Shrunk         string
	Config         string
	Generated      string
	TimelineJSON   template.JS
	CSS            template.CSS
	JS             template.JS
}

type keyValue struct{ Key, Value string }

type checkRow struct {
	Checker, Model, Verdict, Reason, Duration string
	Keys, Ops, Anomalies, Findings            int
}

type anomalyView struct {
	N                         int
	Checker, Model, Kind, Key string
	Text, At                  string
	OpIDs                     string
	Ops                       []opView
	MoreOps                   int
}

type opView struct {
	ID                                                       int64
	Process                                                  int
	F, Key, Token, Value, Outcome, Error, Call, End, Latency string
	Tampered, HighWater                                      string
	Missing                                                  bool
}

type faultRow struct {
	N                            int
	Nemesis, Label, Color        string
	Start, Stop, Duration, State string
}

type latencyRow struct {
	F, Outcome         string
	Count              int
	P50, P90, P99, Max string
}

type countRow struct {
	F                     string
	Ok, Fail, Info, Total int
}

type logView struct {
	Path      string
	Size      string
	Tail      []string
	Truncated bool
}

func renderReport(dir string, info RunInfo, res *Results, an *analysis.Result) ([]byte, error) {
	v := newOpsView(an)
	colors, order := faultColors(res.Faults)
	d := pageData{
		Title:      fmt.Sprintf("fencecheck · %s · %s", clip(info.Target, 80), res.Verdict),
		Verdict:    string(res.Verdict),
		Info:       res.Run,
		Res:        res,
		Start:      "unknown",
		Duration:   formatDuration(res.Duration),
		Phases:     phaseFacts(an, res.Duration),
		Notes:      res.Notes,
		Gate:       res.GateReasons,
		Completion: an.Run.Completion(),
		FaultLines: analysis.FaultLines(res.Nemeses),
		LateWrites: res.LateWrites.Line(),
		Generated:  res.GeneratedAt.Format(time.RFC3339),
		CSS:        template.CSS(reportCSS),
		JS:         template.JS(reportJS),
		Lanes:      len(v.lanes),
	}
	d.RootCauses, d.FindingLines = rootCauseViews(an), findingViews(an)
	for _, id := range res.LateWrites.Examples {
		d.LateWriteOps = strings.TrimSpace(d.LateWriteOps + " " + strconv.FormatInt(id, 10))
	}
	if !info.Start.IsZero() {
		d.Start = info.Start.UTC().Format("2006-01-02 15:04:05 UTC")
	}
	sem := an.Semantics
	d.Semantics = fmt.Sprintf("equal: %s, scope: %s, authenticated: %t", sem.Equal, sem.Scope, sem.Authenticated)
	if res.FirstInvalidAt != nil {
		d.FirstInvalid = seconds(*res.FirstInvalidAt)
		if res.AfterFault != nil {
			d.FirstInvalid += " (" + clip(res.AfterFault.Text, 300) + ")"
		}
	}

	type found struct {
		c  checkers.Result
		an checkers.Anomaly
	}
	var violations, findings []found
	for _, c := range res.Checks {
		before := len(violations)
		row := checkRow{Checker: clip(c.Checker, 60), Model: clip(c.Model, 60), Verdict: string(c.Verdict),
			Reason: clip(c.Reason, displayTextLimit*2), Duration: formatDuration(c.Duration), Keys: c.Keys, Ops: c.Ops}
		if c.Verdict != checkers.Valid {
			d.Omitted += c.OmittedAnomalies
		}
		for _, a := range c.Anomalies {
			if a.Finding {
				row.Findings++
				findings = append(findings, found{c, a})
			} else {
				violations = append(violations, found{c, a})
			}
		}
		row.Anomalies = len(violations) - before + omittedViolations(c)
		d.Checks = append(d.Checks, row)
	}
	// Earliest first: the first violation is where a reader starts.
	sort.SliceStable(violations, func(i, j int) bool { return violations[i].an.At < violations[j].an.At })
	var marks []anomJS
	for i, f := range violations {
		if i >= maxHTMLAnomalies {
			d.AnomaliesHidden = len(violations) - i
			break
		}
		d.Anomalies = append(d.Anomalies, anomalyFor(an, f.c, f.an, i+1))
		marks = append(marks, anomJS{Kind: clip(f.an.Kind, 60), At: f.an.At, Ops: f.an.Ops})
	}
	for i, f := range findings {
		if i >= maxHTMLAnomalies {
			d.FindingsHidden = len(findings) - i
			break
		}
		d.Findings = append(d.Findings, anomalyFor(an, f.c, f.an, i+1))
	}

	metricKeys := make([]string, 0, len(res.Metrics))
	for k := range res.Metrics {
		metricKeys = append(metricKeys, k)
	}
	sort.Strings(metricKeys)
	for _, k := range metricKeys {
		b, err := json.Marshal(res.Metrics[k])
		v := string(b)
		if err != nil {
			v = fmt.Sprint(res.Metrics[k])
		}
		d.Metrics = append(d.Metrics, keyValue{clip(k, 100), clip(strings.Trim(v, `"`), displayTextLimit)})
	}

	for _, n := range order {
		d.FaultLegend = append(d.FaultLegend, keyValue{n, colors[n]})
	}
	for i, f := range res.Faults {
		state := ""
		switch {
		case f.Open:
			state = "not stopped before the history ended"
		case f.Start == f.Stop:
			state = "instant"
		}
		d.Faults = append(d.Faults, faultRow{N: i + 1, Nemesis: clip(f.Nemesis, 80), Label: clip(f.Label(), 160), Color: colors[f.Nemesis],
			Start: seconds(f.Start), Stop: seconds(f.Stop), Duration: formatDuration(time.Duration(f.Stop - f.Start)), State: state})
	}

	d.Throughput = throughputPlot(v, res.Faults, colors)
	d.Latency = latencyPlots(v, res.Faults, colors)
	for _, l := range res.Latency {
		d.LatencyRows = append(d.LatencyRows, latencyRow{F: l.F, Outcome: l.Outcome, Count: l.Count,
			P50: durationLabel(l.P50), P90: durationLabel(l.P90), P99: durationLabel(l.P99), Max: durationLabel(l.Max)})
	}
	fs := make([]string, 0, len(res.Counts.ByOp))
	for f := range res.Counts.ByOp {
		fs = append(fs, f)
	}
	slices.SortFunc(fs, func(x, y string) int { return analysis.OpOrder(x) - analysis.OpOrder(y) })
	d.CountTotal.F = "all"
	for _, f := range fs {
		m := res.Counts.ByOp[f]
		r := countRow{F: f, Ok: m["ok"], Fail: m["fail"], Info: m["info"]}
		r.Total = r.Ok + r.Fail + r.Info
		d.Counts = append(d.Counts, r)
		d.CountTotal.Ok += r.Ok
		d.CountTotal.Fail += r.Fail
		d.CountTotal.Info += r.Info
		d.CountTotal.Total += r.Total
	}

	for _, p := range res.Files.Logs {
		d.Logs = append(d.Logs, readLogTail(dir, p))
	}
	vk := make([]string, 0, len(res.Files.Visualizations))
	for k := range res.Files.Visualizations {
		vk = append(vk, k)
	}
	sort.Strings(vk)
	for _, k := range vk {
		d.Visualizations = append(d.Visualizations, keyValue{clip(k, 100), res.Files.Visualizations[k]})
	}
	d.Files = listFiles(dir, ".", maxListedFiles)
	if res.Files.Shrink != "" {
		if tail := readLogTail(dir, res.Files.Shrink).Tail; len(tail) > 0 {
			d.Shrunk = tail[0]
		}
	}
	if info.Config != nil {
		if b, err := json.MarshalIndent(info.Config, "", "  "); err == nil {
			d.Config = clip(string(b), 200_000)
		}
	}

	if len(an.RootCauses) > 0 {
		// One mark per root cause, where its first violation showed: 700
		// violations of one restart are one mark, not a wall of them.
		marks = marks[:0]
		for _, g := range an.RootCauses {
			marks = append(marks, anomJS{Kind: clip(g.WitnessKind, 60), At: g.At, Ops: g.Witness})
		}
	}
	tl, kept := timelineData(v, res, colors, marks)
	d.TimelineOps = kept
	if tl.Dens != nil {
		d.TimelineNote = fmt.Sprintf("%d operations: the timeline shows their density (operations called per row and time bucket, by outcome) and, at full detail, the %d in %d window(s) around the violations (shaded) and the ones the anomalies name; history.jsonl has them all.",
			len(v.ops), kept, len(tl.Win))
	}
	js, err := safeJSON(tl)
	if err != nil {
		return nil, err
	}
	d.TimelineJSON = template.JS(js)

	var buf bytes.Buffer
	if err := reportTemplate.Execute(&buf, d); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func anomalyFor(res *analysis.Result, c checkers.Result, an checkers.Anomaly, n int) anomalyView {
	v := anomalyView{N: n, Checker: clip(c.Checker, 60), Model: clip(an.Model, 60), Kind: clip(an.Kind, 80),
		Key: clip(an.Key, displayTextLimit), Text: clip(an.Text, 2000), At: seconds(an.At)}
	if v.Model == "" {
		v.Model = clip(c.Model, 60)
	}
	ids := make([]string, 0, len(an.Ops))
	for i, id := range an.Ops {
		ids = append(ids, fmt.Sprint(id))
		if i >= maxAnomalyOps {
			v.MoreOps++
			continue
		}
		o := res.Op(id)
		if o == nil {
			v.Ops = append(v.Ops, opView{ID: id, Missing: true})
			continue
		}
		v.Ops = append(v.Ops, viewOp(o))
	}
	v.OpIDs = strings.Join(ids, " ")
	return v
}

func viewOp(o *history.Op) opView {
	v := opView{ID: o.ID, Process: o.Process, F: o.F, Key: clip(o.Key, displayTextLimit),
		Token: clip(o.Token.Raw, displayTextLimit), Value: clip(o.Value, displayTextLimit),
		Outcome: o.Outcome.String(), Error: clip(o.Error, displayTextLimit), Call: seconds(o.Call),
		Tampered: clip(o.Tampered, 40), HighWater: clip(o.HighWater, 60)}
	switch {
	case o.Completed == history.Never: // never completed
		v.End, v.Latency = "never completed", "—"
	case o.Outcome == history.OutcomeInfo:
		v.End, v.Latency = seconds(o.Completed), "unknown outcome"
	default:
		v.End, v.Latency = seconds(o.Completed), durationLabel(o.Completed-o.Call)
	}
	return v
}

// safeJSON marshals v for a <script type="application/json"> element.
// encoding/json already writes <, > and & as \u003c, \u003e, \u0026 (so no
// "</script>" or "<!--" can appear), U+2028 and U+2029 as escapes, and
// replaces invalid UTF-8 with U+FFFD. The check below keeps that promise
// true even if a later change swaps the encoder.
func safeJSON(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	if bytes.ContainsAny(b, "<>") || bytes.Contains(b, []byte("\u2028")) || bytes.Contains(b, []byte("\u2029")) {
		return nil, fmt.Errorf("embedded JSON is not script-safe")
	}
	return b, nil
}

func readLogTail(dir, rel string) logView {
	v := logView{Path: rel}
	f, err := os.Open(filepath.Join(dir, filepath.FromSlash(rel)))
	if err != nil {
		v.Tail = []string{"(cannot read: " + clip(err.Error(), 200) + ")"}
		return v
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return v
	}
	v.Size = byteSize(fi.Size())
	off := max(fi.Size()-logTailBytes, 0)
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return v
	}
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 0, 64<<10), logTailBytes+1)
	var lines []string
	first := off > 0 // the first line read may be cut in the middle
	for s.Scan() {
		if first {
			first = false
			continue
		}
		lines = append(lines, clip(s.Text(), 400))
		if len(lines) > logTailLines {
			lines = lines[1:]
		}
	}
	v.Tail = lines
	v.Truncated = off > 0 || len(lines) == logTailLines
	return v
}

func byteSize(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

func formatDuration(d time.Duration) string {
	if d <= 0 {
		return "—"
	}
	if d < time.Second {
		return durationLabel(int64(d))
	}
	s := d.Seconds()
	if s < 120 {
		return fmt.Sprintf("%.2f s", s)
	}
	return (time.Duration(math.Round(s)) * time.Second).String()
}

// omittedViolations counts the violations a check found but did not list.
func omittedViolations(c checkers.Result) int {
	if c.Verdict == checkers.Valid {
		return 0
	}
	return c.OmittedAnomalies
}
