package reports

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/analysis"
)

// The browser test loads report.html and the serve page in real headless
// Chromium. It FAILS when Chromium is missing in CI (CI=true, or
// FENCECHECK_REQUIRE_BROWSER=1) and skips only on a developer machine.
// FENCECHECK_UPDATE_SCREENSHOT=1 also writes docs/report.png.

func findChromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{os.Getenv("FENCECHECK_CHROMIUM"), "chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if name == "" {
			continue
		}
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" || os.Getenv("FENCECHECK_REQUIRE_BROWSER") == "1" {
		t.Fatal("chromium not found: install Debian's chromium package (apt-get install -y chromium) or set FENCECHECK_CHROMIUM")
	}
	t.Skip("chromium not found (set CI=true or FENCECHECK_REQUIRE_BROWSER=1 to make this a failure)")
	return ""
}

// browser starts Chromium and collects every console error, uncaught
// exception, log error and JavaScript dialog (an alert from an injected
// script would be one) into problems.
type browser struct {
	ctx      context.Context
	mu       sync.Mutex
	problems []string
}

func newBrowser(t *testing.T) *browser {
	chrome := findChromium(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chrome),
		chromedp.NoSandbox, // CI runs as root
		chromedp.DisableGPU,
		chromedp.WindowSize(1280, 1000),
		chromedp.Flag("allow-file-access-from-files", true),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	// This cdproto predates some event enums of today's Chromium; chromedp
	// logs and drops such events. None of them is one the test reads.
	ctx, cancelCtx := chromedp.NewContext(actx, chromedp.WithErrorf(func(format string, args ...any) {
		if msg := fmt.Sprintf(format, args...); !strings.Contains(msg, "could not unmarshal event") {
			t.Logf("chromedp: %s", msg)
		}
	}))
	ctx, cancelTimeout := context.WithTimeout(ctx, 45*time.Second)
	t.Cleanup(func() { cancelTimeout(); cancelCtx(); cancelAlloc() })
	b := &browser{ctx: ctx}
	chromedp.ListenTarget(ctx, func(ev any) {
		switch ev := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			if ev.Type == runtime.APITypeError || ev.Type == runtime.APITypeAssert {
				var args []string
				for _, a := range ev.Args {
					args = append(args, string(a.Value)+a.Description)
				}
				b.add("console.%s: %s", ev.Type, strings.Join(args, " "))
			}
		case *runtime.EventExceptionThrown:
			d := ev.ExceptionDetails
			msg := d.Text
			if d.Exception != nil {
				msg += " " + d.Exception.Description
			}
			b.add("uncaught exception: %s (line %d)", msg, d.LineNumber)
		case *log.EventEntryAdded:
			if ev.Entry.Level == log.LevelError {
				b.add("log error: %s %s", ev.Entry.Text, ev.Entry.URL)
			}
		case *page.EventJavascriptDialogOpening:
			b.add("a JavaScript dialog opened: %q (injected script ran)", ev.Message)
			go chromedp.Run(ctx, page.HandleJavaScriptDialog(false))
		}
	})
	require.NoError(t, chromedp.Run(ctx, log.Enable()), "start chromium")
	return b
}

func (b *browser) add(format string, args ...any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.problems = append(b.problems, fmt.Sprintf(format, args...))
}

// open loads url and waits until the report (or serve page) is drawn. A
// page whose script died never gets there: fail soon, with what the console
// said, instead of waiting for the test's deadline.
func (b *browser) open(t *testing.T, url, ready string) {
	t.Helper()
	b.run(t, "open "+url, chromedp.Navigate(url), chromedp.WaitReady(ready, chromedp.ByQuery))
}

func (b *browser) run(t *testing.T, what string, actions ...chromedp.Action) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	if err := chromedp.Run(ctx, actions...); err != nil {
		b.mu.Lock()
		defer b.mu.Unlock()
		t.Fatalf("%s: %v; browser problems: %q", what, err, b.problems)
	}
}

const reportReady = `#tl-wrap[data-drawn-ops]`

