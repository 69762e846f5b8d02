package gate

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/analysis"
	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/history"
	"github.com/fencecheck/fencecheck/nemesis"
)

// The smallest real examples of docs/extending.md: a nemesis that is its
// file and one line, and a checker that is its package and one line. Here
// the file and the package are this test file, and the lines are the two
// Register calls; nothing else of the project names them, and the runs
// below show every stage reading them from the tables.
func init() {
	nemesis.Register(func() nemesis.Nemesis { return crash{} })
	analysis.RegisterChecker(pairsChecker, func(analysis.Options) analysis.Checker { return pairs{} })
}

// crash kills a node and starts it again with its data, as restart does: a
// new nemesis needs no more than this.
type crash struct{}

func (crash) Name() string { return "crash" }

// Effects: the cause rule names a crash for what a lost counter does.
func (crash) Effects() []nemesis.Effect { return []nemesis.Effect{nemesis.LosesState} }

func (crash) Applicable(env *nemesis.Env) (bool, string) {
	if _, ok := env.Target.(nemesis.Restarter); !ok {
		return false, "the target's nodes cannot be killed"
	}
	return true, ""
}

func (crash) Params() any { return nil }

func (crash) Draw(_ context.Context, env *nemesis.Env, rng *rand.Rand) (nemesis.Plan, error) {
	nodes := env.Target.Nodes()
	return nemesis.Plan{Nodes: []string{nodes[rng.IntN(len(nodes))].Name}, TakesOver: true, Outage: true}, nil
}

func (crash) Start(ctx context.Context, env *nemesis.Env, p nemesis.Plan) (*nemesis.Fault, error) {
	rs := env.Target.(nemesis.Restarter)
	if err := rs.KillNode(ctx, p.Nodes[0]); err != nil {
		return nil, err
	}
	return &nemesis.Fault{Nodes: p.Nodes, Stop: func(ctx context.Context) error { return rs.StartNode(ctx, p.Nodes[0], false) }}, nil
}

// pairs decides the issuer model by brute force over every pair of a
// lock's successful acquires: no two return one token, and none returns a
// token older than one returned before it began. Quadratic, so only for
// short runs; complete for the issuer model, silent on the register.
type pairs struct{}

const pairsChecker = "issuer-pairs"

func (pairs) Name() string { return pairsChecker }

func (pairs) Check(_ context.Context, ops *history.Ops, sem checkers.Semantics) []checkers.Result {
	h := checkers.Group(ops, sem)
	res := checkers.Result{Checker: pairsChecker, Model: checkers.ModelIssuer, Verdict: checkers.Valid, Complete: true, Keys: len(h.IssuerKeys)}
	for _, k := range h.IssuerKeys {
		var ok []*history.Op
		for _, op := range h.Issuer(k) {
			if op.F == history.Acquire && op.Outcome == history.OutcomeOk && op.Token.State == history.TokenValid {
				ok = append(ok, op)
			}
		}
		res.Ops += len(ok)
		for _, a := range ok {
			for _, b := range ok {
				if a != b && (a.Token.N == b.Token.N && a.ID < b.ID || a.Completed < b.Call && b.Token.N < a.Token.N) {
					res.Verdict = checkers.Invalid
					res.Anomalies = append(res.Anomalies, checkers.Anomaly{Model: checkers.ModelIssuer, Kind: checkers.KindTokenRegression,
						Key: k, At: max(a.Completed, b.Completed), Ops: []int64{a.ID, b.ID},
						Text: fmt.Sprintf("acquire op %d returned token %s after acquire op %d had returned %s", b.ID, b.Token, a.ID, a.Token)})
				}
			}
		}
	}
	checkers.CapAnomalies(&res, checkers.MaxAnomaliesPerKind)
	return []checkers.Result{res}
}

