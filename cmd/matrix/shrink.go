package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/fencecheck/fencecheck/durable"
)

// The shrink bar (issue 17): for every bug, shrinking a failing run ends
// within shrinkBarTime with at most shrinkBarFaults faults (none for a bug
// that needs none), failing in at least 2 of 3 tries, and leaves the fault
// kinds the bug needs.
const (
	shrinkBarTime   = 5 * time.Minute
	shrinkBarFaults = 2
)

// ShrinkOutcome is one bug's shrink.
type ShrinkOutcome struct {
	Row Row
	// Seed and Dir are the failing run that was shrunk.
	Seed uint64
	Dir  string
	// Exit is fencecheck shrink's exit code; Took its wall time.
	Exit int
	Took time.Duration
	// From summary.json.
	Summary                  string
	FaultsBefore, FaultsLeft int
	KindsBefore, KindsLeft   string
	PhaseBefore, PhaseLeft   time.Duration
	Failed, Tries            int
	Candidates, Runs         int
	OutOfBudget              bool
	Err                      string
}

// kindsLeft is the set of fault kinds left, sorted.
func (o ShrinkOutcome) kindsLeft() []string {
	var out []string
	for _, k := range strings.Split(o.KindsLeft, ", ") {
		if k == "" {
			continue
		}
		k, _, _ = strings.Cut(k, " ×")
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// AsNeeded says whether the kinds left are the ones the bug needs.
func (o ShrinkOutcome) AsNeeded() bool {
	need := slices.Clone(o.Row.Needs)
	slices.Sort(need)
	return slices.Equal(o.kindsLeft(), need)
}

// MeetsBar says whether the shrink meets issue 17's bar.
func (o ShrinkOutcome) MeetsBar() bool {
	maxFaults := shrinkBarFaults
	if len(o.Row.Needs) == 0 {
		maxFaults = 0
	}
	return o.Exit == 1 && o.Took <= shrinkBarTime && o.FaultsLeft <= maxFaults && o.Failed >= 2 && o.AsNeeded()
}

// runShrinks is --shrink: every bug row, one after the other (each shrink
// runs its own tries in parallel). It returns the exit code.
func runShrinks(ctx context.Context, cfg Config) int {
	rows, err := shrinkRows(cfg.Rows)
	if err != nil {
		fmt.Fprintln(os.Stderr, "matrix:", err)
		return 64
	}
	store := cfg.Store
	if store == "" {
		if store, err = os.MkdirTemp("", "fencecheck-shrink-"); err != nil {
			fmt.Fprintln(os.Stderr, "matrix:", err)
			return 3
		}
		if !cfg.Keep {
			defer os.RemoveAll(store)
		}
	}
	began := time.Now()
	var outs []ShrinkOutcome
	for i := range cfg.Seeds {
		for _, r := range rows {
			if ctx.Err() != nil {
				continue
			}
			o := shrinkOne(ctx, cfg, store, r, cfg.FirstSeed+uint64(i), os.Stderr)
			fmt.Fprintf(os.Stderr, "matrix: %s seed %d: shrink exit %d in %s: %s%s\n", r.Name, o.Seed, o.Exit, o.Took.Round(time.Second), o.Summary, errSuffix(Outcome{Err: o.Err}))
			outs = append(outs, o)
		}
	}
	// One bug's shrinks together.
	order := map[string]int{}
	for i, r := range rows {
		order[r.Name] = i
	}
	sort.SliceStable(outs, func(i, j int) bool { return order[outs[i].Row.Name] < order[outs[j].Row.Name] })
	section := shrinkMarkdown(cfg, outs, time.Since(began), began, ctx.Err() != nil)
	if cfg.Out == "-" {
		fmt.Print(section)
	} else {
		old, _ := os.ReadFile(cfg.Out)
		if err := durable.WriteFile(cfg.Out, []byte(splice(string(old), section)), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "matrix:", err)
			return 3
		}
		fmt.Fprintf(os.Stderr, "matrix: wrote the shrinking section of %s\n", cfg.Out)
	}
	for _, o := range outs {
		if !o.MeetsBar() {
			return 1
		}
	}
	return 0
}

// shrinkRows are the rows --shrink shrinks: by default the reference's
// bugs (the bar); named rows must be ones expected to fail (a bug, a broken
// target).
func shrinkRows(names []string) ([]Row, error) {
	rows, err := selectRows(names)
	if err != nil {
		return nil, err
	}
	var out []Row
	for _, r := range rows {
		switch {
		case len(names) == 0 && r.Bug != "":
			out = append(out, r)
		case len(names) > 0 && r.expectInvalid():
			out = append(out, r)
		case len(names) > 0:
			return nil, fmt.Errorf("row %s is expected valid: nothing to shrink", r.Name)
		}
	}
	return out, nil
}

// shrinkOne runs r with seed and shrinks the run when it failed.
func shrinkOne(ctx context.Context, cfg Config, store string, r Row, seed uint64, log io.Writer) ShrinkOutcome {
	o := ShrinkOutcome{Row: r, Seed: seed, Exit: -1}
	run := runOne(ctx, cfg, store, r, seed)
	fmt.Fprintf(log, "matrix: %s seed %d: exit %d %s %s\n", r.Name, seed, run.Exit, run.Verdict, ttd(run))
	if !run.Detected() {
		o.Err = fmt.Sprintf("the run was not invalid (exit %d): nothing to shrink", run.Exit)
		return o
	}
	o.Dir, _ = runFolder(run.Dir)
	if o.Dir == "" {
		o.Err = "no run folder"
		return o
	}
	args := []string{"shrink", "--budget=" + cfg.Budget.String(), o.Dir}
	cmd := exec.CommandContext(ctx, cfg.Fencecheck, args...)
	cmd.Stdout, cmd.Stderr = log, log
	start := time.Now()
	err := cmd.Run()
	o.Took = time.Since(start)
	var ee *exec.ExitError
	switch {
	case err == nil:
		o.Exit = 0
	case errors.As(err, &ee):
		o.Exit = ee.ExitCode()
	default:
		o.Err = err.Error()
		return o
	}
	var sum struct {
		Summary string `json:"summary"`
		Before  struct {
			Faults    int           `json:"faults"`
			Kinds     string        `json:"kinds"`
			MainPhase time.Duration `json:"main_phase_ns"`
		} `json:"before"`
		After struct {
			Faults    int           `json:"faults"`
			Kinds     string        `json:"kinds"`
			MainPhase time.Duration `json:"main_phase_ns"`
		} `json:"after"`
		Failed     int               `json:"failed"`
		Tries      int               `json:"tries"`
		Runs       int               `json:"runs"`
		Candidates []json.RawMessage `json:"candidates"`
		OutOfTime  bool              `json:"out_of_budget"`
	}
	b, err := os.ReadFile(filepath.Join(o.Dir, "shrink", "summary.json"))
	if err == nil {
		err = json.Unmarshal(b, &sum)
	}
	if err != nil {
		o.Err = "summary.json: " + err.Error()
		return o
	}
	o.Summary, o.Failed, o.Tries, o.Runs, o.Candidates, o.OutOfBudget = sum.Summary, sum.Failed, sum.Tries, sum.Runs, len(sum.Candidates), sum.OutOfTime
	o.FaultsBefore, o.KindsBefore, o.PhaseBefore = sum.Before.Faults, sum.Before.Kinds, sum.Before.MainPhase
	o.FaultsLeft, o.KindsLeft, o.PhaseLeft = sum.After.Faults, sum.After.Kinds, sum.After.MainPhase
	return o
}

// runFolder is the one run folder under a matrix run's store.
func runFolder(store string) (string, error) {
	var found []string
	filepath.WalkDir(store, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && d.Name() == "results.json" {
			found = append(found, filepath.Dir(p))
		}
		return nil
	})
	if len(found) != 1 {
		return "", fmt.Errorf("found %d runs", len(found))
	}
	return found[0], nil
}

