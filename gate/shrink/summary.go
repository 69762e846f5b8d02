package shrink

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/fencecheck/fencecheck/analysis"
	"github.com/fencecheck/fencecheck/durable"
	"github.com/fencecheck/fencecheck/harness"
	"github.com/fencecheck/fencecheck/nemesis"
	"github.com/fencecheck/fencecheck/reports"
)

// What a shrink writes and says: the kept schedule, the summary in words
// and as JSON, progress lines.

func shapeOf(faults []nemesis.Scheduled, t time.Duration) Shape {
	sh := Shape{Faults: len(faults), Kinds: (&nemesis.Schedule{Faults: faults}).Kinds(), MainPhase: t}
	if len(faults) <= 10 {
		for _, f := range faults {
			sh.Faulted = append(sh.Faulted, f.Describe())
		}
	}
	return sh
}

func nFaults(n int) string {
	switch n {
	case 0:
		return "no fault"
	case 1:
		return "1 fault"
	}
	return fmt.Sprintf("%d faults", n)
}

func faultCount(faults []nemesis.Scheduled) string {
	switch len(faults) {
	case 0:
		return "no fault"
	case 1:
		return "1 fault (" + faults[0].Nemesis + ")"
	}
	return fmt.Sprintf("%d faults (%s)", len(faults), (&nemesis.Schedule{Faults: faults}).Kinds())
}

// roundUp rounds d up to a tenth of a second, a --time people read.
func roundUp(d time.Duration) time.Duration {
	const step = 100 * time.Millisecond
	return (d + step - 1) / step * step
}

func seconds(d time.Duration) string {
	if d < 0 {
		return "unknown"
	}
	return fmt.Sprintf("%.1f s", d.Seconds())
}

func (s *shrinker) progressf(format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	for _, w := range []io.Writer{s.opts.Progress, s.log} {
		if w != nil {
			fmt.Fprintln(w, line)
		}
	}
}

// write stores the outcome in RUN_DIR/shrink: the kept schedule, the
// summary in words and as JSON, and links it from the stored run's report.
func (s *shrinker) write() error {
	res := s.res
	if s.best != nil && res.Summary == "" {
		res.ExitCode = analysis.ExitInvalid
		res.After = shapeOf(s.best.faults, s.best.MainPhase)
		res.Failed, res.Tries = s.best.Failed, len(s.counted(s.best))
		res.Schedule = filepath.Join(s.dir, nemesis.ScheduleFile)
		sched := &nemesis.Schedule{Seed: s.base.Seed, Nemesis: s.orig.Nemesis, MainPhase: s.best.MainPhase, Faults: s.best.faults}
		b, err := sched.Marshal()
		if err == nil {
			err = durable.WriteFile(res.Schedule, b, 0o644)
		}
		if err != nil {
			return err
		}
		cfg := s.base
		cfg.Schedule, cfg.Time, cfg.JUnit = res.Schedule, s.best.MainPhase, ""
		res.Command = cfg.Command()
		res.Summary = describe(s.best.faults, res.Failed, res.Tries)
	} else if res.Summary == "" {
		res.ExitCode = analysis.ExitUnknown
		res.Summary = "no candidate failed again: the failure did not reproduce in a replay of its schedule"
		switch {
		case res.OutOfTime:
			res.Summary += " before the budget ran out"
		case res.Interrupted:
			res.Summary += " before it was interrupted"
		}
	}
	var txt strings.Builder
	fmt.Fprintln(&txt, res.Summary)
	fmt.Fprintln(&txt)
	if len(res.Command) > 0 {
		fmt.Fprintf(&txt, "replay it:\n  %s\n\n", harness.ShellLine(res.Command))
		fmt.Fprintf(&txt, "shrunk from %s over %s to %s over %s", faultCount(s.orig.Faults), seconds(s.base.Time),
			faultCount(s.best.faults), seconds(s.best.MainPhase))
	} else {
		fmt.Fprintf(&txt, "the stored run had %s over %s", faultCount(s.orig.Faults), seconds(s.base.Time))
	}
	fmt.Fprintf(&txt, " in %s: %d candidates, %d runs (tries %d, need %d", res.Took.Round(time.Second), len(res.Candidates), res.Runs, s.opts.Tries, s.opts.Need)
	switch {
	case res.OutOfTime:
		fmt.Fprintf(&txt, "; the budget of %s ran out", s.opts.Budget)
	case res.Interrupted:
		fmt.Fprintf(&txt, "; interrupted")
	}
	fmt.Fprintf(&txt, ").\nEvery run is a run folder under %s; each candidate's schedule is in %s.\n",
		filepath.Join(s.dir, "store"), filepath.Join(s.dir, "candidates"))
	if err := durable.WriteFile(filepath.Join(s.dir, "summary.txt"), []byte(txt.String()), 0o644); err != nil {
		return err
	}
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	if err := durable.WriteFile(filepath.Join(s.dir, "summary.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	s.progressf("%s", res.Summary)
	if len(res.Command) > 0 {
		s.progressf("replay it: %s", harness.ShellLine(res.Command))
	}
	// The stored run's results.json and report link the summary.
	if err := reports.Rerender(context.WithoutCancel(s.ctx), s.runDir); err != nil {
		s.progressf("the stored run's report could not be updated to link the shrink: %v", err)
	}
	return nil
}

// describe is the kept schedule in words.
func describe(faults []nemesis.Scheduled, failed, tries int) string {
	of := fmt.Sprintf("(%d of %d tries)", failed, tries)
	if len(faults) == 0 {
		return "fails with no fault at all " + of + ": the bug needs none"
	}
	sorted := append([]nemesis.Scheduled(nil), faults...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Start < sorted[j].Start })
	parts := make([]string, len(sorted))
	for i, f := range sorted {
		parts[i] = f.Describe()
	}
	return "fails with just: " + strings.Join(parts, "; ") + " " + of
}
