package main

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/checkers/historytest"
	"github.com/fencecheck/fencecheck/harness"
	"github.com/fencecheck/fencecheck/history"
)

// counterResetRun is a counter reset as --bug counter-in-memory under
// --nemesis restart gives it: on 8 locks, tokens climb, a restart of the
// issuer resets its counter, tokens start at 1 again; twice.
func counterResetRun() *historytest.Builder {
	b := historytest.New().OnNode("reference")
	b.Run(history.RunStart, 0, map[string]any{"requested": "restart", "nemeses": []string{"restart"}})
	at := int64(10)
	next := map[string]int{}
	round := func(n int) {
		for l := range 8 {
			lock := fmt.Sprintf("x%d", l)
			for range n {
				next[lock]++
				b.OnProcess(l).Acquire(lock, at, at+3, fmt.Sprint(next[lock]))
				at += 5
			}
		}
	}
	round(5)
	b.Fault("restart", "reference", at, at+100)
	at += 150
	clear(next)
	round(3)
	b.Fault("restart", "reference", at, at+100)
	at += 150
	clear(next)
	round(2)
	return b.Run(history.RunEnd, at+10, map[string]any{"complete": true})
}

// The one count: the CLI's verdict line and root causes, results.json,
// JUnit and the report's header and Anomalies tab show the same number,
// and the root causes are few, each with a witness of at most 5
// operations.
func TestOneCountEverywhere(t *testing.T) {
	run, v := storedRun(t, counterResetRun(), harness.Config{MinOps: 1})
	require.Equal(t, "invalid", string(v.Verdict))
	n := v.AnomalyCount
	require.Positive(t, n)
	line := v.AnomalyLine()
	require.Len(t, v.RootCauses, 2, "one root cause per restart")
	for _, g := range v.RootCauses {
		assert.LessOrEqual(t, len(g.Witness), 5)
		assert.GreaterOrEqual(t, len(g.Witness), 2)
		assert.Equal(t, "restart", g.Cause.Nemesis)
		assert.Subset(t, g.Checkers, []string{"direct", "fast"})
		assert.Empty(t, g.Missed)
	}
	// Porcupine names a key's first violation only: it marks the first.
	assert.Equal(t, []string{"direct", "fast", "porcupine"}, v.RootCauses[0].Checkers)

	var out bytes.Buffer
	printSummary(&out, v.Result, run.Dir)
	cli := out.String()
	assert.Contains(t, cli, "verdict: invalid: "+line)
	assert.Equal(t, 1, strings.Count(cli, "1. The issuer"), cli)
	counts := regexp.MustCompile(`(\d+) (anomal(y|ies)|violations?)\b`).FindAllStringSubmatch(cli, -1)
	for _, c := range counts {
		if strings.HasPrefix(c[2], "anomal") {
			assert.Equal(t, fmt.Sprint(n), c[1], "every count of anomalies in the summary is the one count: %s", c[0])
		}
	}

	b, err := os.ReadFile(filepath.Join(run.Dir, "results.json"))
	require.NoError(t, err)
	var res struct {
		Count   int            `json:"anomaly_count"`
		Line    string         `json:"anomaly_line"`
		Summary string         `json:"summary"`
		Kinds   map[string]int `json:"anomaly_kinds"`
		Causes  []struct {
			Count   int     `json:"count"`
			Witness []int64 `json:"witness"`
		} `json:"root_causes"`
	}
	require.NoError(t, json.Unmarshal(b, &res))
	assert.Equal(t, n, res.Count)
	assert.Equal(t, line, res.Line)
	assert.Contains(t, res.Summary, "invalid: "+line)
	sum, groups := 0, 0
	for _, k := range res.Kinds {
		sum += k
	}
	for _, g := range res.Causes {
		groups += g.Count
	}
	assert.Equal(t, n, sum, "anomaly_kinds sum to the one count")
	assert.Equal(t, n, groups, "the root causes' counts sum to it")

	ju, err := os.ReadFile(filepath.Join(run.Dir, "junit.xml"))
	require.NoError(t, err)
	var doc struct {
		Suites []struct {
			Props []struct {
				Name  string `xml:"name,attr"`
				Value string `xml:"value,attr"`
			} `xml:"properties>property"`
			Cases []struct {
				Failure *struct {
					Message string `xml:"message,attr"`
				} `xml:"failure"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	require.NoError(t, xml.Unmarshal(ju, &doc))
	failures := 0
	for _, c := range doc.Suites[0].Cases {
		if c.Failure != nil {
			failures++
			assert.Equal(t, "invalid: "+line, c.Failure.Message)
		}
	}
	assert.Positive(t, failures)
	for _, p := range doc.Suites[0].Props {
		if p.Name == "anomalies" {
			assert.Equal(t, fmt.Sprint(n), p.Value)
		}
	}

	page, err := os.ReadFile(filepath.Join(run.Dir, "report.html"))
	require.NoError(t, err)
	html := string(page)
	assert.Contains(t, html, fmt.Sprintf("Anomalies (%d)", n), "the tab")
	assert.Contains(t, html, "Anomalies: "+line, "the section")
	assert.Contains(t, html, `class="verdict-summary">invalid: `+line, "the header")
	assert.Equal(t, 2, strings.Count(html, `<li class="root-cause anomaly"`))
	assert.Less(t, strings.Index(html, `id="root-causes"`), strings.Index(html, `id="timeline"`))
}