func shrinkMarkdown(cfg Config, outs []ShrinkOutcome, took time.Duration, began time.Time, interrupted bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n\n", shrinkHeading)
	fmt.Fprintf(&b, "<!-- Generated by cmd/matrix --shrink (make shrink-matrix); do not edit by hand. -->\n\n")
	fmt.Fprintf(&b, "For every bug and seed S in %d..%d: the failing run `fencecheck test --target memory --nemesis %s --time %s --seed S --bug B` (a target row: its own target and nemesis), shrunk with `fencecheck shrink --budget %s RUN_DIR` (3 tries per candidate, 2 must fail, 2 tries at a time). "+
		"Measured %s on a machine with %d CPUs shared with other team members' test runs, so the times are noisy: wall-clock times under whatever else ran then. Everything (the failing runs included) took %s; %d of %d shrinks meet the bar. "+
		"The bar: each shrink ends within %.0f minutes, keeps at most %d faults (none for a bug that needs none), the kept schedule fails in at least 2 of 3 tries, and the kinds left are the ones the bug needs.\n\n",
		cfg.FirstSeed, cfg.FirstSeed+uint64(cfg.Seeds)-1, cfg.Nemesis, cfg.Time, cfg.Budget, began.UTC().Format("2006-01-02 15:04 UTC"), runtime.NumCPU(), took.Round(time.Second),
		met(outs), len(outs), shrinkBarTime.Minutes(), shrinkBarFaults)
	if interrupted {
		fmt.Fprintf(&b, "**Interrupted**: only the bugs below were shrunk.\n\n")
	}
	fmt.Fprintf(&b, "| bug | seed | faults before | faults after | kinds left | needed | time taken | candidates (runs) | kept schedule | bar |\n")
	fmt.Fprintf(&b, "|---|---|---|---|---|---|---|---|---|---|\n")
	for _, o := range outs {
		need := strings.Join(o.Row.Needs, ", ")
		if need == "" {
			need = "none"
		}
		left := o.KindsLeft
		if left == "" {
			left = "none"
		}
		bar := "✓"
		if !o.MeetsBar() {
			bar = "✗"
		}
		took := o.Took.Round(time.Second).String()
		if o.OutOfBudget {
			took += " (budget)"
		}
		what := o.Summary
		if o.Err != "" {
			what = "error: " + o.Err
		}
		fmt.Fprintf(&b, "| %s%s | %s | %d (%s) over %s | %d over %s | %s | %s | %s | %d (%d) | %s | %s |\n",
			o.Row.label(), flagsNote(o.Row), strconv.FormatUint(o.Seed, 10), o.FaultsBefore, o.KindsBefore, secs(o.PhaseBefore),
			o.FaultsLeft, secs(o.PhaseLeft), left, need, took, o.Candidates, o.Runs, what, bar)
	}
	fmt.Fprintf(&b, "\nRegenerate with `%s`. Each kept schedule replays with the command in its RUN_DIR/shrink/summary.txt.\n", shrinkCommand(cfg))
	return b.String()
}

func met(outs []ShrinkOutcome) int {
	n := 0
	for _, o := range outs {
		if o.MeetsBar() {
			n++
		}
	}
	return n
}

func shrinkCommand(cfg Config) string {
	if cfg.Command != "" {
		return cfg.Command
	}
	return "make shrink-matrix"
}
