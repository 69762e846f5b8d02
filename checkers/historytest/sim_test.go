package historytest

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/history"
)

// The JSON Lines writer (which never holds the events) and Events agree, the
// fault periods included, and what they write pairs cleanly.
func TestSimulationWritesWhatItYields(t *testing.T) {
	h := Simulate(SimConfig{Seed: 2, Ops: 2000, Keys: 2, ClientsPerKey: 4, InfoRate: 0.1, Acquires: true, FaultEvery: 500})
	require.NotEmpty(t, h.Faults)
	var buf bytes.Buffer
	require.NoError(t, h.WriteJSONL(&buf))
	events, err := history.ReadAll(&buf)
	require.NoError(t, err)
	assert.Equal(t, h.Events(), events)
	_, err = history.Pair(events)
	require.NoError(t, err)
	nemesis := 0
	for _, e := range events {
		if e.Process == history.NemesisProcess {
			nemesis++
			assert.Equal(t, "n1", e.Node)
		} else {
			assert.Equal(t, "n1", e.Node, "every operation goes to the node the faults hit")
		}
	}
	assert.Equal(t, 2*len(h.Faults), nemesis)
}
