package analysis

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// The Wilson interval against values computed by hand (and by R's
// binom::binom.wilson): 7 of 10 is 39.7 %-89.2 %, 0 of 10 is 0-27.8 %, 20 of
// 20 is 83.9 %-100 %.
func TestDetectionRateWilson(t *testing.T) {
	for _, c := range []struct {
		k, n      int
		low, high float64
	}{
		{7, 10, 0.3968, 0.8922},
		{0, 10, 0, 0.2775},
		{20, 20, 0.8389, 1},
		{1, 2, 0.0945, 0.9055},
	} {
		r := DetectionRate(c.k, c.n)
		assert.InDelta(t, c.low, r.Low, 0.0005, "%d of %d", c.k, c.n)
		assert.InDelta(t, c.high, r.High, 0.0005, "%d of %d", c.k, c.n)
	}
	assert.Equal(t, Rate{K: 0, N: 0, Low: 0, High: 1}, DetectionRate(0, 0), "no run: nothing known")
}

// The worst of several runs' exit codes: invalid over could-not-run over
// unknown over valid.
func TestWorstExit(t *testing.T) {
	assert.Equal(t, ExitValid, WorstExit())
	assert.Equal(t, ExitValid, WorstExit(0, 0))
	assert.Equal(t, ExitUnknown, WorstExit(0, 2, 0))
	assert.Equal(t, ExitCannot, WorstExit(2, 3, 0))
	assert.Equal(t, ExitInvalid, WorstExit(3, 1, 2))
}
