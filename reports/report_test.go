package reports

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/analysis"
	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/checkers/historytest"
	"github.com/fencecheck/fencecheck/history"
)

var testStart = time.Date(2026, 11, 30, 6, 0, 0, 0, time.UTC)

// checkOf analyses a history with the given checker results in place of
// the checkers (analysis.Replay, as `fencecheck report --stored` does): the
// report shows what the analysis makes of them.
func checkOf(t *testing.T, path string, results []checkers.Result) *analysis.Result {
	t.Helper()
	res, err := analysis.CheckFile(context.Background(), path, analysis.Options{MinOps: -1, Lenient: true,
		Checkers: []analysis.Checker{analysis.Replay(results)}})
	require.NoError(t, err)
	return res
}

// runFixture copies testdata/<name>.jsonl into a fresh run folder, adds the
// given node logs, writes the report of the given checker results and
// returns the folder and results.
func runFixture(t *testing.T, name string, check []checkers.Result, logs map[string][]byte) (string, *Results) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "memory", "20261130T060000.000Z")
	require.NoError(t, os.MkdirAll(filepath.Join(dir, LogsDir), 0o755))
	for n, b := range logs {
		require.NoError(t, os.WriteFile(filepath.Join(dir, LogsDir, n), b, 0o644))
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, ConfigFile), []byte(`{"target":"memory","seed":7,"nemesis":"pause,restart","time":"30s"}`), 0o644))
	info := RunInfo{RunID: "r-" + name, Target: "memory", Seed: 7,
		Command: "fencecheck test --target memory --seed 7 --nemesis pause,restart --time 30s",
		Start:   testStart, End: testStart.Add(31 * time.Second), Nemeses: []string{"pause", "restart"},
		Config: json.RawMessage(`{"target":"memory","seed":7}`)}
	sem := checkers.DefaultSemantics()
	info.Semantics = &sem
	path := filepath.Join("testdata", name+".jsonl")
	res, err := WriteFrom(dir, path, info, checkOf(t, path, check))
	require.NoError(t, err)
	return dir, res
}

func readFile(t *testing.T, dir, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	require.NoError(t, err)
	return string(b)
}

func validCheck() []checkers.Result {
	return []checkers.Result{
		{Checker: "porcupine", Model: "fenced-register", Verdict: checkers.Valid, Keys: 2, Ops: 8, Duration: 3 * time.Millisecond},
		{Checker: "porcupine", Model: "issuer", Verdict: checkers.Valid, Keys: 2, Ops: 3},
		{Checker: "direct", Model: "fenced-register", Verdict: checkers.Valid, Keys: 2, Ops: 8},
	}
}

func invalidCheck() []checkers.Result {
	return []checkers.Result{
		{Checker: "direct", Model: "fenced-register", Verdict: checkers.Invalid, Keys: 1, Ops: 11, Anomalies: []checkers.Anomaly{
			{Kind: "stale-write-accepted", Model: "fenced-register", Key: "r1", Ops: []int64{16, 8},
				Text: "write c0-2 with token 1 accepted at 0.40 s after token 2 was accepted at 0.01 s", At: 403000000},
			{Kind: "replay-accepted", Model: "fenced-register", Key: "r1", Ops: []int64{18, 16},
				Text: "write c0-3 with token 1 accepted at 0.41 s although token 1 had already written c0-2", At: 405000000},
		}, KindCounts: map[string]int{"stale-write-accepted": 5, "replay-accepted": 1}, OmittedAnomalies: 4},
		{Checker: "direct", Model: "issuer", Verdict: checkers.Invalid, Keys: 1, Ops: 3, Anomalies: []checkers.Anomaly{
			{Kind: "token-regression", Model: "issuer", Key: "r1", Ops: []int64{14, 6},
				Text: "acquire returned token 1 at 0.40 s after an acquire returned token 2 at 0.01 s", At: 401000000},
			{Kind: "tokens-unauthenticated", Model: "issuer", Finding: true,
				Text: "tokens carry no seal: any client can forge one", At: 0},
		}},
		{Checker: "porcupine", Model: "fenced-register", Verdict: checkers.Invalid, Keys: 1, Ops: 11, Anomalies: []checkers.Anomaly{
			{Kind: "not-linearizable", Model: "fenced-register", Key: "r1", Ops: []int64{16, 18, 20}, Text: "key r1: no linearization", At: 407000000},
		}},
		// A passing check may still report what it saw: those are findings.
		{Checker: "direct", Model: "lease", Verdict: checkers.Valid, Ops: 4, Anomalies: []checkers.Anomaly{
			{Kind: "lease-overlap", Model: "lease", Key: "r1", Ops: []int64{0, 6}, Text: "p0 and p1 both held r1 for 3 ms", At: 8000000},
		}},
	}
}

