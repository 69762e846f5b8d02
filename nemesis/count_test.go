package nemesis

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/fencecheck/fencecheck/history"
)

// The one count reads fault events: starts, failures to apply (by mode),
// faults left for the heal and faults never undone; plain stops and
// markers count nothing.
func TestCountReadsFaultEvents(t *testing.T) {
	ev := func(action string, extra map[string]string) history.Event {
		x := map[string]json.RawMessage{}
		if action != "" {
			x[history.ExtraAction], _ = json.Marshal(action)
		}
		for k, v := range extra {
			x[k], _ = json.Marshal(v)
		}
		return history.Event{Process: history.NemesisProcess, Type: history.Info, F: Partition, Extra: x}
	}
	var c Count
	assert.True(t, c.Add(ev(history.FaultStart, map[string]string{history.ExtraMode: "one"})))
	assert.True(t, c.Add(ev(history.FaultError, map[string]string{history.ExtraMode: "one", history.ExtraError: "nsenter failed"})))
	assert.True(t, c.Add(ev(history.FaultError, map[string]string{history.ExtraError: "no link"})))
	assert.False(t, c.Add(ev(history.FaultStop, nil)))
	assert.True(t, c.Add(ev(history.FaultStopFailed, map[string]string{history.ExtraError: "busy"})))
	assert.True(t, c.Add(ev(history.FaultStop, map[string]string{history.ExtraError: "still busy"})))
	assert.False(t, c.Add(ev("", nil)), "another tool's marker")
	assert.Equal(t, Count{Started: 1, Failed: 2, Error: "no link", EndFailed: 1, EndError: "still busy", EndRetried: 1,
		Modes: map[string]*ModeCount{"one": {Started: 1, Failed: 1, Error: "nsenter failed"}, "": {Failed: 1, Error: "no link"}}}, c)
}
