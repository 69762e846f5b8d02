package gate_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/nemesis/lazyfs/lazyfstest"

	"github.com/fencecheck/fencecheck/checkers"
)

// The two bugs only a power loss finds (the reference writes its counter,
// or its high-water marks, without fsync): valid under restart, since a kill
// keeps what was written, and invalid under power-loss, which drops it; the
// correct reference is valid under power-loss. make matrix runs them over
// 20 seeds (docs/detection.md).
func TestPowerLossBugs(t *testing.T) {
	if testing.Short() {
		t.Skip("five fault-injected runs of 6 s; make check runs them")
	}
	lazyfstest.Require(t) // without it the nemesis is not applicable: unknown
	const d = 6 * time.Second
	cases := []struct {
		bug, nemesis string
		want         checkers.Verdict
		named        []string
	}{
		{"counter-no-fsync", "restart", checkers.Valid, nil},
		{"counter-no-fsync", "power-loss", checkers.Invalid, []string{checkers.KindTokenRegression, checkers.KindDuplicateToken}},
		{"highwater-no-fsync", "restart", checkers.Valid, nil},
		{"highwater-no-fsync", "power-loss", checkers.Invalid, nil},
		{"", "power-loss", checkers.Valid, nil},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s/%s", c.bug, c.nemesis), func(t *testing.T) {
			t.Parallel()
			v := runReference(t, c.bug, c.nemesis, 1, false, false, d)
			require.Equal(t, c.want, v.Verdict, "run %s: %v %v", v.Dir, v.Reasons, v.Checked.Anomalies())
			assert.Positive(t, v.Run.Nemeses[c.nemesis].Started, "the fault took effect")
			if c.named != nil {
				kinds := kindsOf(v.Checked.Result)
				found := false
				for _, k := range c.named {
					found = found || kinds[k]
				}
				assert.True(t, found, "expected one of %v among %v", c.named, kinds)
			}
		})
	}
}