func TestValidRun(t *testing.T) {
	dir, res := runFixture(t, "valid", validCheck(), map[string][]byte{"reference.log": []byte("started\nlistening on 127.0.0.1:7001\n")})
	assert.Equal(t, checkers.Valid, res.Verdict)
	assert.Equal(t, 0, res.ExitCode)
	assert.Nil(t, res.FirstInvalidAt)
	assert.Equal(t, 11, res.Counts.Ops)
	assert.Equal(t, map[string]int{"ok": 3}, res.Counts.ByOp["acquire"])
	assert.Equal(t, map[string]int{"ok": 3, "fail": 1}, res.Counts.ByOp["write"])
	require.Len(t, res.Faults, 2)
	assert.Equal(t, analysis.Fault{Nemesis: "pause", Start: 100000000, Stop: 600000000, Node: "n1",
		Details: map[string]json.RawMessage{"duration": json.RawMessage(`"500ms"`)}}, res.Faults[0])
	assert.Equal(t, "heal", res.Faults[1].Nemesis)
	assert.Equal(t, res.Faults[1].Start, res.Faults[1].Stop, "a stop with no start is an instant marker")
	assert.Equal(t, []string{"logs/reference.log"}, res.Files.Logs)

	var onDisk map[string]any
	require.NoError(t, json.Unmarshal([]byte(readFile(t, dir, ResultsFile)), &onDisk))
	assert.EqualValues(t, SchemaVersion, onDisk["schema_version"])
	assert.Equal(t, "valid", onDisk["verdict"])

	page := readFile(t, dir, ReportFile)
	assertHas(t, page, `data-verdict="valid"`)
	assertHas(t, page, "every check passed")
	assertHas(t, page, `class="fault-band"`, "fault periods are shaded in the plots")
	assertHas(t, page, "listening on 127.0.0.1:7001", "log tail shown")
	assertHas(t, page, `href="logs/reference.log"`)
	assertHas(t, page, "lease_overlaps", "metrics are shown")
	assertHasNot(t, page, "ZgotmplZ", "html/template refused a value: a template bug")
	assertNoExternalResources(t, page)

	ju := readFile(t, dir, JUnitFile)
	suites := parseJUnit(t, ju)
	assert.Equal(t, 3+8, suites.Tests, "the checks, and one coverage case per failure class")
	assert.Equal(t, 0, suites.Failures)
	assert.Equal(t, 0, suites.Errors)
	require.Len(t, suites.Suites, 2)
	assert.True(t, strings.HasSuffix(suites.Suites[1].Name, ".coverage"))
	assert.Len(t, suites.Suites[1].Cases, 8)
	assertHas(t, page, `id="coverage"`, "the coverage table")
	assertHas(t, ju, `<skipped message="`, "a class never provoked is a skipped case, in words")
}

