package spec

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/harness"
)

// The user's path, end to end: a Go server that knows nothing of fencecheck
// and makes its tokens from the wall clock (examples/wallclock-go), run as a
// spec command node. Without faults it is valid; with clock faults, which
// move its own clock from outside, its tokens go back and the run is
// invalid with token regressions. (`fencecheck test --nemesis all` used to
// pass it: no clock could reach it.)
func TestWallclockTokensAreCaughtByClockFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("two fault-injected runs of 5 s; make check runs them")
	}
	run := func(nem string, seed uint64) *harness.Verdict {
		target, err := Open("../../examples/wallclock-go/spec.json", Options{})
		require.NoError(t, err)
		cfg := harness.Config{Target: "spec:examples/wallclock-go/spec.json", Time: 5 * time.Second,
			Concurrency: 4, Keys: 2, Readers: 1, Nemesis: nem, Seed: seed, Store: t.TempDir(),
			CheckTimeout: 20 * time.Second}
		r, err := harness.Execute(context.Background(), cfg, target)
		require.NoError(t, err)
		v, err := harness.Finish(context.Background(), r, target.Semantics())
		require.NoError(t, err)
		return v
	}
	v := run("none", 3)
	assert.Equal(t, checkers.Valid, v.Verdict, "without faults: %v %v", v.Anomalies(), v.GateReasons)

	v = run("clock", 3)
	require.Equal(t, checkers.Invalid, v.Verdict, "under clock faults: %v", v.GateReasons)
	assert.Positive(t, v.Run.Nemeses["clock"].Started)
	kinds := map[string]bool{}
	for _, a := range v.Anomalies() {
		kinds[a.Kind] = true
	}
	assert.True(t, kinds[checkers.KindTokenRegression], "token regression found: %v", kinds)
}
