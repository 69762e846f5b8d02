package nemesis

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The table is the registry: one line per nemesis, each name once.
func TestTableNamesEachNemesisOnce(t *testing.T) {
	assert.Len(t, registry, len(table), "two lines of the table give the same name")
	assert.Equal(t, []string{"clock", "delay", "partition", "pause", "power-loss", "restart", "restart-wipe", "strip"}, Names())
	all, err := Parse("all")
	require.NoError(t, err)
	assert.NotContains(t, expand(all), "restart-wipe", "opt-in nemeses are left out of all")
	assert.Contains(t, expand(all), "power-loss", "power-loss is in all (where it applies)")
	assert.Len(t, expand(all), len(table)-1)
}

// The lazyfs layer is mounted exactly when a nemesis that needs it is named.
func TestNeedDiskLayerFollowsWhatNemesesDeclare(t *testing.T) {
	for spec, want := range map[string]bool{
		"none": false, "all": true, "restart,pause": false, "power-loss": true, "restart,power-loss": true,
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