// A new nemesis, registered by one line, runs end to end: --nemesis takes it
// and its help lists it, it acts on the reference, the history and
// schedule.json record it, the analysis counts its faults, the cause rule
// names it (by the effect it declares) for the counter it made the reference
// lose, and the report draws it.
func TestANewNemesisIsItsFileAndOneLine(t *testing.T) {
	assert.Contains(t, nemesis.Names(), "crash")
	res := run(t, Config{Target: "memory", Bugs: []string{"counter-in-memory"}, Nemesis: "crash", Checker: analysis.CheckerFast,
		Time: 6 * time.Second, Seed: 4})
	require.Equal(t, analysis.ExitInvalid, res.ExitCode, res.Summary())
	assert.Positive(t, res.Faults["crash"], "the crash acted")
	assert.Equal(t, res.Faults["crash"], res.Checked.Nemeses["crash"].Started, "the analysis counts it from the history, as the run did")
	first := res.Checked.FirstViolation
	require.NotNil(t, first)
	require.NotNil(t, first.Cause, first.Text)
	assert.Equal(t, "crash", first.Cause.Nemesis)
	assert.True(t, first.Cause.Explains, "a crash can explain a lost counter: %s", first.Text)
	assert.Contains(t, first.Text, "can be explained by the crash of reference")

	sched, err := nemesis.ReadSchedule(filepath.Join(res.Dir, nemesis.ScheduleFile))
	require.NoError(t, err)
	assert.Equal(t, []string{"crash"}, sched.Nemeses())
	page, err := os.ReadFile(filepath.Join(res.Dir, "report.html"))
	require.NoError(t, err)
	assert.Contains(t, string(page), "crash reference", "the report's fault list names it")

	// Its schedule replays as any other's.
	again := run(t, Config{Target: "memory", Bugs: []string{"counter-in-memory"}, Checker: analysis.CheckerFast,
		Schedule: filepath.Join(res.Dir, nemesis.ScheduleFile), Seed: 4})
	assert.Positive(t, again.Faults["crash"], "the replay carried out its crashes")
}

// A new checker, registered by one line, runs end to end: --checker takes
// it beside the others (and rejects a name no line has, listing it), the
// verdict is combined from its results by their marks, and results.json and
// the report show them. On a correct run it agrees; on the reference whose
// counter is in memory it finds what the others find.
func TestANewCheckerIsItsPackageAndOneLine(t *testing.T) {
	assert.Contains(t, analysis.CheckerNames(), pairsChecker)
	assert.Contains(t, analysis.CheckerChoices(), pairsChecker)
	_, err := Run(context.Background(), Config{Checker: "fast,slow", Store: t.TempDir()})
	require.True(t, IsUsage(err))
	assert.ErrorContains(t, err, "--checker must be fast, "+pairsChecker+", porcupine or both")

	ok := run(t, Config{Target: "memory", Nemesis: "restart", Checker: "fast, " + pairsChecker, Time: 4 * time.Second, Seed: 2})
	require.Equal(t, analysis.ExitValid, ok.ExitCode, ok.Summary())
	assert.Equal(t, "fast,"+pairsChecker, ok.Checked.Settings.Checker, "the selection in the table's order")
	assert.Contains(t, checkersOf(ok.Checked.Checks), pairsChecker)
	assert.NotContains(t, checkersOf(ok.Checked.Checks), checkers.CheckerPorcupine, "only what --checker named, beside the direct checks")

	bad := run(t, Config{Target: "memory", Bugs: []string{"counter-in-memory"}, Nemesis: "restart", Checker: pairsChecker, Time: 6 * time.Second, Seed: 4})
	require.Equal(t, analysis.ExitInvalid, bad.ExitCode, bad.Summary())
	assert.Contains(t, bad.Checked.Reason, "issuer: "+pairsChecker+" says invalid", "the combination read its complete result")
	b, err := os.ReadFile(filepath.Join(bad.Dir, "results.json"))
	require.NoError(t, err)
	var stored struct {
		Options analysis.Settings `json:"options"`
		Checks  []checkers.Result `json:"checks"`
	}
	require.NoError(t, json.Unmarshal(b, &stored))
	assert.Equal(t, pairsChecker, stored.Options.Checker)
	assert.Contains(t, checkersOf(stored.Checks), pairsChecker)
	page, err := os.ReadFile(filepath.Join(bad.Dir, "report.html"))
	require.NoError(t, err)
	assert.Contains(t, string(page), pairsChecker)
}

func checkersOf(rs []checkers.Result) string {
	var names []string
	for _, r := range rs {
		names = append(names, r.Checker)
	}
	return strings.Join(names, ",")
}