func TestInvalidRunWithSeveralAnomalyKinds(t *testing.T) {
	dir, res := runFixture(t, "invalid", invalidCheck(), nil)
	assert.Equal(t, checkers.Invalid, res.Verdict)
	assert.Equal(t, 1, res.ExitCode)
	assert.Equal(t, map[string]int{"stale-write-accepted": 1, "replay-accepted": 1, "token-regression": 1}, res.AnomalyKinds,
		"distinct violations (a fake's results bring no Found: its listed ones); Porcupine's not-linearizable on r1 is the stale write's; the lease finding is no violation")
	assert.Equal(t, 3, res.AnomalyCount)
	assert.Equal(t, "3 anomalies in 2 root causes", res.AnomalyLine)
	require.NotNil(t, res.FirstInvalidAt)
	assert.EqualValues(t, 401000000, *res.FirstInvalidAt, "the earliest violation; findings do not count")
	require.NotNil(t, res.AfterFault)
	// The one cause rule: the restart of the issuer between the two acquires.
	assert.Equal(t, checkers.Cause{Fault: 0, Nemesis: "restart", Node: "reference", Start: 200000000, Stop: 300000000, Delay: 201000000,
		Explains: true, Text: "can be explained by the restart of reference (0.20–0.30 s) between the acquires"}, *res.AfterFault)
	assert.Contains(t, res.Summary, "invalid: 3 anomalies in 2 root causes")
	assert.Contains(t, res.Summary, "first visible at 0.40 s, can be explained by the restart of reference (0.20–0.30 s) between the acquires")

	page := readFile(t, dir, ReportFile)
	assertHas(t, page, `data-verdict="invalid"`)
	for _, kind := range []string{"stale-write-accepted", "replay-accepted", "token-regression", "not-linearizable"} {
		assertHas(t, page, `<span class="kind">`+kind+`</span>`)
	}
	assertHas(t, page, "write c0-2 with token 1 accepted at 0.40 s after token 2 was accepted at 0.01 s")
	assertHas(t, page, `data-ops="16 8"`, "anomaly links to its operations in the timeline")
	assertHas(t, page, `href="#op-16"`)
	assertHas(t, page, `class="wrap">c0-2</td>`, "the anomaly's operations are tabulated")
	assertHas(t, page, "tokens-unauthenticated", "findings are listed")
	assertHas(t, page, "p0 and p1 both held r1 for 3 ms")
	assertHas(t, page, "Anomalies (3)", "the tab shows the one count")
	assertHas(t, page, "Anomalies: 3 anomalies in 2 root causes")
	assert.Less(t, strings.Index(page, `<span class="kind">token-regression`), strings.Index(page, `<span class="kind">stale-write-accepted`),
		"root causes are listed earliest first")
	assert.Equal(t, 2, strings.Count(page, `<li class="root-cause anomaly"`), "the restart explains two; the replay came after it ended")
	assert.Less(t, strings.Index(page, `id="root-causes"`), strings.Index(page, `id="timeline"`), "root causes before the timeline")

	suites := parseJUnit(t, readFile(t, dir, JUnitFile))
	assert.Equal(t, 4+8, suites.Tests)
	assert.Equal(t, 3, suites.Failures)
	for _, c := range suites.Suites[0].Cases {
		if c.Failure != nil {
			assert.Equal(t, "invalid: 3 anomalies in 2 root causes", c.Failure.Message, "JUnit shows the one count")
		}
	}
	assert.Contains(t, suites.Suites[0].Cases[3].SystemOut, "lease-overlap")
	var failures []string
	for _, c := range suites.Suites[0].Cases {
		if c.Failure != nil {
			failures = append(failures, c.Failure.Text)
		}
	}
	assert.Contains(t, strings.Join(failures, "\n"), "[replay-accepted] write c0-3 with token 1")
	assert.Contains(t, suites.Suites[0].Cases[1].SystemOut, "tokens-unauthenticated", "a finding is not a failure")
}

func TestManyAnomaliesAreBounded(t *testing.T) {
	res := checkers.Result{Checker: "direct", Model: "fenced-register", Verdict: checkers.Invalid}
	lease := checkers.Result{Checker: "direct", Model: "lease", Verdict: checkers.Valid}
	for i := 0; i < 450; i++ {
		res.Anomalies = append(res.Anomalies, checkers.Anomaly{Kind: "stale-read", Model: "fenced-register", Key: "r1",
			Text: fmt.Sprintf("read %d saw an old value", i), Ops: []int64{int64(1000 + 2*i), int64(1001 + 2*i)}, At: int64(450-i) * 1e6})
		lease.Anomalies = append(lease.Anomalies, checkers.Anomaly{Kind: "lease-overlap", Model: "lease", Text: fmt.Sprintf("overlap %d", i)})
	}
	dir, r := runFixture(t, "valid", []checkers.Result{res, lease}, nil)
	assert.Equal(t, map[string]int{"stale-read": 450}, r.AnomalyKinds)
	assert.Equal(t, 450, r.AnomalyCount)
	page := readFile(t, dir, ReportFile)
	assert.Equal(t, 1, strings.Count(page, `<li class="root-cause anomaly"`), "one key, no fault that explains: one root cause")
	assert.LessOrEqual(t, strings.Count(page, "saw an old value"), 60, "a bounded list folded under it")
	assertHas(t, page, "lease-overlap ×450", "findings: one line per kind")
	assert.LessOrEqual(t, strings.Count(page, "overlap "), 10, "a few examples folded")
	assertHas(t, page, "read 449 saw an old value", "the earliest are kept")
	assertHasNot(t, page, "read 0 saw an old value")
	assert.Len(t, timelineFromPage(t, page).Anom, 1, "one mark per root cause")

	ju := parseJUnit(t, readFile(t, dir, JUnitFile))
	assert.Contains(t, ju.Suites[0].Cases[0].Failure.Text, "and 400 more (see results.json)")
}

