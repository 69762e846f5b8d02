package reports

import (
	"encoding/xml"
	"fmt"
	"strings"

	"github.com/fencecheck/fencecheck/analysis"
	"github.com/fencecheck/fencecheck/checkers"
)

// junitMaxAnomalies bounds the anomalies written out in full per test case:
// CI systems show failure text inline and choke on megabytes of it.
const junitMaxAnomalies = 50

type junitSuites struct {
	XMLName  xml.Name     `xml:"testsuites"`
	Name     string       `xml:"name,attr"`
	Tests    int          `xml:"tests,attr"`
	Failures int          `xml:"failures,attr"`
	Errors   int          `xml:"errors,attr"`
	Time     string       `xml:"time,attr"`
	Suites   []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name       string          `xml:"name,attr"`
	Tests      int             `xml:"tests,attr"`
	Failures   int             `xml:"failures,attr"`
	Errors     int             `xml:"errors,attr"`
	Skipped    int             `xml:"skipped,attr"`
	Time       string          `xml:"time,attr"`
	Timestamp  string          `xml:"timestamp,attr,omitempty"`
	Properties []junitProperty `xml:"properties>property"`
	Cases      []junitCase     `xml:"testcase"`
}

type junitProperty struct {
	Name  string `xml:"name,attr"`
	Value string `xml:"value,attr"`
}

type junitCase struct {
	Name      string        `xml:"name,attr"`
	Classname string        `xml:"classname,attr"`
	Time      string        `xml:"time,attr"`
	Failure   *junitMessage `xml:"failure,omitempty"`
	Error     *junitMessage `xml:"error,omitempty"`
	Skipped   *junitSkipped `xml:"skipped,omitempty"`
	SystemOut string        `xml:"system-out,omitempty"`
}

// junitSkipped is <skipped message="...">: a coverage class the run did not
// reach. CI tools (Jenkins, GitLab, GitHub's test reporters) list skipped
// cases apart, with their message, without failing the build: the gate
// (--require-coverage) decides whether that fails the run, in the verdict's
// own cases.
type junitSkipped struct {
	Message string `xml:"message,attr"`
}

type junitMessage struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr"`
	Text    string `xml:",chardata"`
}

