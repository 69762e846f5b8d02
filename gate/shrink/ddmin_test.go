package shrink

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
)

// fails holds when every item of need is in the set.
func needs(need ...int) func([]int) bool {
	return func(set []int) bool {
		for _, n := range need {
			if !slices.Contains(set, n) {
				return false
			}
		}
		return true
	}
}

func count(fails func([]int) bool, calls *int) func([]int) bool {
	return func(s []int) bool { *calls++; return fails(s) }
}

func upTo(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// A failure that needs a few items out of many shrinks to exactly them,
// in far fewer tests than subsets.
func TestDDMinFindsTheItemsAFailureNeeds(t *testing.T) {
	for _, need := range [][]int{{7}, {3, 29}, {0, 1}, {5, 17, 33}, {39}} {
		calls := 0
		got := ddmin(upTo(40), count(needs(need...), &calls))
		assert.Equal(t, need, got)
		t.Logf("%v: %d tests", need, calls)
		assert.LessOrEqual(t, calls, 25*len(need), "tests for %v", need)
	}
}

// Items come back in their order, and no set is tested twice or empty.
func TestDDMinTestsEachSetOnceAndNeverTheEmptyOne(t *testing.T) {
	seen := map[string]bool{}
	fails := func(s []int) bool {
		assert.NotEmpty(t, s)
		assert.True(t, slices.IsSorted(s))
		k := keyOf(s)
		assert.False(t, seen[k], "tested twice: %v", s)
		seen[k] = true
		return needs(2, 11)(s)
	}
	assert.Equal(t, []int{2, 11}, ddmin(upTo(12), fails))
}

// The result is 1-minimal for any monotone predicate: removing any one item
// loses the failure.
func TestDDMinResultIsOneMinimal(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 50 {
		n := 1 + rng.IntN(30)
		var need []int
		for i := range n {
			if rng.IntN(6) == 0 {
				need = append(need, i)
			}
		}
		if len(need) == 0 {
			need = []int{rng.IntN(n)}
		}
		got := ddmin(upTo(n), needs(need...))
		assert.Equal(t, need, got)
		for i := range got {
			assert.False(t, needs(need...)(slices.Delete(slices.Clone(got), i, i+1)))
		}
	}
}

// A failure that needs nothing of the set still keeps one item: ddmin never
// tests the empty set (the shrinker tries "no fault at all" itself).
func TestDDMinKeepsOneItemWhenAnyOneFails(t *testing.T) {
	assert.Len(t, ddmin(upTo(9), func([]int) bool { return true }), 1)
	assert.Equal(t, []int{4}, ddmin([]int{4}, func([]int) bool { t.Fatal("one item: nothing to test"); return false }))
}