func TestUnknownVerdictIsAnErrorInJUnit(t *testing.T) {
	check := []checkers.Result{
		{Checker: "porcupine", Model: "fenced-register", Verdict: checkers.Unknown, Reason: "timed out after 1m0s on key r1"},
		{Checker: "direct", Model: "fenced-register", Verdict: checkers.Valid},
	}
	dir, res := runFixture(t, "valid", check, nil)
	assert.Equal(t, checkers.Unknown, res.Verdict)
	assert.Equal(t, 2, res.ExitCode)
	assert.Contains(t, res.Summary, "timed out")
	suites := parseJUnit(t, readFile(t, dir, JUnitFile))
	assert.Equal(t, 1, suites.Errors, "unknown must never pass in CI")
	assertHas(t, readFile(t, dir, ReportFile), `data-verdict="unknown"`)
}

func TestInfoOperations(t *testing.T) {
	dir, res := runFixture(t, "info", validCheck(), nil)
	assert.Equal(t, checkers.Valid, res.Verdict)
	assert.Equal(t, map[string]int{"ok": 1, "info": 1}, res.Counts.ByOp["acquire"])
	assert.Equal(t, map[string]int{"info": 2}, res.Counts.ByOp["write"], "a write that never completed is info")
	assert.Equal(t, 4, res.Counts.Processes)
	require.Len(t, res.Faults, 2)
	assert.Equal(t, "partition", res.Faults[0].Nemesis)
	assert.False(t, res.Faults[0].Open)
	assert.Equal(t, "pause", res.Faults[1].Nemesis)
	assert.True(t, res.Faults[1].Open, "a fault never stopped lasts to the end of the history")
	for _, l := range res.Latency {
		assert.NotEqual(t, "info", l.Outcome, "info operations have no latency")
	}

	page := readFile(t, dir, ReportFile)
	assertHas(t, page, "not stopped before the history ended")
	data := timelineFromPage(t, page)
	assert.Equal(t, 5, len(data.C))
	assert.Contains(t, data.D, int64(-1), "the never-completed write is drawn open to the end")
	// p0 saw info; p2 and p3 reuse rows instead of each taking a new one.
	assert.Len(t, data.Lanes, 2)
}

func TestHostileStringsAreEscaped(t *testing.T) {
	hostile := "<script>alert('anomaly')</script> \"quoted\" 'single' \u2028 \xff\xfe"
	check := []checkers.Result{{Checker: "direct", Model: "fenced-register", Verdict: checkers.Invalid,
		Reason: "</script><script>alert('reason')</script>",
		Anomalies: []checkers.Anomaly{{Kind: "stale-write-accepted<b>", Model: "fenced-register", Key: "<script>alert(\"key\")</script>",
			Text: hostile + strings.Repeat("long line ", 2000), Ops: []int64{2, 5}, At: 4000000}}}}
	logs := map[string][]byte{"n1<b>.log": []byte("ok\n<script>alert('log')</script>\n\xff\xfe raw bytes \x00\x01\n" + strings.Repeat("x", 5000) + "\n")}
	dir, res := runFixture(t, "hostile", check, logs)
	assert.Equal(t, checkers.Invalid, res.Verdict)

	page := readFile(t, dir, ReportFile)
	assert.True(t, utf8.ValidString(page), "invalid UTF-8 must not reach the page")
	// Exactly our two script elements: the JSON data and the report's code.
	assert.Equal(t, 2, strings.Count(strings.ToLower(page), "<script"), "no script element may come from the history")
	for _, bad := range []string{"<img src=x", "<svg onload", "<iframe", "<b>bold", "alert(1)</script>", "onmouseover=\"alert"} {
		assertHasNot(t, page, bad)
	}
	for _, script := range scriptRE.FindAllString(page, -1) {
		assert.NotContains(t, script, "\u2028", "U+2028 ends a line inside JavaScript")
		assert.NotContains(t, script, "\u2029")
	}
	assertHas(t, page, "&lt;script&gt;alert(&#34;key&#34;)&lt;/script&gt;", "keys show escaped, not dropped")
	assertHas(t, page, "&lt;script&gt;alert(&#39;log&#39;)&lt;/script&gt;", "log lines show escaped")
	assertHas(t, page, "\uFFFD", "invalid bytes become U+FFFD")
	assertHasNot(t, page, strings.Repeat("A", 1000), "long values are clipped")

	data := timelineFromPage(t, page) // parses: the embedded JSON survived intact
	assert.Contains(t, data.Val, "</script><script>alert(1)</script><!--", "the embedded JSON keeps the value, escaped for the script element")

	ju := readFile(t, dir, JUnitFile)
	assert.True(t, utf8.ValidString(ju))
	suites := parseJUnit(t, ju)
	assert.Contains(t, suites.Suites[0].Cases[0].Failure.Text, "<script>alert('anomaly')</script>", "XML escaping round-trips")
	assert.NotContains(t, ju, "<script>")

	rj := readFile(t, dir, ResultsFile)
	assert.True(t, utf8.ValidString(rj))
	assert.True(t, json.Valid([]byte(rj)))
}

