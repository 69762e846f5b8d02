package analysis

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/checkers/direct"
	"github.com/fencecheck/fencecheck/checkers/fast"
	"github.com/fencecheck/fencecheck/checkers/porcupine"
	"github.com/fencecheck/fencecheck/history"
)

// Checker decides the fenced-register and issuer models over a history's
// paired operations: checkers/direct, checkers/porcupine and checkers/fast each
// provide one. ops are shared: a checker must not modify them. It honours
// ctx (an interrupted check answers Unknown, never Valid) and returns one
// checkers.Result per model it checks, marking each Complete and Proofs as
// they hold (see checkers.Result): the analysis combines them by those marks.
//
// A Checker value serves one analysis; the optional extras below describe
// its last Check.
type Checker interface {
	Name() string
	Check(ctx context.Context, ops *history.Ops, sem checkers.Semantics) []checkers.Result
}

// KeyResulter is an optional extra of a checker that decides key by key
// (Porcupine): its per-key verdicts, which the report uses to pick the keys
// it visualizes.
type KeyResulter interface {
	KeyResults() []checkers.KeyResult
}

// Visualizer is an optional extra of a checker that can draw one key of one
// model as an HTML page, with the analysis's fault periods and anomalies as
// annotations (Porcupine's visualization).
type Visualizer interface {
	Visualize(model, key string, notes []checkers.Annotation, w io.Writer) error
}

// Budgeted is an optional extra of a checker whose search is cut off by
// wall-clock time (Porcupine): the analysis runs it alone, after the other
// work, so that sharing the cores with that work never spends its budget.
type Budgeted interface {
	Budget() time.Duration
}

// Checker names of Options.Checker (the table's lines and its alias).
const (
	CheckerFast      = checkers.CheckerFast
	CheckerPorcupine = checkers.CheckerPorcupine
	// CheckerBoth is Porcupine and the fast checker, the default.
	CheckerBoth = "both"
	// DefaultChecker is what an empty Options.Checker selects.
	DefaultChecker = CheckerBoth
)

// checkerLine is one checker of the table.
type checkerLine struct {
	// name is what --checker names it by, and its results' Checker.
	name string
	// always: it runs whatever Options.Checker says (the direct checks:
	// sound, their violations proofs); it cannot be named.
	always bool
	// make returns a fresh checker for one analysis.
	make func(Options) Checker
}

// checkerTable is every checker, in the order they run: adding one is its
// package and one line here (a checker defined elsewhere: RegisterChecker).
// Everything else reads it: the names --checker takes, its help and its
// errors, the spelling results.json records; the verdict is combined by the
// marks each result carries (Complete, Proofs), never by checker name.
var checkerTable = []checkerLine{
	{name: checkers.CheckerDirect, always: true, make: func(Options) Checker { return direct.New() }},
	{name: checkers.CheckerPorcupine, make: func(o Options) Checker { return porcupine.New(o.Timeout) }},
	{name: checkers.CheckerFast, make: func(Options) Checker { return fast.New() }},
}

// checkerAliases name lists of the table's checkers.
var checkerAliases = map[string][]string{CheckerBoth: {checkers.CheckerPorcupine, checkers.CheckerFast}}

var checkerTableMu sync.RWMutex

// RegisterChecker adds a checker to the table, as a line of it would: for a
// checker defined outside the project's packages (a test's, a project's own
// model). --checker then takes name; make gets the analysis's options (its
// Timeout bounds a search). Call it before any analysis, e.g. from an init
// function; a name already taken panics.
func RegisterChecker(name string, make func(Options) Checker) {
	checkerTableMu.Lock()
	defer checkerTableMu.Unlock()
	if _, ok := checkerAliases[name]; ok || lineOf(name) != nil {
		panic(fmt.Sprintf("checker %q is registered twice", name))
	}
	checkerTable = append(checkerTable, checkerLine{name: name, make: make})
}

// lineOf is the table's line of name, or nil (the caller holds the lock).
func lineOf(name string) *checkerLine {
	for i := range checkerTable {
		if checkerTable[i].name == name {
			return &checkerTable[i]
		}
	}
	return nil
}

// CheckerNames lists the checkers Options.Checker can name, sorted.
func CheckerNames() []string {
	checkerTableMu.RLock()
	defer checkerTableMu.RUnlock()
	var out []string
	for _, l := range checkerTable {
		if !l.always {
			out = append(out, l.name)
		}
	}
	slices.Sort(out)
	return out
}