func (b *browser) assertClean(t *testing.T, where string) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	assert.Empty(t, b.problems, "browser problems on %s", where)
	b.problems = nil
}

// pageState is what the report shows, read from the live DOM.
type pageState struct {
	Verdict        string `json:"verdict"`
	BannerText     string `json:"bannerText"`
	BannerVisible  bool   `json:"bannerVisible"`
	Anomalies      int    `json:"anomalies"`
	AnomalyText    string `json:"anomalyText"`
	TimelineBands  int    `json:"timelineBands"`
	VisibleBands   int    `json:"visibleBands"`
	BandLabels     string `json:"bandLabels"`
	AnomalyMarks   int    `json:"anomalyMarks"`
	PlotBands      int    `json:"plotBands"`
	Drawn          int    `json:"drawn"`
	CanvasHeight   int    `json:"canvasHeight"`
	Selected       int    `json:"selected"`
	WindowLabel    string `json:"windowLabel"`
	ScriptElements int    `json:"scriptElements"`
	// The page's order and the fault lanes, from the live layout.
	CausesTop       float64  `json:"causesTop"`
	TimelineTop     float64  `json:"timelineTop"`
	LaneNames       []string `json:"laneNames"`
	BandsOutOfLane  int      `json:"bandsOutOfLane"`
	LabelsOverlap   int      `json:"labelsOverlap"`
	BannerFacts     string   `json:"bannerFacts"`
	LaneColors      []string `json:"laneColors"`
	LanesBottomPx   float64  `json:"lanesBottomPx"`
	TimelineLeftPx  float64  `json:"timelineLeftPx"`
	TimelineTopPx   float64  `json:"timelineTopPx"`
	TimelineRightPx float64  `json:"timelineRightPx"`
}

const readState = `(() => {
  const visible = el => !!el && el.getBoundingClientRect().height > 0 && getComputedStyle(el).visibility !== "hidden";
  const banner = document.getElementById("verdict");
  const anomalies = [...document.querySelectorAll("#root-causes > li")].filter(visible);
  const bands = [...document.querySelectorAll("#tl-faults rect.fault-band")];
  return {
    verdict: banner.dataset.verdict,
    bannerText: banner.innerText,
    bannerVisible: visible(banner),
    anomalies: anomalies.length,
    anomalyText: anomalies.map(a => a.innerText).join("\n"),
    timelineBands: bands.length,
    visibleBands: bands.filter(r => r.getBoundingClientRect().width > 0 && r.getBoundingClientRect().height > 0).length,
    bandLabels: [...document.querySelectorAll("#tl-faults text")].map(t => t.textContent).join(","),
    anomalyMarks: document.querySelectorAll("#tl-faults .anomaly-mark").length,
    plotBands: document.querySelectorAll("#performance rect.fault-band").length,
    drawn: Number(document.getElementById("tl-wrap").dataset.drawnOps || 0),
    canvasHeight: document.getElementById("tl-canvas").getBoundingClientRect().height,
    selected: document.querySelectorAll(".anomaly.selected").length,
    windowLabel: document.getElementById("tl-window").textContent,
    scriptElements: document.querySelectorAll("script").length,
    causesTop: (document.getElementById("root-causes") || {getBoundingClientRect: () => ({top: -1})}).getBoundingClientRect().top + scrollY,
    timelineTop: document.getElementById("timeline").getBoundingClientRect().top + scrollY,
    laneNames: [...document.querySelectorAll("#tl-faults rect.fault-lane")].map(r => r.dataset.nemesis),
    bandsOutOfLane: (() => {
      const lanes = [...document.querySelectorAll("#tl-faults rect.fault-lane")].map(r => r.getBoundingClientRect());
      return bands.filter(b => { const r = b.getBoundingClientRect(), l = lanes[Number(b.dataset.lane)];
        return !l || r.top < l.top - 0.5 || r.bottom > l.bottom + 0.5; }).length;
    })(),
    labelsOverlap: (() => {
      const ls = [...document.querySelectorAll("#tl-faults text.fault-label")].map(t => t.getBoundingClientRect());
      let n = 0;
      for (let i = 0; i < ls.length; i++) for (let j = i + 1; j < ls.length; j++) {
        const a = ls[i], b = ls[j];
        if (a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom) n++;
      }
      return n;
    })(),
    bannerFacts: [...document.querySelectorAll("#verdict .verdict-facts")].map(p => p.innerText).join("\n"),
    laneColors: [...new Set(bands.map(b => b.getAttribute("fill")))],
    lanesBottomPx: Math.max(0, ...[...document.querySelectorAll("#tl-faults rect.fault-lane")].map(r => r.getBoundingClientRect().bottom - document.getElementById("tl-wrap").getBoundingClientRect().top)),
    timelineLeftPx: document.getElementById("tl-wrap").getBoundingClientRect().left,
    timelineTopPx: document.getElementById("tl-wrap").getBoundingClientRect().top,
    timelineRightPx: document.getElementById("tl-wrap").getBoundingClientRect().right,
  };
})()`

