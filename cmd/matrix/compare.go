package main

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Guided and random side by side (--compare): two results files of the same
// rows, seeds and time, one run with --nemesis-mode guided and one with
// random, in one table: each bug's detection rate and median time to the
// first violation under each, and the ratio of the medians.

// Compare reads the two matrices' results files (each a whole matrix: an
// unsharded run's --results, or merged shards' is not accepted here: merge
// them into one run's file first) and checks they differ in their nemesis
// mode only.
func Compare(guidedPath, randomPath string) (guided, random *Matrix, err error) {
	if guided, err = Merge([]string{guidedPath}); err != nil {
		return nil, nil, err
	}
	if random, err = Merge([]string{randomPath}); err != nil {
		return nil, nil, err
	}
	g, r := guided.Config, random.Config
	switch {
	case g.NemesisMode != "guided":
		return nil, nil, fmt.Errorf("%s: ran with --nemesis-mode %q, not guided (the first file is the guided matrix)", guidedPath, g.NemesisMode)
	case r.NemesisMode != "random":
		return nil, nil, fmt.Errorf("%s: ran with --nemesis-mode %q, not random (the second file is the random matrix)", randomPath, r.NemesisMode)
	case g.Seeds != r.Seeds || g.FirstSeed != r.FirstSeed || g.Time != r.Time || g.Nemesis != r.Nemesis:
		return nil, nil, fmt.Errorf("%s and %s ran different matrices (seeds %d..%d vs %d..%d, time %s vs %s, nemesis %s vs %s): compare like with like",
			guidedPath, randomPath, g.FirstSeed, g.FirstSeed+uint64(g.Seeds)-1, r.FirstSeed, r.FirstSeed+uint64(r.Seeds)-1, g.Time, r.Time, g.Nemesis, r.Nemesis)
	}
	if !sameRowNames(guided.Rows, random.Rows) {
		return nil, nil, errors.New("the two files ran different rows: run both with the same --rows")
	}
	return guided, random, nil
}

func sameRowNames(a, b []Row) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Name != b[i].Name {
			return false
		}
	}
	return true
}

// rowStats is one row of one matrix: runs detected of runs, and the median
// time to the first violation over the detected runs (median) and over all
// the runs (all), where a run that found nothing counts as the run's length:
// it found nothing within it, so its time is at least that. Dropping the
// misses instead would favour the mode that misses more (its slowest
// outcomes left out). censored: all is such a lower bound itself (more than
// half the runs found nothing, or the middle two straddle one).
type rowStats struct {
	detected, runs int
	median         time.Duration
	all            time.Duration
	censored       bool
	// beforeFaults: every detected run found it before its first fault
	// (the workload alone shows the bug: there was no fault to guide).
	beforeFaults bool
}

func statsOf(m *Matrix, r Row) rowStats {
	var s rowStats
	var ds []time.Duration
	misses := 0
	s.beforeFaults = true
	for _, o := range m.Outcomes[r.Name] {
		s.runs++
		if r.expectInvalid() && !o.Detected() {
			misses++
		}
		if r.expectInvalid() && o.Detected() {
			s.detected++
			if o.FirstInvalid >= 0 {
				ds = append(ds, o.FirstInvalid)
			}
			if o.FirstInvalid < 0 || o.FirstFault >= 0 && o.FirstInvalid >= o.FirstFault {
				s.beforeFaults = false
			}
		}
		if !r.expectInvalid() && o.Exit != 0 {
			s.detected++ // a false alarm or a run that did not end valid
		}
	}
	s.median = median(ds)
	s.all, s.censored = censoredMedian(ds, misses, m.Config.Time)
	s.beforeFaults = s.beforeFaults && s.detected > 0
	return s
}

// censoredMedian is the median of the times ds and of misses runs that
// found nothing within limit (each counted as limit), and whether it is a
// lower bound (a miss is among the middle values). -1 with no run at all.
func censoredMedian(ds []time.Duration, misses int, limit time.Duration) (time.Duration, bool) {
	all := slices.Clone(ds)
	for range misses {
		all = append(all, limit)
	}
	// The misses sort last (a detection at exactly limit sorts with them:
	// it too bounds nothing from above), so the median is censored when
	// its upper middle value is one of them.
	return median(all), len(all) > 0 && len(all)/2 >= len(ds)
}

// medianCell renders a mode's median over all the runs, with the median
// over the detected ones beside it when some found nothing.
func medianCell(s rowStats) string {
	cell := secs(s.all)
	if s.censored {
		cell = "≥ " + cell
	}
	if s.detected < s.runs && s.median >= 0 {
		cell += fmt.Sprintf(" (%s over the %d detected)", secs(s.median), s.detected)
	}
	return cell
}