// CheckerLines lists every checker of the table, those that always run
// included, in the order they run (cmd/perfdoc measures each).
func CheckerLines() []string {
	checkerTableMu.RLock()
	defer checkerTableMu.RUnlock()
	out := make([]string, len(checkerTable))
	for i, l := range checkerTable {
		out[i] = l.name
	}
	return out
}

// NewChecker makes the table's checker of the name for an analysis with
// opts (a measurement of one checker alone).
func NewChecker(name string, opts Options) (Checker, error) {
	checkerTableMu.RLock()
	defer checkerTableMu.RUnlock()
	if l := lineOf(name); l != nil {
		return l.make(opts), nil
	}
	return nil, fmt.Errorf("no checker %q in the table", name)
}

// CheckerChoices says in words what Options.Checker takes, for help texts and
// errors: "fast, porcupine or both".
func CheckerChoices() string {
	return strings.Join(CheckerNames(), ", ") + " or " + strings.Join(aliasNames(), ", ")
}

func aliasNames() []string {
	out := make([]string, 0, len(checkerAliases))
	for a := range checkerAliases {
		out = append(out, a)
	}
	slices.Sort(out)
	return out
}

// NormalizeChecker reads a checker selection (a comma-separated list of
// names and aliases; "" is DefaultChecker) and spells it the one way
// results.json records: an alias when the selection is one, else the names
// in the table's order.
func NormalizeChecker(spec string) (string, error) {
	names, err := parseCheckers(spec)
	if err != nil {
		return "", err
	}
	for _, a := range aliasNames() {
		if want, _ := parseCheckers(a); slices.Equal(want, names) {
			return a, nil
		}
	}
	return strings.Join(names, ","), nil
}

// parseCheckers is the selection spec names, each once, in the table's order.
func parseCheckers(spec string) ([]string, error) {
	if strings.TrimSpace(spec) == "" {
		spec = DefaultChecker
	}
	want := map[string]bool{}
	for _, n := range strings.Split(spec, ",") {
		n = strings.TrimSpace(n)
		if names, ok := checkerAliases[n]; ok {
			for _, a := range names {
				want[a] = true
			}
			continue
		}
		if !slices.Contains(CheckerNames(), n) {
			return nil, fmt.Errorf("must be %s, or a comma-separated list of them, got %q", CheckerChoices(), spec)
		}
		want[n] = true
	}
	checkerTableMu.RLock()
	defer checkerTableMu.RUnlock()
	var out []string
	for _, l := range checkerTable {
		if want[l.name] {
			out = append(out, l.name)
		}
	}
	return out, nil
}

// selectCheckers makes the checkers opts.Checker selects, and those that
// always run, in the table's order.
func selectCheckers(opts Options) ([]Checker, error) {
	names, err := parseCheckers(opts.Checker)
	if err != nil {
		return nil, fmt.Errorf("checker %w", err)
	}
	checkerTableMu.RLock()
	defer checkerTableMu.RUnlock()
	var out []Checker
	for _, l := range checkerTable {
		if l.always || slices.Contains(names, l.name) {
			out = append(out, l.make(opts))
		}
	}
	return out, nil
}

// Replay is a checker that answers with stored results (a stored run's
// results.json) instead of checking again: `fencecheck report --stored`
// re-renders a run without its checkers' cost. The stored anomalies' causes
// are dropped (and their words taken off the text): the analysis names
// causes again by its current rule. Results of schema version 1, which
// predate the Complete and Proofs marks, are marked by checker name.
func Replay(results []checkers.Result) Checker {
	return replay{results: results}
}

type replay struct{ results []checkers.Result }

func (r replay) Name() string { return "stored" }

func (r replay) Check(context.Context, *history.Ops, checkers.Semantics) []checkers.Result {
	out := make([]checkers.Result, 0, len(r.results))
	for _, res := range r.results {
		if !res.Complete && !res.Proofs {
			switch res.Checker {
			case checkers.CheckerPorcupine, checkers.CheckerFast:
				res.Complete = true
			case checkers.CheckerDirect:
				res.Proofs, res.Complete = true, res.Model == checkers.ModelIssuer
			}
		}
		res.Anomalies = append([]checkers.Anomaly(nil), res.Anomalies...)
		for i := range res.Anomalies {
			a := &res.Anomalies[i]
			if a.Cause != nil {
				a.Text = strings.TrimSuffix(a.Text, causeSeparator+a.Cause.Text)
				a.Cause = nil
			}
		}
		out = append(out, res)
	}
	return out
}
