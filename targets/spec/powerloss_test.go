package spec

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/nemesis/lazyfs/lazyfstest"

	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/harness"
)

// A spec command node's {data} on the lazyfs layer: the Python example
// writing its state without fsync passes restart (a kill keeps the page
// cache) and fails power-loss, which drops what it never synced; the correct
// example passes power-loss. The layer needs /dev/fuse: without it the
// nemesis is not applicable and these runs would be unknown, so they fail.
func TestPowerLossOnCommandNode(t *testing.T) {
	if testing.Short() {
		t.Skip("three fault-injected runs of 5 s; make check runs them")
	}
	lazyfstest.Require(t)
	run := func(nem string, bugs ...string) *harness.Verdict {
		s := pythonSpec(t, false, bugArgs(bugs)...)
		target := New(s, Options{})
		cfg := harness.Config{Target: "spec:examples/python-fence/spec.json", Time: 5 * time.Second,
			Concurrency: 4, Keys: 2, Readers: 1, Nemesis: nem, Seed: 4, Store: t.TempDir(),
			CheckTimeout: 20 * time.Second}
		r, err := harness.Execute(context.Background(), cfg, target)
		require.NoError(t, err)
		v, err := harness.Finish(context.Background(), r, target.Semantics())
		require.NoError(t, err)
		return v
	}
	v := run("power-loss")
	require.Equal(t, checkers.Valid, v.Verdict, "the correct example under power-loss: %v %v", v.Anomalies(), v.GateReasons)
	assert.Positive(t, v.Run.Nemeses["power-loss"].Started)

	v = run("restart", "no-fsync")
	assert.Equal(t, checkers.Valid, v.Verdict, "no-fsync under restart: %v %v", v.Anomalies(), v.GateReasons)

	v = run("power-loss", "no-fsync")
	require.Equal(t, checkers.Invalid, v.Verdict, "no-fsync under power-loss: %v", v.GateReasons)
	assert.Positive(t, v.Run.Nemeses["power-loss"].Started)
}

func bugArgs(bugs []string) []string {
	var out []string
	for _, b := range bugs {
		out = append(out, "--bug", b)
	}
	return out
}