func (b *browser) state(t *testing.T) pageState {
	t.Helper()
	var s pageState
	require.NoError(t, chromedp.Run(b.ctx, chromedp.Evaluate(readState, &s)))
	return s
}

func TestReportAndServeInBrowser(t *testing.T) {
	b := newBrowser(t)

	store := t.TempDir()
	dir, err := NewRunDir(store, "memory", time.Date(2026, 11, 30, 6, 0, 0, 0, time.UTC))
	require.NoError(t, err)
	info, an := synthRun(t, dir, 6000, true, analysis.CheckerBoth)
	_, err = Write(dir, info, an)
	require.NoError(t, err)
	require.NoError(t, UpdateLatest(store, dir))
	// The files of a real run folder, which the serve index lists.
	for _, f := range []string{ConfigFile, ScheduleFile, "nodes/reference/data"} {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(dir, f)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, f), []byte("{}"), 0o644))
	}

	// 1. The report opened as a file, as a user does from a CI artifact.
	b.open(t, "file://"+filepath.Join(dir, ReportFile), reportReady)
	s := b.state(t)
	assert.Equal(t, "invalid", s.Verdict)
	assert.True(t, s.BannerVisible)
	assert.Contains(t, s.BannerText, "INVALID", "the banner shows the verdict (upper-cased by CSS)")
	assert.Equal(t, len(an.RootCauses), s.Anomalies, "the root-cause cards are visible")
	assert.Positive(t, s.Anomalies)
	assert.Contains(t, s.AnomalyText, "stale-write-accepted")
	assert.Less(t, s.CausesTop, s.TimelineTop, "root causes come before the timeline")
	assert.Equal(t, []string{"restart", "pause"}, s.LaneNames, "one fault lane per nemesis, in the fixed order")
	assert.Zero(t, s.BandsOutOfLane, "each fault is drawn in its nemesis's lane, not across the page")
	assert.Zero(t, s.LabelsOverlap, "fault labels never run together")
	assert.ElementsMatch(t, []string{colorOf("restart"), colorOf("pause")}, s.LaneColors, "a colour fixed per nemesis")
	assert.GreaterOrEqual(t, s.TimelineBands, 2, "the timeline shades the fault periods")
	assert.Equal(t, s.TimelineBands, s.VisibleBands, "every shaded period has a size")
	assert.Contains(t, s.BandLabels, "restart")
	assert.Contains(t, s.BandLabels, "pause")
	assert.Greater(t, s.PlotBands, 0, "the plots shade the fault periods")
	assert.Equal(t, len(an.RootCauses), s.AnomalyMarks, "each root cause is marked where its first violation became visible")
	assert.Greater(t, s.Drawn, 5000, "the timeline drew the operations")
	assert.Greater(t, s.CanvasHeight, 100)
	assert.Equal(t, 2, s.ScriptElements)

	lookAtTheScreenshot(t, b, s)

	if os.Getenv("FENCECHECK_UPDATE_SCREENSHOT") != "" {
		var png []byte
		require.NoError(t, chromedp.Run(b.ctx,
			emulation.SetDeviceMetricsOverride(1280, 1500, 1, false),
			chromedp.Sleep(200*time.Millisecond), // the timeline redraws on resize
			chromedp.CaptureScreenshot(&png),
		))
		require.NoError(t, os.WriteFile(filepath.Join("..", "docs", "report.png"), png, 0o644))
	}

	// "show in timeline" zooms to the anomaly's operations.
	b.run(t, "show an anomaly in the timeline",
		chromedp.Click(`#root-causes a.show-ops`, chromedp.ByQuery),
		chromedp.Sleep(100*time.Millisecond),
	)
	zoomed := b.state(t)
	assert.Equal(t, 1, zoomed.Selected)
	assert.Less(t, zoomed.Drawn, s.Drawn/10, "zoomed in on the anomaly")
	assert.NotEqual(t, s.WindowLabel, zoomed.WindowLabel)
	b.assertClean(t, "report.html from a file")

	// 2. The serve page, then a report through it (with its headers).
	srv, err := NewServer(store)
	require.NoError(t, err)
	defer srv.Close()
	ts := httptest.NewServer(srv)
	defer ts.Close()
	var rows int
	var verdicts string
	b.run(t, "the serve page",
		chromedp.Navigate(ts.URL+"/"),
		chromedp.WaitVisible("#run-table", chromedp.ByID),
		chromedp.Evaluate(`document.querySelectorAll("#run-table tr.run").length`, &rows),
		chromedp.Evaluate(`[...document.querySelectorAll("#run-table .pill")].map(p => p.innerText).join(",")`, &verdicts),
	)
	assert.Equal(t, 1, rows)
	assert.Equal(t, "invalid", verdicts)
	// Readable at 1400 px (and wider): the table stays in its card, the
	// summary column is not squeezed to a word per line.
	for _, width := range []int64{1400, 1920} {
		var fit struct {
			TableRight, CardRight, SummaryWidth float64
		}
		b.run(t, fmt.Sprintf("the serve page at %d px", width),
			emulation.SetDeviceMetricsOverride(width, 900, 1, false),
			chromedp.Sleep(100*time.Millisecond),
			chromedp.Evaluate(`(() => ({
			  TableRight: document.getElementById("run-table").getBoundingClientRect().right,
			  CardRight: document.getElementById("runs").getBoundingClientRect().right,
			  SummaryWidth: document.querySelector("#run-table td.summary").getBoundingClientRect().width,
			}))()`, &fit),
		)
		assert.LessOrEqual(t, fit.TableRight, fit.CardRight, "at %d px the table stays inside its card", width)
		assert.GreaterOrEqual(t, fit.SummaryWidth, 300.0, "at %d px the summary has room", width)
	}
	b.assertClean(t, "the serve page")

	b.run(t, "follow the report link",
		chromedp.Click(`#run-table tr.run td.files a`, chromedp.ByQuery),
		chromedp.WaitReady(reportReady, chromedp.ByQuery),
	)
	served := b.state(t)
	assert.Equal(t, "invalid", served.Verdict)
	assert.Equal(t, s.TimelineBands, served.TimelineBands)
	b.assertClean(t, "report.html through serve")

	// 3. A run killed before any operation: an empty history, no check.
	empty := filepath.Join(t.TempDir(), "run")
	require.NoError(t, os.MkdirAll(empty, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(empty, HistoryFile), nil, 0o644))
	_, err = Write(empty, RunInfo{Target: "etcd"}, checkOf(t, filepath.Join(empty, HistoryFile), nil))
	require.NoError(t, err)
	b.open(t, "file://"+filepath.Join(empty, ReportFile), reportReady)
	assert.Equal(t, "unknown", b.state(t).Verdict)
	b.assertClean(t, "the report of an empty history")

	// 4. A report full of hostile strings runs none of them.
	hostileDir, _ := runFixture(t, "hostile", invalidCheck(), map[string][]byte{"n1.log": []byte("<script>alert('log')</script>")})
	b.open(t, "file://"+filepath.Join(hostileDir, ReportFile), reportReady)
	h := b.state(t)
	assert.Equal(t, 2, h.ScriptElements, "no script element injected")
	assert.Greater(t, h.Drawn, 0)
	// Hovering every operation builds the tooltips from hostile values.
	require.NoError(t, chromedp.Run(b.ctx, chromedp.Evaluate(`(() => {
	  const c = document.getElementById("tl-canvas"), r = c.getBoundingClientRect();
	  for (let x = r.left + 86; x < r.right; x += 4)
	    for (let y = r.top + 20; y < r.bottom - 24; y += 6)
	      c.dispatchEvent(new MouseEvent("mousemove", {clientX: x, clientY: y, bubbles: true}));
	  return true;
	})()`, nil)))
	b.assertClean(t, "the hostile report")
}

