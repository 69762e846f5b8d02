package analysis

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/checkers/historytest"
	"github.com/fencecheck/fencecheck/history"
)

func TestPairFaultsByIDAndOrder(t *testing.T) {
	raw := func(s string) json.RawMessage { return json.RawMessage(s) }
	ev := func(tm int64, f, action, id string) history.Event {
		e := history.Event{Time: tm, Process: -1, Type: "info", F: f, Extra: map[string]json.RawMessage{"action": raw(`"` + action + `"`)}}
		if id != "" {
			e.Extra["id"] = raw(id)
		}
		return e
	}
	var p faultPairer
	for _, e := range []history.Event{
		ev(10, "pause", "start", "1"), ev(20, "pause", "start", "2"),
		ev(30, "pause", "stop", "2"), ev(40, "pause", "stop", "1"),
		ev(50, "clock", "start", ""), ev(60, "clock", "start", ""), ev(70, "clock", "stop", ""),
	} {
		p.add(e)
	}
	faults := p.periods(100)
	require.Len(t, faults, 4)
	assert.Equal(t, [2]int64{10, 40}, [2]int64{faults[0].Start, faults[0].Stop}, "paired by id, not by order")
	assert.Equal(t, [2]int64{20, 30}, [2]int64{faults[1].Start, faults[1].Stop})
	assert.Equal(t, [2]int64{50, 70}, [2]int64{faults[2].Start, faults[2].Stop}, "without ids: first in, first out")
	assert.True(t, faults[3].Open)
	assert.EqualValues(t, 100, faults[3].Stop)
}

// Faults are paired once, in the analysis: markers, failed starts, run and
// tamper events are told apart, and each nemesis's starts are counted.
func TestFaultsOfAHistory(t *testing.T) {
	b := historytest.New().
		Write("r1", "1", "a", 0, 10).
		Fault("pause", "n1", 5, 50).
		Fault("strip", "n1", 20, 40).Write("r1", "2", "b", 25, 30).Strip("r1", "b", "2.x", "garble", 27).
		Nemesis("heal", "stop", 60).
		Run(history.RunStart, 0, map[string]any{"requested": "pause,strip"})
	b.Run(history.RunEnd, 61, map[string]any{"complete": true})
	events := b.Events()
	events = append(events, history.Event{Index: int64(len(events)), Time: 55, Process: -1, Type: history.Info, F: "clock",
		Extra: map[string]json.RawMessage{"action": json.RawMessage(`"error"`), "error": json.RawMessage(`"no clock to step"`)}})
	rep, err := Check(context.Background(), events, Options{MinOps: -1})
	require.NoError(t, err)
	var names []string
	for _, f := range rep.Faults {
		names = append(names, f.Nemesis)
	}
	assert.Equal(t, []string{"pause", "strip", "heal"}, names, "no run, tamper or error event is a fault")
	assert.True(t, rep.Faults[2].Instant(), "a stop with no start is a marker")
	assert.Equal(t, 3, rep.Counts.Faults)
	assert.Equal(t, 1, rep.Counts.TamperedWrites)
	assert.Equal(t, NemesisCount{Started: 1}, rep.Nemeses["pause"])
	assert.Equal(t, NemesisCount{Failed: 1, LastError: "no clock to step"}, rep.Nemeses["clock"])
	assert.Zero(t, rep.Nemeses["heal"].Started, "a marker is not a start")
	assert.Equal(t, "pause n1", rep.Faults[0].Label())
}

// issue 12: a fault's details read as words, without the HTML escapes
// json.Marshal writes (the report showed clients-\u003eadapter-1).
func TestFaultLabelHasNoHTMLEscapes(t *testing.T) {
	f := Fault{Nemesis: "partition", Details: map[string]json.RawMessage{
		"links": json.RawMessage(`["clients-\u003eadapter-1"]`),
		"mode":  json.RawMessage(`"a\u003cb"`),
		"n":     json.RawMessage(`12345678901234567890`),
	}}
	assert.Equal(t, `partition (links=["clients->adapter-1"], mode=a<b, n=12345678901234567890)`, f.Label())
}
