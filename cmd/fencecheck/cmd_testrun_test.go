package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/harness"
)

// The reproduce line a run prints (and config.json keeps) is read back by
// `fencecheck test`'s own flags into the same config: every setting, the
// target's options and the checkers' included.
func TestReproduceLineParsesBackToTheSameConfig(t *testing.T) {
	for _, cfg := range []harness.Config{
		harness.Default(),
		{Target: "memory", Bugs: []string{"wallclock-tokens"}, SealKey: "s3cret", Forge: true, Time: 12 * time.Second,
			Concurrency: 9, Keys: 4, Readers: -1, TTL: 300 * time.Millisecond, OpTimeout: 700 * time.Millisecond,
			Nemesis: "clock,partition", Seed: 77, Recovery: 5 * time.Second, Checker: "fast",
			CheckTimeout: 10 * time.Second, MinOps: -1, Store: "elsewhere"},
	} {
		cfg = cfg.WithDefaults()
		cmd, f := newTestCmd()
		args := cfg.Command()
		require.Equal(t, []string{"fencecheck", "test"}, args[:2])
		require.NoError(t, cmd.ParseFlags(args[2:]))
		assert.Equal(t, cfg, f.cfg, "%s", harness.ShellLine(args))
		assert.False(t, f.quiet)
	}
}

// The CLI's defaults are harness.Default: no second copy.
func TestTestFlagsDefaultToTheOneDefault(t *testing.T) {
	cmd, f := newTestCmd()
	require.NoError(t, cmd.ParseFlags(nil))
	assert.Equal(t, harness.Default(), f.cfg)
}

// --schedule names the nemeses: --nemesis beside it is a usage error, and
// without --time the main phase is the schedule's (Time left zero).
func TestScheduleFlagRules(t *testing.T) {
	cmd, f := newTestCmd()
	require.NoError(t, cmd.ParseFlags([]string{"--schedule=s.json", "--nemesis=pause"}))
	err := replayFlags(cmd, f)
	require.Error(t, err)
	var ee *exitError
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, 64, ee.code)

	cmd, f = newTestCmd()
	require.NoError(t, cmd.ParseFlags([]string{"--schedule=s.json"}))
	require.NoError(t, replayFlags(cmd, f))
	assert.Zero(t, f.cfg.Time, "the schedule's main phase")

	cmd, f = newTestCmd()
	require.NoError(t, cmd.ParseFlags([]string{"--schedule=s.json", "--time=3s"}))
	require.NoError(t, replayFlags(cmd, f))
	assert.Equal(t, 3*time.Second, f.cfg.Time)
}