// CompareMarkdown renders the side-by-side table and says whether the bar
// holds: on every seeded bug, guided detects at least as often as random,
// and the guided median is at most half the random one where both found it
// (a bug random never found counts as guided faster).
func CompareMarkdown(guided, random *Matrix, command string) (string, bool) {
	var b strings.Builder
	c := guided.Config
	fmt.Fprintf(&b, "# Guided and random faults, side by side\n\n")
	fmt.Fprintf(&b, "<!-- Generated by cmd/matrix --compare; do not edit by hand. -->\n\n")
	bugs := slices.ContainsFunc(guided.Rows, Row.expectInvalid)
	what := "The same rows of the detection matrix ([detection.md](detection.md))"
	if !bugs {
		what = "The same targets, each run correct,"
	}
	fmt.Fprintf(&b, "%s over the same seeds %d..%d of %s under `--nemesis %s`, once with `--nemesis-mode guided` (the default for `all`: fault phases and calm phases, each fault drawn toward the failure situation furthest below its target: [coverage.md](coverage.md)) and once with `--nemesis-mode random` (every fault drawn at random, as before). Regenerate with:\n\n",
		what, c.FirstSeed, c.FirstSeed+uint64(c.Seeds)-1, c.Time, c.Nemesis)
	fmt.Fprintf(&b, "    %s\n    %s\n    %s\n\n", guided.Config.Command, random.Config.Command, command)
	fmt.Fprintf(&b, "Guided ran %d at a time in %s (%s), random %d at a time in %s (%s), on a machine with %d CPUs. **Detected**: the run's verdict is invalid. **Median first violation**: when the history first became invalid, in seconds since the run's start, over all the runs, a run that found nothing counting as the run's length (it found nothing within it: its time is at least that; a median that is such a bound is marked ≥, and so is a ratio it bounds), with the median over the detected runs beside it where some found nothing.\n\n",
		guided.Config.Parallel, guided.Elapsed.Round(time.Second), guided.Started.UTC().Format("2006-01-02 15:04 UTC"),
		random.Config.Parallel, random.Elapsed.Round(time.Second), random.Started.UTC().Format("2006-01-02 15:04 UTC"), guided.CPUs)
	if bugs {
		fmt.Fprintf(&b, "| bug or target | detected, guided | detected, random | median first violation, guided | median, random | guided / random |\n|---|---|---|---|---|---|\n")
	}
	passed := true
	for _, r := range guided.Rows {
		if !r.expectInvalid() {
			continue
		}
		g, x := statsOf(guided, r), statsOf(random, r)
		ratio := "–"
		// Over all the runs: where random's median is a lower bound the
		// ratio is an upper bound (≤), where guided's is, a lower one.
		bound := ""
		if x.censored && !g.censored {
			bound = "≤ "
		}
		switch {
		case g.median < 0 && x.median >= 0:
			passed = false
			ratio = "guided never found it ⚠"
		case g.median >= 0 && x.median < 0:
			ratio = "random never found it"
		case g.beforeFaults && x.beforeFaults:
			// Found by the workload alone in every run of both modes:
			// the faults, guided or not, played no part.
			ratio = fmt.Sprintf("found before the first fault in every run (%.2f: no fault to guide)", g.all.Seconds()/max(x.all.Seconds(), 1e-3))
		case g.censored:
			passed = false
			ratio = "guided found nothing in half its runs or more ⚠"
		case g.all >= 0 && x.all > 0 && r.Floor > 0 && x.all/2 < r.Floor:
			// Half of random's median is sooner than the bug can show:
			// the bar is then not to be slower than random.
			q := g.all.Seconds() / x.all.Seconds()
			ratio = fmt.Sprintf("%s%.2f (the bug cannot show before %s, more than half of random's median: the bar is ≤ 1)", bound, q, secs(r.Floor))
			if q > 1 {
				passed = false
				ratio += " ⚠"
			}
		case g.all >= 0 && x.all > 0:
			q := g.all.Seconds() / x.all.Seconds()
			ratio = fmt.Sprintf("%s%.2f", bound, q)
			if q > 0.5 {
				passed = false
				ratio += " ⚠"
			}
		}
		mark := ""
		if g.detected*x.runs < x.detected*g.runs {
			passed = false
			mark = " ⚠"
		}
		fmt.Fprintf(&b, "| %s%s | %d/%d%s | %d/%d | %s | %s | %s |\n", r.label(), flagsNote(r), g.detected, g.runs, mark, x.detected, x.runs,
			medianCell(g), medianCell(x), ratio)
	}
	fmt.Fprintf(&b, "\n| correct configuration | not valid, guided | not valid, random |\n|---|---|---|\n")
	for _, r := range guided.Rows {
		if r.expectInvalid() {
			continue
		}
		g, x := statsOf(guided, r), statsOf(random, r)
		if g.detected > 0 {
			passed = false
		}
		conf := r.Mode
		if r.Target != "" || r.Spec != "" {
			conf = r.label() + ": " + r.Mode
		}
		fmt.Fprintf(&b, "| %s%s | %d/%d | %d/%d |\n", conf, flagsNote(r), g.detected, g.runs, x.detected, x.runs)
	}
	switch {
	case passed && !bugs:
		fmt.Fprintf(&b, "\n**Result: every configuration stayed valid in both modes.**\n")
	case !bugs:
		fmt.Fprintf(&b, "\n**Result: a configuration was not found valid under guided** (see its row).\n")
	case passed:
		fmt.Fprintf(&b, "\n**Result: meets the bar**: on every bug, guided detects at least as often as random, its median first violation is at most half of random's (where the bug can show that soon, and where a fault took part), and the correct configurations stay valid.\n")
	default:
		fmt.Fprintf(&b, "\n**Result: does not meet the bar** (the rows marked ⚠): the bar is, on every bug, a detection rate no lower than random's and a median first violation at most half of random's, and no correct configuration found invalid under guided.\n")
	}
	b.WriteString(situationsMarkdown(guided, random))
	return b.String(), passed
}