func TestDamagedHistoryStillReports(t *testing.T) {
	dir := t.TempDir()
	valid, err := os.ReadFile("testdata/valid.jsonl")
	require.NoError(t, err)
	lines := strings.SplitAfter(string(valid), "\n")
	damaged := strings.Join(lines[:5], "") + "not json at all\n" + strings.Join(lines[5:], "") + `{"index":25,"time":72`
	path := filepath.Join(dir, HistoryFile)
	require.NoError(t, os.WriteFile(path, []byte(damaged), 0o644))
	res, err := Write(dir, RunInfo{Target: "memory"}, checkOf(t, path, nil))
	require.NoError(t, err)
	assert.Equal(t, checkers.Unknown, res.Verdict, "no checker result is unknown, never valid")
	assert.Equal(t, 11, res.Counts.Ops)
	require.Len(t, res.Notes, 2)
	assert.Contains(t, res.Notes[0], "line 6")
	assertHas(t, readFile(t, dir, ReportFile), "line 6")
}

func TestRegenerate(t *testing.T) {
	dir, first := runFixture(t, "invalid", invalidCheck(), nil)
	require.NoError(t, os.Remove(filepath.Join(dir, ReportFile)))

	// Re-render the stored results (`report --stored`).
	st, err := LoadRun(dir)
	require.NoError(t, err)
	hist := filepath.Join(dir, HistoryFile)
	again, err := Write(dir, st.Info, checkOf(t, hist, st.Checks))
	require.NoError(t, err)
	assert.Equal(t, first.Verdict, again.Verdict)
	assert.Equal(t, first.AnomalyKinds, again.AnomalyKinds)
	assert.Equal(t, first.Run.Command, again.Run.Command)
	assert.Equal(t, first.Files.Visualizations, again.Files.Visualizations)
	assert.Equal(t, first.AfterFault, again.AfterFault, "the cause is named again by the same rule, not appended twice")
	assert.Equal(t, first.Checks, again.Checks)
	page := readFile(t, dir, ReportFile)
	assertHas(t, page, "stale-write-accepted")
	assertHas(t, page, "&#34;nemesis&#34;: &#34;pause,restart&#34;", "config.json is shown")

	// Re-check (`report`): the stored settings come back.
	st, err = LoadRun(dir)
	require.NoError(t, err)
	assert.Equal(t, "memory", st.Info.Target)
	assert.EqualValues(t, 7, st.Info.Seed)
	require.NotNil(t, st.Info.Semantics)
	assert.Equal(t, checkers.EqualReject, st.Info.Semantics.Equal)
	assert.Equal(t, checkers.EqualReject, st.Options.Semantics.Equal)
	assert.Equal(t, 0, st.Options.MinOps, "the options results.json recorded")
	rechecked, err := Write(dir, st.Info, checkOf(t, hist, validCheck()))
	require.NoError(t, err)
	assert.Equal(t, checkers.Valid, rechecked.Verdict)
}

