package main

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/harness"
)

// parse reads a command line made by Command back through the flags.
func parse(t *testing.T, command []string) harness.Config {
	t.Helper()
	require.Equal(t, []string{"fencecheck", "test"}, command[:2])
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	var c harness.Config
	bindSettings(fs, &c)
	require.NoError(t, fs.Parse(command[2:]))
	return c
}

// The reproduce line repeats every setting: read back through the flags it
// gives the same config, whatever was set.
func TestCommandReproducesEverySetting(t *testing.T) {
	all := harness.Config{Target: "spec:/tmp/my system/spec.json", Time: 90 * time.Second, Concurrency: 7, Keys: 11, Namespace: "ci-run_7",
		Readers: 4, TTL: 750 * time.Millisecond, OpTimeout: 2 * time.Second, Forge: true,
		Nemesis: "pause,restart-wipe", Seed: 1 << 40, Recovery: 45 * time.Second,
		Checker: "porcupine", CheckTimeout: 3 * time.Minute, MinOps: 500, Store: "/var/tmp/store"}
	for name, c := range map[string]harness.Config{
		"defaults":   harness.Default().WithDefaults(),
		"every flag": all,
		"reference":  {Target: "memory", Bugs: []string{"accept-equal", "split-issuers"}, SealKey: "k 'x'", Seed: 3},
		"none":       {Readers: -1, MinOps: -1, Nemesis: "none", Seed: 9},
	} {
		t.Run(name, func(t *testing.T) {
			c = c.WithDefaults()
			back := parse(t, c.Command())
			assert.Equal(t, c, back, "command: %v", c.Command())
		})
	}
	// Every setting has a flag (harness's TestEverySettingHasAFlag counts
	// them against Config's fields); here, each is bound.
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	var c harness.Config
	bindSettings(fs, &c)
	flags := 0
	fs.VisitAll(func(*pflag.Flag) { flags++ })
	assert.Equal(t, len(c.Settings()), flags, "every setting of Config has a flag")
}

// The flags' defaults are Default's, and --readers=0 / --min-ops=0 mean
// none (a zero field means "the default").
func TestFlagsTakeTheirDefaultsFromDefault(t *testing.T) {
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	var c harness.Config
	bindSettings(fs, &c)
	require.NoError(t, fs.Parse(nil))
	assert.Equal(t, harness.Default(), c)
	require.NoError(t, fs.Parse([]string{"--readers=0", "--min-ops=0"}))
	assert.Equal(t, -1, c.Readers)
	assert.Equal(t, -1, c.MinOps)
	assert.Equal(t, -1, c.WithDefaults().Readers, "none stays none")
	assert.Error(t, fs.Parse([]string{"--readers=-2"}))
}

// A replay's reproduce line reads back to the same config once the
// schedule is applied.
func TestReplayCommandReadsBack(t *testing.T) {
	file := t.TempDir() + "/s.json"
	require.NoError(t, os.WriteFile(file, []byte(`{"schedule_version": 1, "main_phase_ns": 4000000000, "faults": [
		{"nemesis": "restart", "nodes": ["reference"], "takes_over": true, "start_ns": 1000000000, "duration_ns": 300000000}]}`), 0o644))
	c, _, err := harness.Config{Schedule: file, Seed: 5}.WithSchedule()
	require.NoError(t, err)
	c = c.WithDefaults()
	assert.NotContains(t, strings.Join(c.Command(), " "), "--nemesis")
	back, _, err := parse(t, c.Command()).WithSchedule()
	require.NoError(t, err)
	assert.Equal(t, c, back)
}