// TestLargeReportInBrowser opens the report of a 100k-operation history and
// holds its load-and-draw time to a budget (skipped with -short).
// FENCECHECK_REPORT_OPS=1000000 measures another size (docs/performance.md:
// the density view at 1M operations).
func TestLargeReportInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("100k operations: run without -short")
	}
	ops := 100_000
	if n, err := strconv.Atoi(os.Getenv("FENCECHECK_REPORT_OPS")); err == nil && n > 0 {
		ops = n
	}
	b := newBrowser(t)
	dir := t.TempDir()
	info, an := synthRun(t, dir, ops, true, analysis.CheckerFast)
	_, err := Write(dir, info, an)
	require.NoError(t, err)

	start := time.Now()
	b.open(t, "file://"+filepath.Join(dir, ReportFile), reportReady)
	loaded := time.Since(start)
	var redraw float64
	require.NoError(t, chromedp.Run(b.ctx, chromedp.Evaluate(`(() => {
	  const t0 = performance.now();
	  document.querySelector('[data-tl="in"]').click();
	  document.querySelector('[data-tl="reset"]').click();
	  return (performance.now() - t0) / 2;
	})()`, &redraw)))
	s := b.state(t)
	t.Logf("%d operations: page loaded and timeline drawn in %v; one redraw of the whole run takes %.0f ms", ops, loaded.Round(time.Millisecond), redraw)
	if ops <= timelineDetailOps {
		assert.Greater(t, s.Drawn, ops*99/100)
	}
	assert.Less(t, loaded, 15*time.Second)
	assert.Less(t, redraw, 1000.0, "zooming must stay interactive")
	b.assertClean(t, "the 100k-operation report")
}