func TestRegenerateCrashedRunNeedsRecheck(t *testing.T) {
	store := t.TempDir()
	dir := filepath.Join(store, "redis", "20261130T060000.000Z")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	b, err := os.ReadFile("testdata/valid.jsonl")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, HistoryFile), b, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, ConfigFile), []byte(`{"seed":42,"nemesis":"pause,clock","command":["fencecheck","test","--target","redis"],"semantics":{"equal":"accept","scope":"global"},"checker":"fast","check_timeout_ns":5000000000,"min_ops":25,"ttl_ns":2000000000}`), 0o644))

	st, err := LoadRun(dir)
	require.NoError(t, err)
	assert.Nil(t, st.Checks, "no results.json: nothing stored to re-render")

	require.NoError(t, UpdateLatest(store, dir))
	st, err = LoadRun(filepath.Join(store, LatestLink))
	require.NoError(t, err)
	assert.Equal(t, analysis.Options{Semantics: checkers.Semantics{Equal: checkers.EqualAccept, Scope: checkers.ScopeGlobal},
		Checker: "fast", Timeout: 5 * time.Second, MinOps: 25, TTL: 2 * time.Second}, st.Options, "the run's check settings, from config.json")
	res, err := Write(filepath.Join(store, LatestLink), st.Info, checkOf(t, filepath.Join(dir, HistoryFile), validCheck()))
	require.NoError(t, err)
	assert.Equal(t, "redis", res.Run.Target, "target from the folder name")
	assert.EqualValues(t, 42, res.Run.Seed)
	assert.Equal(t, []string{"pause", "clock"}, res.Run.Nemeses)
	assert.Equal(t, "fencecheck test --target redis", res.Run.Command)
	require.NotNil(t, res.Run.Semantics)
	assert.Equal(t, testStart, res.Run.Start, "start from the folder name")
	_, err = LoadRun(t.TempDir())
	assert.ErrorContains(t, err, "not a run folder")
}

func TestSafeJSON(t *testing.T) {
	b, err := safeJSON(map[string]string{"v": "</script><!-- \u2028\u2029 & \xff"})
	require.NoError(t, err)
	s := string(b)
	assert.NotContains(t, s, "<")
	assert.NotContains(t, s, "\u2028")
	assert.Contains(t, s, `\u003c/script\u003e`)
	assert.Contains(t, s, `\u2028\u2029`)
	assert.Contains(t, s, `\ufffd`)
}

// Fault pairing is the analysis's: analysis's TestPairFaultsByIDAndOrder.

func parseJUnit(t *testing.T, s string) junitSuites {
	t.Helper()
	var j junitSuites
	require.NoError(t, xml.Unmarshal([]byte(s), &j))
	return j
}

var scriptRE = regexp.MustCompile(`(?s)<script.*?</script>`)

func assertHas(t *testing.T, page, want string, msg ...any) {
	t.Helper()
	if !strings.Contains(page, want) {
		t.Errorf("report lacks %q %v", want, msg)
	}
}

func assertHasNot(t *testing.T, page, bad string, msg ...any) {
	t.Helper()
	if i := strings.Index(page, bad); i >= 0 {
		t.Errorf("report contains %q at %d: …%s… %v", bad, i, page[max(0, i-80):min(len(page), i+80)], msg)
	}
}

var dataRE = regexp.MustCompile(`(?s)<script type="application/json" id="fc-data">(.*?)</script>`)

func timelineFromPage(t *testing.T, page string) timelineJS {
	t.Helper()
	m := dataRE.FindStringSubmatch(page)
	require.NotNil(t, m, "timeline data element")
	var d timelineJS
	require.NoError(t, json.Unmarshal([]byte(m[1]), &d))
	// Undo the column encoding for the assertions' sake: values are kept.
	return d
}

// assertNoExternalResources: the report must work offline.
func assertNoExternalResources(t *testing.T, page string) {
	t.Helper()
	for _, bad := range []string{`src="http`, `href="http`, "@import", "url(http", "//fonts.", "cdn"} {
		assertHasNot(t, page, bad)
	}
	assert.Equal(t, 1, bytes.Count([]byte(page), []byte("<link ")), "no linked stylesheets")
	assertHas(t, page, `<link rel="icon" href="data:,">`, "the only link: an empty icon, so the browser asks for no favicon")
}

// TestReportOfRealCheck renders what the analysis really says about a
// stored history: the contract between the two packages (anomaly ops are
// invoke indices of this history, kinds and verdicts are the documented
// ones, Porcupine's drawing of the failing key is linked).
func TestReportOfRealCheck(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	res, err := analysis.CheckFile(context.Background(), "testdata/invalid.jsonl", analysis.Options{Semantics: checkers.DefaultSemantics(), MinOps: -1})
	require.NoError(t, err)
	r, err := WriteFrom(dir, "testdata/invalid.jsonl", RunInfo{Target: "memory"}, res)
	require.NoError(t, err)
	assert.Equal(t, checkers.Invalid, r.Verdict)
	assert.Contains(t, r.AnomalyKinds, "stale-write-accepted")
	page := readFile(t, dir, ReportFile)
	assertHasNot(t, page, "not a client operation of this history", "every anomaly's operations are found in the history")
	assert.Positive(t, parseJUnit(t, readFile(t, dir, JUnitFile)).Failures)
	require.Contains(t, r.Files.Visualizations, "fenced-register/r1")
	assert.FileExists(t, filepath.Join(dir, r.Files.Visualizations["fenced-register/r1"]))
	assertHas(t, page, `href="porcupine/fenced-register-r1.html"`, "the visualization is linked")
	assert.Equal(t, analysis.Settings{Checker: "both", Timeout: analysis.DefaultTimeout, MinOps: 0, TTL: analysis.DefaultTTL}, r.Options)

	// Re-rendered without Porcupine (report --stored), the drawing stays.
	again, err := Write(dir, RunInfo{Target: "memory"}, checkOf(t, filepath.Join(dir, HistoryFile), r.Checks))
	require.NoError(t, err)
	assert.Equal(t, r.Files.Visualizations, again.Files.Visualizations)
}

