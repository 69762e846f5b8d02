package gate_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/nemesis/lazyfs/lazyfstest"
)

// The disk bugs are found by their own fault (TestDetectionFast) and by no
// other: ignore-write-errors keeps everything it acknowledged across a
// power loss and a damaged file, trust-truncated-state across a power loss
// and a full disk (its writes are atomic, and it answers nothing it could
// not save). The correct reference is valid under both disk faults. make
// matrix measures them over 10 seeds (docs/power-loss.md).
func TestDiskBugsOnlyByTheirFault(t *testing.T) {
	if testing.Short() {
		t.Skip("four fault-injected runs of 6 s; make check runs them")
	}
	lazyfstest.Require(t) // without it the nemeses are not applicable: unknown
	const d = 6 * time.Second
	cases := []struct{ bug, nemesis string }{
		{"ignore-write-errors", "power-loss,disk-corrupt"},
		{"trust-truncated-state", "power-loss,disk-full"},
		{"", "disk-full"},
		{"", "disk-corrupt"},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s/%s", c.bug, c.nemesis), func(t *testing.T) {
			t.Parallel()
			v := runReference(t, c.bug, c.nemesis, 1, false, false, d)
			require.Equal(t, checkers.Valid, v.Verdict, "run %s: %v %v", v.Dir, v.Reasons, v.Checked.Anomalies())
			for n, st := range v.Run.Nemeses {
				assert.Positive(t, st.Started, "nemesis %s acted", n)
			}
		})
	}
}
