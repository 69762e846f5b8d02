package nemesis

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/fencecheck/fencecheck/history"
)

// A write answered, or stripped of its token on its way, before the freeze
// would come holds nothing valid in the node: the freeze passes it over
// and takes the next one.
func TestAFreezeOnAWritePassesOverOneAnsweredOrStripped(t *testing.T) {
	rec, acks := ackedRecorder(&bytes.Buffer{})
	env := &Env{Acks: acks}
	got := make(chan map[string]any, 1)
	const after = 300 * time.Millisecond
	go func() {
		details := map[string]any{}
		assert.NoError(t, awaitWriteSent(context.Background(), env, "a1", after, details))
		got <- details
	}()
	time.Sleep(50 * time.Millisecond)
	rec.Record(history.Event{Process: 1, Type: history.Invoke, F: history.Write, Key: "k1", Value: "v1", Node: "a1"})
	time.Sleep(20 * time.Millisecond)
	rec.Record(history.Event{Process: 1, Type: history.Ok, F: history.Write, Key: "k1", Value: "v1", Node: "a1"})
	time.Sleep(after)
	rec.Record(history.Event{Process: 2, Type: history.Invoke, F: history.Write, Key: "k2", Value: "v2", Node: "a1"})
	time.Sleep(20 * time.Millisecond)
	rec.Record(history.Event{Process: history.NemesisProcess, Type: history.Info, F: history.Tamper, Key: "k2", Value: "v2", Node: "a1"})
	time.Sleep(after)
	w := rec.Record(history.Event{Process: 3, Type: history.Invoke, F: history.Write, Key: "k3", Value: "v3", Node: "a1"})
	d := <-got
	assert.Equal(t, true, d["timed"])
	assert.Equal(t, w.Index, d["write_index"], "neither the answered write nor the stripped one")
}