// The gate's reasons and how far the run got, as the analysis read them
// from the run's own events, are rendered: results.json's gate_reasons and
// completion, the page's Gate section.
func TestGateAndCompletionAreRendered(t *testing.T) {
	b := historytest.New().
		Run(history.RunStart, 0, map[string]any{"requested": "pause,clock", "nemeses": []string{"pause", "clock"}}).
		Fault("pause", "n1", 10, 20).
		Write("r1", "1", "a", 30, 40).
		Run(history.RunProblem, 50, map[string]any{"phase": "final", "error": "recovery: n2 did not answer"})
	b.Run(history.RunEnd, 60, map[string]any{"complete": false})
	dir := t.TempDir()
	path := filepath.Join(dir, HistoryFile)
	var buf bytes.Buffer
	for _, e := range b.Events() {
		line, err := json.Marshal(e)
		require.NoError(t, err)
		buf.Write(append(line, '\n'))
	}
	require.NoError(t, os.WriteFile(path, buf.Bytes(), 0o644))
	res, err := analysis.CheckFile(context.Background(), path, analysis.Options{MinOps: -1})
	require.NoError(t, err)
	r, err := Write(dir, RunInfo{Target: "memory"}, res)
	require.NoError(t, err)
	assert.Equal(t, checkers.Unknown, r.Verdict)
	assert.Len(t, r.GateReasons, 2)
	require.NotNil(t, r.Completion)
	assert.True(t, r.Completion.Ended)
	assert.False(t, r.Completion.Complete)
	assert.Equal(t, []string{"pause", "clock"}, r.Run.Nemeses, "the nemeses from the run's own start event")
	assert.Contains(t, r.Notes, "problem during the run: final: recovery: n2 did not answer")
	assert.Contains(t, r.Summary, "nemesis clock was requested but never took effect")
	page := readFile(t, dir, ReportFile)
	assertHas(t, page, `<section id="gate"`)
	assertHas(t, page, "the run&#39;s final phase did not complete")
	var onDisk map[string]any
	require.NoError(t, json.Unmarshal([]byte(readFile(t, dir, ResultsFile)), &onDisk))
	assert.Contains(t, onDisk, "gate_reasons")
	assert.Contains(t, onDisk, "completion")
	assertHas(t, page, "faults applied: pause 1")
}

// A fault that failed to apply is counted on the page and in results.json
// (per mode, beside the ones that applied).
func TestFailedFaultsAreRendered(t *testing.T) {
	b := historytest.New().
		Run(history.RunStart, 0, map[string]any{"requested": "all", "nemeses": []string{"pause"}}).
		Fault("pause", "n1", 10, 20).
		Write("r1", "1", "a", 30, 40)
	b.Run(history.RunEnd, 60, map[string]any{"complete": true})
	events := b.Events()
	events = append(events, history.Event{Index: int64(len(events)), Time: 50, Process: history.NemesisProcess, Type: history.Info,
		F: "pause", Node: "n2", Extra: map[string]json.RawMessage{"action": json.RawMessage(`"error"`),
			"mode": json.RawMessage(`"node"`), "error": json.RawMessage(`"pausing n2: no such container"`)}})
	dir := t.TempDir()
	var buf bytes.Buffer
	for _, e := range events {
		line, err := json.Marshal(e)
		require.NoError(t, err)
		buf.Write(append(line, '\n'))
	}
	path := filepath.Join(dir, HistoryFile)
	require.NoError(t, os.WriteFile(path, buf.Bytes(), 0o644))
	res, err := analysis.CheckFile(context.Background(), path, analysis.Options{MinOps: -1})
	require.NoError(t, err)
	r, err := Write(dir, RunInfo{Target: "memory"}, res)
	require.NoError(t, err)
	assert.Equal(t, 1, r.Nemeses["pause"].Failed)
	page := readFile(t, dir, ReportFile)
	assertHas(t, page, "faults that failed to apply: pause 1 of 2 (last error: pausing n2: no such container)")
	assertHas(t, page, "its &#34;node&#34; faults failed to apply every time")
	var onDisk struct {
		Nemeses map[string]analysis.NemesisCount `json:"nemeses"`
	}
	require.NoError(t, json.Unmarshal([]byte(readFile(t, dir, ResultsFile)), &onDisk))
	assert.Equal(t, analysis.ModeCount{Failed: 1, LastError: "pausing n2: no such container"}, onDisk.Nemeses["pause"].Modes["node"])
}

