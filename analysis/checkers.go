package analysis

import (
	"context"
	"fmt"
	"io"
	"strings"

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

// Checker selections (Options.Checker): the complete checkers that run
// beside the direct checks, which always run.
const (
	CheckerFast      = checkers.CheckerFast
	CheckerPorcupine = checkers.CheckerPorcupine
	CheckerBoth      = "both"
)

// selectCheckers is the checker table: what Options.Checker selects.
func selectCheckers(opts Options) ([]Checker, error) {
	out := []Checker{direct.New()}
	switch opts.Checker {
	case CheckerBoth, "":
		return append(out, porcupine.New(opts.Timeout), fast.New()), nil
	case CheckerPorcupine:
		return append(out, porcupine.New(opts.Timeout)), nil
	case CheckerFast:
		return append(out, fast.New()), nil
	}
	return nil, fmt.Errorf("checker must be fast, porcupine or both, not %q", opts.Checker)
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
