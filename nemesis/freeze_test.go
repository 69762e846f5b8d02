package nemesis

import (
	"bytes"
	"context"
	"encoding/json"
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

// A write sent late by intent (a straggler's after a restart, a woken
// holder's, an idle probe's) is passed over: its client goes no further
// with the key, so no newer write of its own overtakes it.
func TestAFreezeOnAWritePassesOverOneSentLateByIntent(t *testing.T) {
	rec, got := awaitingFreeze(t)
	for i, k := range []string{history.ExtraStraggler, history.ExtraStalled, history.ExtraIdle} {
		rec.Record(history.Event{Process: i + 1, Type: history.Invoke, F: history.Write, Key: "k", Node: "a1",
			Extra: map[string]json.RawMessage{k: json.RawMessage(`1`)}})
	}
	// A holder's write with its lease belief (its clock was off) is not late.
	w := rec.Record(history.Event{Process: 4, Type: history.Invoke, F: history.Write, Key: "k", Node: "a1",
		Extra: map[string]json.RawMessage{history.ExtraLeaseLeft: json.RawMessage(`400`)}})
	d := <-got
	assert.Equal(t, true, d["timed"])
	assert.Equal(t, w.Index, d["write_index"], "the first write its client goes on from")
}

// awaitingFreeze starts a freeze's wait for a write sent to a1, and gives
// the recorder to send writes through and the freeze's details once it
// took one.
func awaitingFreeze(t *testing.T) (*history.Recorder, chan map[string]any) {
	rec, acks := ackedRecorder(&bytes.Buffer{})
	env := &Env{Acks: acks}
	got := make(chan map[string]any, 1)
	go func() {
		details := map[string]any{}
		assert.NoError(t, awaitWriteSent(context.Background(), env, "a1", 0, details))
		got <- details
	}()
	time.Sleep(50 * time.Millisecond)
	return rec, got
}