// A version 1 results.json (before the cause rule) re-renders with the
// causes named once, by the current rule.
func TestVersion1ResultsReRender(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "memory", "20261130T060000.000Z")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	b, err := os.ReadFile("testdata/invalid.jsonl")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, HistoryFile), b, 0o644))
	v1 := `{"schema_version": 1, "verdict": "invalid", "run": {"target": "memory", "seed": 7},
	  "checks": [{"checker": "direct", "model": "issuer", "verdict": "invalid", "anomalies": [
	    {"kind": "token-regression", "model": "issuer", "key": "r1", "ops": [14, 6], "at_ns": 401000000,
	     "text": "token 1 returned by acquire op 14 — 0.20 s after the restart of reference that began at 0.20 s"}]},
	    {"checker": "porcupine", "model": "issuer", "verdict": "valid"}]}`
	require.NoError(t, os.WriteFile(filepath.Join(dir, ResultsFile), []byte(v1), 0o644))
	st, err := LoadRun(dir)
	require.NoError(t, err)
	r, err := Write(dir, st.Info, checkOf(t, filepath.Join(dir, HistoryFile), st.Checks))
	require.NoError(t, err)
	assert.Equal(t, SchemaVersion, r.SchemaVersion)
	assert.Equal(t, checkers.Invalid, r.Verdict, "direct proofs, marked by name for version 1")
	assert.Contains(t, r.Reason, "complete checkers disagree", "porcupine said valid")
	a := r.Checks[0].Anomalies[0]
	assert.Equal(t, "token 1 returned by acquire op 14 — can be explained by the restart of reference (0.20–0.30 s) between the acquires", a.Text)
}

// Idle periods a fault touched are rendered apart from the count, and
// labelled as not covered, in results.json, the page and JUnit alike.
func TestCoverageDuringByNemesisIsRenderedAsNotCovered(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	path := filepath.Join("testdata", "valid.jsonl")
	res := checkOf(t, path, validCheck())
	require.NotNil(t, res.Coverage)
	id := analysis.SitKeyIdle(time.Second)
	found := false
	for i := range res.Coverage.Classes {
		for j := range res.Coverage.Classes[i].Situations {
			if s := &res.Coverage.Classes[i].Situations[j]; s.ID == id {
				s.Count, s.Missing, s.During, s.DuringByNemesis = 2, "", 3, map[string]int{"restart": 3}
				found = true
			}
		}
	}
	require.True(t, found)
	_, err := WriteFrom(dir, path, RunInfo{Target: "memory"}, res)
	require.NoError(t, err)

	var onDisk struct {
		Coverage analysis.Coverage `json:"coverage"`
	}
	require.NoError(t, json.Unmarshal([]byte(readFile(t, dir, ResultsFile)), &onDisk))
	for _, cl := range onDisk.Coverage.Classes {
		for _, s := range cl.Situations {
			if s.ID == id {
				assert.Equal(t, 2, s.Count)
				assert.Equal(t, 3, s.During)
				assert.Equal(t, map[string]int{"restart": 3}, s.DuringByNemesis)
			}
		}
	}
	var old analysis.Situation
	assert.NoError(t, json.Unmarshal([]byte(`{"id":"key-idle-1s-stale","count":4,"during":{"none":3,"restart":1}}`), &old),
		"a schema 3 results.json still reads")
	assertHas(t, readFile(t, dir, ReportFile), "not covered, not in the count: 3 more idle periods during which a fault touched a node keeping the state: restart 3")
	assertHas(t, readFile(t, dir, JUnitFile), id+": 2 (not covered: 3 more idle periods during faults on its nodes)")
}
