package analysis

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/checkers/oracle"
	"github.com/fencecheck/fencecheck/history"
)

// inProcess is an oracle.Checker that runs this package's analysis on a
// history, as `fencecheck check --checker MODE --min-ops 0` does (the same
// reader, pairer, checkers, combination and gate; exit-code mapping by
// ExitCode), without a process per history. checkers/oracle's
// TestDifferential runs the built CLI on a smaller sample.
func inProcess(checker string) oracle.Checker {
	return func(h []byte, sem oracle.Semantics) oracle.Answer {
		s := checkers.Semantics{Equal: checkers.EqualReject, Scope: checkers.ScopePerLock, Authenticated: sem.Authenticated}
		if sem.EqualAccept {
			s.Equal = checkers.EqualAccept
		}
		if sem.GlobalScope {
			s.Scope = checkers.ScopeGlobal
		}
		res, err := CheckReader(context.Background(), bytes.NewReader(h), Options{Semantics: s, Checker: checker, Timeout: 10 * time.Second})
		var pe *history.ParseError
		switch {
		case errors.As(err, &pe):
			return oracle.Answer{Verdict: "input-error", Line: pe.Line, Output: err.Error()}
		case err != nil:
			return oracle.Answer{Verdict: "error", Output: err.Error()}
		}
		var out strings.Builder
		fmt.Fprintf(&out, "verdict: %s (%s)\n", res.Verdict, res.Reason)
		for _, c := range res.Checks {
			fmt.Fprintf(&out, "  %s %s %s\n", c.Checker, c.Model, c.Verdict)
		}
		for _, a := range res.Anomalies() {
			fmt.Fprintf(&out, "  - [%s] %s\n", a.Kind, a.Text)
		}
		a := oracle.Answer{Output: out.String()}
		switch res.ExitCode {
		case ExitValid:
			a.Verdict = "valid"
		case ExitInvalid:
			a.Verdict = "invalid"
		default:
			a.Verdict = "unknown"
		}
		return a
	}
}

// TestDifferentialWithOracle runs the analysis with the default selection
// and each checker of the table alone (a checker added to it is tested
// here with no change) and the independent brute-force oracle
// (checkers/oracle) on generated histories, and requires the same answer on
// every one: the verdict, and for a refused history the line. -short runs a
// fifth as many.
func TestDifferentialWithOracle(t *testing.T) {
	n := 3000
	if testing.Short() {
		n = 600
	}
	total := 0
	for i, checker := range append([]string{DefaultChecker}, CheckerNames()...) {
		rep := oracle.Differential(inProcess(checker), oracle.DiffOptions{Seed: uint64(1 + i*n), N: n, Workers: runtime.GOMAXPROCS(0), Causes: oracle.Causes})
		total += rep.Checked
		t.Logf("--checker %s: %d generated histories checked (oracle: %d valid, %d invalid, %d input errors), %d over the oracle's bound, %d disagreement classes",
			checker, rep.Checked, rep.Valid, rep.Invalid, rep.Checked-rep.Valid-rep.Invalid, rep.TooBig, len(rep.Disagreements))
		if rep.Checked < n*9/10 || rep.Valid < n/4 || rep.Invalid < n/4 {
			t.Errorf("--checker %s: the generator's mix is off: %+v", checker, rep)
		}
		for _, d := range rep.Disagreements {
			t.Errorf("--checker %s disagrees with the oracle:\n%s", checker, d.Format())
		}
	}
	t.Logf("%d histories in all, every one agreeing", total)
}
