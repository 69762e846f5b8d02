package gate_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/checkers"
)

// rejoin-empty is found by member-replace (TestDetectionFast) and by no
// other fault alone: a restart keeps the replica's folder, and a cut or a
// pause only makes a replica refuse. make matrix measures it over 10 seeds
// (docs/detection.md).
func TestRejoinEmptyOnlyByMemberReplace(t *testing.T) {
	if testing.Short() {
		t.Skip("three fault-injected runs of 6 s; make check runs them")
	}
	const d = 6 * time.Second
	for _, nem := range []string{"restart", "partition", "pause"} {
		t.Run(nem, func(t *testing.T) {
			t.Parallel()
			v := runReference(t, "rejoin-empty", nem, 1, false, false, d)
			require.Equal(t, checkers.Valid, v.Verdict, "run %s: %v %v", v.Dir, v.Reasons, v.Checked.Anomalies())
			assert.Positive(t, v.Run.Nemeses[nem].Started, "the fault took effect")
		})
	}
}
