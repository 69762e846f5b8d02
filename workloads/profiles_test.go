package workloads

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// One seed is one mix: "all" gives writer 0 steady and the others a
// seeded shuffle of the rest; a list is taken in turn; a wrong name is an
// error naming the profiles.
func TestProfileMixIsDrawnFromTheSeed(t *testing.T) {
	names := func(ps []Profile) []string {
		var out []string
		for _, p := range ps {
			out = append(out, p.Name)
		}
		return out
	}
	a, b := names(Mix(nil, 6, 7)), names(Mix(nil, 6, 7))
	assert.Equal(t, a, b)
	assert.Equal(t, "steady", a[0])
	assert.ElementsMatch(t, ProfileNames()[:len(Profiles)], a)
	differs := false
	for seed := uint64(1); seed < 10 && !differs; seed++ {
		differs = names(Mix(nil, 6, seed))[1] != a[1]
	}
	assert.True(t, differs, "other seeds draw other mixes")

	list, err := ParseProfile("storm,skewed")
	require.NoError(t, err)
	assert.Equal(t, []string{"storm", "skewed", "storm"}, names(Mix(list, 3, 1)))
	_, err = ParseProfile("steady,bursty")
	assert.ErrorContains(t, err, `unknown profile "bursty"`)
	assert.ErrorContains(t, err, "crashing-holders")
}
