package porcupine

import (
	"testing"

	porc "github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// issue 27: a big key's visualization draws the window around its first
// violation, whole segments renumbered from 0, not the whole key.
func TestVisualWindowAroundTheViolation(t *testing.T) {
	var ops []porc.Operation
	for s := range 100 {
		for i := range 10 {
			call := int64(s*1000 + i*10)
			ops = append(ops, porc.Operation{Input: porcRegInput{Seg: s}, Call: call, Return: call + 5})
		}
	}
	got, why := visualWindow(ops, 50_005, 40)
	require.Len(t, got, 40, "four segments of ten")
	assert.Equal(t, 0, segOf(got[0]), "renumbered from 0")
	assert.Equal(t, 3, segOf(got[len(got)-1]))
	assert.LessOrEqual(t, got[0].Call, int64(50_005))
	assert.GreaterOrEqual(t, got[len(got)-1].Return, int64(50_005), "the violation is inside the window")
	assert.Contains(t, why, "around the first violation, at 0.00 s")

	same, why := visualWindow(ops[:30], 5, 40)
	assert.Len(t, same, 30, "a small key is drawn whole")
	assert.Empty(t, why)
}