// Past the detail budget the page draws the density of the whole run and,
// once the view is inside a window around a violation (the root cause's
// "show the witness"), every operation there one by one.
func TestDensityReportInBrowser(t *testing.T) {
	smallLimits(t, 3000, 4)
	b := newBrowser(t)
	dir := t.TempDir()
	info, an := synthRun(t, dir, 20_000, true, analysis.CheckerFast)
	_, err := Write(dir, info, an)
	require.NoError(t, err)
	b.open(t, "file://"+filepath.Join(dir, ReportFile), reportReady)
	var cells int
	require.NoError(t, chromedp.Run(b.ctx, chromedp.Evaluate(`Number(document.getElementById("tl-wrap").dataset.densityCells)`, &cells)))
	s := b.state(t)
	assert.Positive(t, cells, "the density view is drawn")
	assert.Contains(t, s.WindowLabel, "density of every operation")
	assert.Less(t, s.CanvasHeight, 4*16+200, "four rows, not one per client")

	require.NoError(t, chromedp.Run(b.ctx, chromedp.Evaluate(`document.querySelector("a.show-ops").click()`, nil)))
	s = b.state(t)
	assert.Positive(t, s.Drawn, "the witness's window drawn one by one")
	assert.Contains(t, s.WindowLabel, "every one (a window around a violation)")
	b.assertClean(t, "the density report")
}
