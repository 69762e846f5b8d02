package nemesis

import (
	"maps"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The table is the registry: one line per nemesis, each name once.
func TestTableNamesEachNemesisOnce(t *testing.T) {
	assert.Len(t, registry, len(table), "two lines of the table give the same name")
	assert.Equal(t, []string{"clock", "crash-on-ack", "delay", "disk-corrupt", "disk-full", "disk-slow", "link-delay", "link-duplicate", "link-loss", "member-replace", "partition", "pause", "power-loss", "restart", "restart-wipe", "strip"}, Names())
	all, err := Parse("all")
	require.NoError(t, err)
	assert.NotContains(t, expand(all), "restart-wipe", "opt-in nemeses are left out of all")
	assert.Contains(t, expand(all), "power-loss", "power-loss is in all (where it applies)")
	assert.Contains(t, expand(all), "crash-on-ack", "crash-on-ack is in all (where it applies)")
	assert.NotContains(t, expand(all), "disk-corrupt", "a corrupted disk breaks a correct system too")
	assert.NotContains(t, expand(all), "disk-full", "etcd's NOSPACE alarm outlives the fault")
	assert.Contains(t, expand(all), "disk-slow")
	assert.Contains(t, expand(all), "member-replace", "a correct cluster survives a member replaced through it")
	assert.Contains(t, expand(all), "link-loss", "link loss is in all (where it applies)")
	assert.Contains(t, expand(all), "link-delay", "link delay is in all (where it applies)")
	assert.Contains(t, expand(all), "link-duplicate", "link duplication is in all (where it applies)")
	assert.Len(t, expand(all), len(table)-3)
}

// The lazyfs layer is mounted exactly when a nemesis that needs it is named.
func TestNeedDiskLayerFollowsWhatNemesesDeclare(t *testing.T) {
	for spec, want := range map[string]bool{
		"none": false, "all": true, "restart,pause": false, "power-loss": true, "restart,power-loss": true, "crash-on-ack": true,
	} {
		names, err := Parse(spec)
		require.NoError(t, err)
		assert.Equal(t, want, NeedDiskLayer(names), spec)
	}
}

// Proxies are needed exactly when a nemesis that says it acts on links may
// run; the harness asks NeedLinks, not a list of its own.
func TestNeedLinksFollowsWhatNemesesDeclare(t *testing.T) {
	for spec, want := range map[string]bool{
		"none": false, "pause,restart,clock": false, "restart-wipe": false,
		"strip": true, "delay": true, "partition": true, "pause,strip": true, "all": true,
	} {
		names, err := Parse(spec)
		require.NoError(t, err)
		assert.Equal(t, want, NeedLinks(names), spec)
	}
}

// Every nemesis of the table says what its faults do, so the analysis's
// cause rule finds it by effect; the names it is found by are the
// constants analysis and reports read.
func TestEveryNemesisDeclaresItsEffects(t *testing.T) {
	for _, n := range Names() {
		nem, ok := lookup(n)
		require.True(t, ok, n)
		ef, ok := nem.(Effector)
		if assert.True(t, ok, "%s declares no effect", n) {
			assert.NotEmpty(t, ef.Effects(), n)
		}
	}
	for name, e := range map[string]Effect{Restart: LosesState, RestartWipe: LosesState, PowerLoss: LosesState,
		MemberReplace: LosesDurable, Partition: Separates, LinkLoss: Delays, LinkDelay: Delays, LinkDuplicate: Delays, Clock: SkewsClocks, Pause: Delays, Delay: Delays, Strip: Tampers} {
		assert.True(t, HasEffect(name, e), "%s %s", name, e)
	}
	assert.False(t, HasEffect(Partition, LosesState))
	assert.False(t, HasEffect("kill", LosesState), "another tool's nemesis has no declared effect")
}

// Register is a line of the table: the nemesis is then parsed, listed and
// selected like the others; a name taken twice is refused.
func TestRegisterAddsALineOfTheTable(t *testing.T) {
	registryMu.Lock()
	saved, savedReg := table, registry
	table, registry = append([]func() Nemesis(nil), table...), maps.Clone(registry)
	registryMu.Unlock()
	t.Cleanup(func() {
		registryMu.Lock()
		table, registry = saved, savedReg
		registryMu.Unlock()
	})
	Register(func() Nemesis { return testNemesis{} })
	assert.Contains(t, Names(), "test-nemesis")
	names, err := Parse("pause,test-nemesis")
	require.NoError(t, err)
	assert.Equal(t, []string{"pause", "test-nemesis"}, names)
	all, err := Parse("all")
	require.NoError(t, err)
	assert.Contains(t, expand(all), "test-nemesis")
	assert.True(t, HasEffect("test-nemesis", Delays))
	assert.Panics(t, func() { Register(func() Nemesis { return testNemesis{} }) })
	assert.Panics(t, func() { Register(func() Nemesis { return strip{} }) })
}

type testNemesis struct{ strip }

func (testNemesis) Name() string                   { return "test-nemesis" }
func (testNemesis) Effects() []Effect              { return []Effect{Delays} }
func (testNemesis) Applicable(*Env) (bool, string) { return true, "" }