// marshalJUnit writes one test case per check. An invalid check is a
// <failure> carrying the anomalies in words; an unknown one is an <error>
// (never a skip: CI must not count "could not decide" as passed). Findings
// that are not violations go to <system-out>. encoding/xml escapes all text
// and replaces characters XML cannot carry.
func marshalJUnit(r *Results) ([]byte, error) {
	class := "fencecheck." + TargetDirName(r.Run.Target)
	suite := junitSuite{
		Name: class,
		Time: secs(r.Duration.Seconds()),
		Properties: []junitProperty{
			{"target", r.Run.Target},
			{"seed", fmt.Sprint(r.Run.Seed)},
			{"verdict", string(r.Verdict)},
			{"command", r.Run.Command},
			{"schema_version", fmt.Sprint(r.SchemaVersion)},
			{"anomalies", fmt.Sprint(r.AnomalyCount)},
		},
	}
	if !r.Run.Start.IsZero() {
		suite.Timestamp = r.Run.Start.UTC().Format("2006-01-02T15:04:05")
	}
	checks := r.Checks
	if len(checks) == 0 {
		// A run with no checker result still needs a red test case.
		checks = []checkers.Result{{Checker: "check", Model: "all", Verdict: r.Verdict, Reason: r.Summary}}
	}
	for _, c := range checks {
		tc := junitCase{
			Name:      c.Checker + "/" + c.Model,
			Classname: class,
			Time:      secs(c.Duration.Seconds()),
		}
		var violations, findings []checkers.Anomaly
		for _, a := range c.Anomalies {
			if a.Finding {
				findings = append(findings, a)
			} else {
				violations = append(violations, a)
			}
		}
		switch c.Verdict {
		case checkers.Valid:
		case checkers.Invalid:
			// The one count (every check's reports merged), never this
			// check's own: CI shows the same number as the page.
			msg := "invalid: " + r.AnomalyLine
			if r.AnomalyCount == 0 && c.Reason != "" {
				msg = "invalid: " + c.Reason
			}
			tc.Failure = &junitMessage{Message: clip(msg, 300), Type: "invalid", Text: rootCauseText(r) + anomalyText(c.Reason, violations)}
			suite.Failures++
		default:
			tc.Error = &junitMessage{Message: clip("unknown: "+c.Reason, 300), Type: "unknown", Text: anomalyText(c.Reason, violations)}
			suite.Errors++
		}
		if len(findings) > 0 {
			tc.SystemOut = anomalyText("", findings)
		}
		suite.Cases = append(suite.Cases, tc)
	}
	suite.Tests = len(suite.Cases)
	doc := junitSuites{Name: "fencecheck", Tests: suite.Tests, Failures: suite.Failures, Errors: suite.Errors,
		Time: suite.Time, Suites: []junitSuite{suite}}
	if cov := coverageSuite(r, class); cov != nil {
		doc.Suites = append(doc.Suites, *cov)
		doc.Tests += cov.Tests
	}
	b, err := xml.MarshalIndent(doc, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(append([]byte(xml.Header), b...), '\n'), nil
}

// coverageSuite is one test case per failure class: passed when the run
// created every situation of it that applies (the counts in
// <system-out>), skipped with the words of what it never created, or why
// the class does not apply, otherwise. Never a failure: what a run did not
// provoke is not a violation.
func coverageSuite(r *Results, class string) *junitSuite {
	if r.Coverage == nil {
		return nil
	}
	s := junitSuite{Name: class + ".coverage", Time: "0.000"}
	for _, cl := range r.Coverage.Classes {
		tc := junitCase{Name: "coverage/" + cl.Class, Classname: class + ".coverage", Time: "0.000"}
		var out, never, na []string
		for _, st := range cl.Situations {
			switch {
			case !st.Applies():
				na = append(na, st.ID+": "+st.NotApplicable)
			case st.Count == 0:
				never = append(never, st.Text+" ("+st.Missing+")")
				out = append(out, fmt.Sprintf("%s: 0%s", st.ID, duringNote(st)))
			default:
				out = append(out, fmt.Sprintf("%s: %d%s", st.ID, st.Count, duringNote(st)))
			}
		}
		switch cl.Status {
		case analysis.CoverageNotApplicable:
			tc.Skipped = &junitSkipped{Message: clip("not applicable: "+strings.Join(na, "; "), 1000)}
		case analysis.CoverageNone, analysis.CoveragePartial:
			tc.Skipped = &junitSkipped{Message: clip(cl.Status+": never created: "+strings.Join(never, "; "), 1000)}
		}
		tc.SystemOut = strings.Join(append(out, na...), "\n")
		if tc.Skipped != nil {
			s.Skipped++
		}
		s.Cases = append(s.Cases, tc)
	}
	s.Tests = len(s.Cases)
	return &s
}

// duringNote says an idle situation's periods a fault touched, which are
// not in its count ("" when none).
func duringNote(st analysis.Situation) string {
	if st.During == 0 {
		return ""
	}
	return fmt.Sprintf(" (not covered: %d more idle periods during faults on its nodes)", st.During)
}

func anomalyText(reason string, as []checkers.Anomaly) string {
	var b strings.Builder
	if reason != "" {
		b.WriteString(clip(reason, 2000))
		b.WriteString("\n")
	}
	for i, a := range as {
		if i == junitMaxAnomalies {
			fmt.Fprintf(&b, "... and %d more (see results.json)\n", len(as)-i)
			break
		}
		fmt.Fprintf(&b, "[%s] %s", a.Kind, clip(a.Text, 2000))
		if a.Key != "" {
			fmt.Fprintf(&b, " (key %s)", clip(a.Key, 200))
		}
		if len(a.Ops) > 0 {
			fmt.Fprintf(&b, " ops %v", a.Ops)
		}
		b.WriteString("\n")
	}
	return b.String()
}

// rootCauseText is the root causes in a line each, before a failing
// check's anomalies.
func rootCauseText(r *Results) string {
	if len(r.RootCauses) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s:\n", r.AnomalyLine)
	for i, g := range r.RootCauses {
		fmt.Fprintf(&b, "%d. %s [%s]", i+1, clip(g.Sentence, 2000), strings.Join(g.Checkers, ", "))
		if len(g.Witness) > 0 {
			fmt.Fprintf(&b, " witness ops %v", g.Witness)
		}
		b.WriteString("\n")
	}
	return b.String() + "\n"
}

func secs(s float64) string { return fmt.Sprintf("%.3f", s) }
