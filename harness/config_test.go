package harness

import (
	"io"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A setting added without a flag would be missed by Command: every field
// of Config but the writers and the abort channel (how the run is driven,
// not what it is) is a Setting, each bound to its own field. (That Command
// reads back through the flags to the same config: cmd/fencecheck's
// settings_test.go, where the flags are bound.)
func TestEverySettingHasAFlag(t *testing.T) {
	var c Config
	settings := 0
	writer := reflect.TypeFor[io.Writer]()
	abort := reflect.TypeFor[<-chan struct{}]()
	for _, f := range reflect.VisibleFields(reflect.TypeFor[Config]()) {
		if f.IsExported() && f.Type != writer && f.Type != abort {
			settings++
		}
	}
	flags := c.Settings()
	assert.Equal(t, settings, len(flags), "every setting of Config has a flag (Settings)")
	names := map[string]bool{}
	for _, s := range flags {
		assert.False(t, names[s.Name], "--%s twice", s.Name)
		names[s.Name] = true
		assert.NotPanics(t, func() { s.text() }, "--%s has a text", s.Name)
	}
}

// Where the results are copied is not a setting of the run: a repeat must
// not overwrite CI's file.
func TestCommandLeavesOutTheJUnitCopy(t *testing.T) {
	c := Config{JUnit: "ci/junit.xml"}.WithDefaults()
	assert.NotContains(t, strings.Join(c.Command(), " "), "junit")
}

// --readers=0 / --min-ops=0 mean none (a zero field means "the default").
func TestZeroMeansNone(t *testing.T) {
	c := Default()
	require.NoError(t, zeroIsNone{&c.Readers}.Set("0"))
	require.NoError(t, zeroIsNone{&c.MinOps}.Set("0"))
	assert.Equal(t, -1, c.Readers)
	assert.Equal(t, -1, c.MinOps)
	assert.Equal(t, 0, c.readers())
	assert.Equal(t, -1, c.WithDefaults().Readers, "none stays none")
	assert.Error(t, zeroIsNone{&c.Readers}.Set("-2"))
	assert.Equal(t, "0", zeroIsNone{&c.Readers}.String())
	assert.Equal(t, Default(), Default().WithDefaults().withSeed(0), "a flagless config needs no defaults but the seed")
}

func (c Config) withSeed(s uint64) Config { c.Seed = s; return c }

func TestWithDefaultsFillsZeroFieldsAndASeed(t *testing.T) {
	c := Config{Time: time.Second, Readers: 1}.WithDefaults()
	assert.Equal(t, time.Second, c.Time)
	assert.Equal(t, 1, c.Readers)
	assert.Equal(t, Default().Concurrency, c.Concurrency)
	assert.Equal(t, Default().CheckTimeout, c.CheckTimeout)
	assert.NotZero(t, c.Seed, "a seed is drawn")
	assert.Equal(t, uint64(5), Config{Seed: 5}.WithDefaults().Seed)
	require.NoError(t, c.Validate())
}

// Validate reports every bad setting at once, each by its flag.
func TestValidateNamesEveryBadSetting(t *testing.T) {
	c := Config{Time: -time.Second, Concurrency: 2000, Keys: -1, TTL: time.Millisecond, Nemesis: "gremlins",
		Checker: "slow", Namespace: "a.b"}.WithDefaults()
	err := c.Validate()
	require.Error(t, err)
	for _, want := range []string{"--time must be positive", "--concurrency must be 1..1000", "--keys must be 1..10000",
		"--ttl must be at least 10ms", `--nemesis: unknown nemesis "gremlins"`, "--checker must be fast, porcupine or both",
		`--namespace must be 1-64 characters of A-Z a-z 0-9 _ -, got "a.b"`} {
		assert.Contains(t, err.Error(), want)
	}
}

func TestShellLineQuotesWhatNeedsIt(t *testing.T) {
	assert.Equal(t, `fencecheck test '--target=spec:/a b/s.json' '--seal-key=it'\''s'`,
		ShellLine([]string{"fencecheck", "test", "--target=spec:/a b/s.json", "--seal-key=it's"}))
}

// A replay's reproduce line names its schedule file and the workload seed,
// not --nemesis (the schedule names its nemeses), and reads back to the
// same config once the schedule is applied.
func TestReplayCommandNamesTheScheduleNotTheNemeses(t *testing.T) {
	dir := t.TempDir()
	file := dir + "/s.json"
	require.NoError(t, os.WriteFile(file, []byte(`{"schedule_version": 1, "main_phase_ns": 4000000000, "faults": [
		{"nemesis": "restart", "nodes": ["reference"], "takes_over": true, "start_ns": 1000000000, "duration_ns": 300000000},
		{"nemesis": "strip", "nodes": ["reference"], "params": {"share": 0.5, "links": ["clients->reference"]}, "start_ns": 0, "duration_ns": 300000000}]}`), 0o644))
	c, s, err := Config{Schedule: file, Seed: 5}.WithSchedule()
	require.NoError(t, err)
	require.Len(t, s.Faults, 2)
	assert.Equal(t, "restart,strip", c.Nemesis, "the schedule's nemeses")
	assert.Equal(t, 4*time.Second, c.Time, "no --time: the schedule's main phase")
	c = c.WithDefaults()
	line := strings.Join(c.Command(), " ")
	assert.Contains(t, line, "--schedule="+file)
	assert.Contains(t, line, "--seed=5")
	assert.NotContains(t, line, "--nemesis")

	c, _, err = Config{Schedule: file, Time: 9 * time.Second}.WithSchedule()
	require.NoError(t, err)
	assert.Equal(t, 9*time.Second, c.Time, "--time wins over the schedule's")

	require.NoError(t, os.WriteFile(file, []byte(`{"schedule_version": 1, "faults": []}`), 0o644))
	c, _, err = Config{Schedule: file}.WithSchedule()
	require.NoError(t, err)
	assert.Equal(t, "none", c.Nemesis, "an empty schedule: no nemesis")

	_, _, err = Config{Schedule: dir + "/missing.json"}.WithSchedule()
	assert.ErrorContains(t, err, "--schedule")
}

// --version and --members are in the reproduce line when set, left out when
// they are the target's default, and a size that is no quorum's is refused.
func TestVersionAndMembersSettings(t *testing.T) {
	c := Config{Target: "etcd", Version: "3.5", Members: 1}.WithDefaults()
	line := strings.Join(c.Command(), " ")
	assert.Contains(t, line, "--version=3.5")
	assert.Contains(t, line, "--members=1")
	d := Config{Target: "etcd"}.WithDefaults()
	assert.NotContains(t, strings.Join(d.Command(), " "), "--members")
	assert.NotContains(t, strings.Join(d.Command(), " "), "--version")
	for _, n := range []int{1, 3, 5} {
		c.Members = n
		assert.NoError(t, c.Validate(), "%d members", n)
	}
	for _, n := range []int{-1, 2, 4, 7} {
		c.Members = n
		assert.ErrorContains(t, c.Validate(), "--members", "%d members", n)
	}
	c.Members, c.Version = 0, "3.5 rc"
	assert.ErrorContains(t, c.Validate(), "--version")
}
