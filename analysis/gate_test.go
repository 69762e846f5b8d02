package analysis

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/checkers/historytest"
	"github.com/fencecheck/fencecheck/history"
)

// busyHistory is a valid history of 12 definite operations.
func busyHistory() *historytest.Builder {
	b := historytest.New()
	for i := int64(0); i < 6; i++ {
		tok := string(rune('1' + i))
		b.Acquire("l1", 100*i, 100*i+5, tok).Write("r1", tok, "v"+tok, 100*i+10, 100*i+20)
	}
	return b
}

func gated(t *testing.T, b *historytest.Builder) *Result {
	t.Helper()
	rep, err := Check(context.Background(), b.Events(), Options{Checker: CheckerPorcupine, MinOps: DefaultMinOps})
	require.NoError(t, err)
	return rep
}

func TestGateReadsTheRunFromTheHistory(t *testing.T) {
	start := func(b *historytest.Builder, requested string, active []string, na map[string]string) *historytest.Builder {
		return b.Run(history.RunStart, 0, map[string]any{"requested": requested, "nemeses": active, "not_applicable": na})
	}
	end := func(b *historytest.Builder, complete, cut bool) *historytest.Builder {
		return b.Run(history.RunEnd, 1000, map[string]any{"complete": complete, "cut_short": cut})
	}

	t.Run("no run events: judged on the operations alone", func(t *testing.T) {
		rep := gated(t, busyHistory())
		assert.Equal(t, checkers.Valid, rep.Verdict, rep.Reason)
		assert.Nil(t, rep.Run)
		assert.Empty(t, rep.GateReasons)
	})
	t.Run("a complete run that did what it asked: valid", func(t *testing.T) {
		b := start(busyHistory(), "pause", []string{"pause"}, nil).Fault("pause", "n1", 200, 300)
		rep := gated(t, end(b, true, false))
		assert.Equal(t, checkers.Valid, rep.Verdict, rep.Reason)
		require.NotNil(t, rep.Run)
		assert.True(t, rep.Run.Complete)
		assert.Equal(t, "pause", rep.Run.Requested)
	})
	t.Run("a requested nemesis that never took effect: unknown", func(t *testing.T) {
		b := start(busyHistory(), "pause,clock", []string{"pause", "clock"}, nil).Fault("pause", "n1", 200, 300)
		b.Run(history.RunEnd, 1000, map[string]any{"complete": true, "waited": map[string]int{"clock": 4}})
		rep := gated(t, b)
		assert.Equal(t, checkers.Unknown, rep.Verdict)
		require.Len(t, rep.GateReasons, 1)
		assert.Contains(t, rep.GateReasons[0], "nemesis clock was requested but never took effect: every node it could act on was held by another fault")
		assert.Contains(t, rep.Reason, "the history is valid, but nemesis clock")
		assert.Equal(t, ExitUnknown, rep.ExitCode)
	})
	t.Run("a requested nemesis that failed to start says why", func(t *testing.T) {
		events := end(start(busyHistory(), "restart", []string{"restart"}, nil), true, false).Events()
		failed := history.Event{Index: int64(len(events)), Time: 500, Process: history.NemesisProcess, Type: history.Info, F: "restart",
			Extra: map[string]json.RawMessage{"action": json.RawMessage(`"error"`), "error": json.RawMessage(`"docker kill: no such container"`)}}
		rep, err := Check(context.Background(), append(events, failed), Options{Checker: CheckerPorcupine})
		require.NoError(t, err)
		assert.Equal(t, checkers.Unknown, rep.Verdict)
		assert.Contains(t, rep.Reason, "nemesis restart was requested but never took effect: docker kill: no such container")
	})
	t.Run("a requested nemesis that cannot act on the target: unknown, and noted", func(t *testing.T) {
		b := start(busyHistory(), "clock", nil, map[string]string{"clock": "etcd reads the vDSO"})
		rep := gated(t, end(b, true, false))
		assert.Equal(t, checkers.Unknown, rep.Verdict)
		assert.Contains(t, rep.Reason, "nemesis clock was requested but cannot act on this target: etcd reads the vDSO")
		assert.Contains(t, rep.Notes, "nemesis clock not applicable: etcd reads the vDSO")
	})
	t.Run(`"all" names no nemesis: what does not apply is only noted`, func(t *testing.T) {
		b := start(busyHistory(), "all", []string{"pause"}, map[string]string{"clock": "etcd reads the vDSO"})
		rep := gated(t, end(b, true, false))
		assert.Equal(t, checkers.Valid, rep.Verdict, rep.Reason)
		assert.Contains(t, rep.Notes, "nemesis clock not applicable: etcd reads the vDSO")
	})
	t.Run(`"all": a nemesis that never took effect nor failed is noted, the verdict stands`, func(t *testing.T) {
		b := start(busyHistory(), "all", []string{"pause", "member-replace", "clock"}, nil).Fault("pause", "n1", 200, 300)
		b.Run(history.RunEnd, 1000, map[string]any{"complete": true, "waited": map[string]int{"member-replace": 25}})
		rep := gated(t, b)
		assert.Equal(t, checkers.Valid, rep.Verdict, rep.Reason)
		assert.Contains(t, rep.Notes, "nemesis member-replace never took effect in this run: it found every node it could act on held by another fault (25 times), and the target declined any other try (a change it could not make safely then)")
		assert.Contains(t, rep.Notes, "nemesis clock never took effect in this run: the target declined every try (a change it could not make safely then), or none came in the run's time")
		for _, n := range rep.Notes {
			assert.NotContains(t, n, "nemesis pause never", "pause took effect")
		}
	})
	t.Run("no end event: the run did not finish", func(t *testing.T) {
		rep := gated(t, start(busyHistory(), "none", nil, nil))
		assert.Equal(t, checkers.Unknown, rep.Verdict)
		assert.Contains(t, rep.Reason, "the run did not finish: the history has no end event")
		assert.False(t, rep.Run.Ended)
	})
	t.Run("cut short: unknown", func(t *testing.T) {
		rep := gated(t, end(start(busyHistory(), "none", nil, nil), false, true))
		assert.Equal(t, checkers.Unknown, rep.Verdict)
		assert.Contains(t, rep.Reason, "the run was cut short")
	})
	t.Run("final phase failed: unknown, with the problem", func(t *testing.T) {
		b := start(busyHistory(), "none", nil, nil).
			Run(history.RunProblem, 900, map[string]any{"phase": "final", "error": "recovery: node n2 did not answer in 30s"})
		rep := gated(t, end(b, false, false))
		assert.Equal(t, checkers.Unknown, rep.Verdict)
		assert.Contains(t, rep.Reason, "the run's final phase did not complete")
		assert.Contains(t, rep.Reason, "final: recovery: node n2 did not answer in 30s")
		assert.Contains(t, rep.Notes, "problem during the run: final: recovery: node n2 did not answer in 30s")
	})
	t.Run("a violation is a violation however the run went", func(t *testing.T) {
		b := start(busyHistory(), "pause", nil, nil).Write("r1", "1", "late", 700, 710)
		rep := gated(t, b)
		assert.Equal(t, checkers.Invalid, rep.Verdict)
		assert.Contains(t, rep.Reason, "a violation is a violation, although nemesis pause was requested but never took effect; the run did not finish")
		assert.Len(t, rep.GateReasons, 2)
		assert.Equal(t, ExitInvalid, rep.ExitCode)
	})
	t.Run("too few operations", func(t *testing.T) {
		rep := gated(t, historytest.New().Write("r1", "1", "a", 0, 10))
		assert.Equal(t, checkers.Unknown, rep.Verdict)
		assert.Contains(t, rep.Reason, "too few operations to judge: only 1 ended ok or fail; the gate needs at least 10 (--min-ops)")
		rep, err := Check(context.Background(), historytest.New().Write("r1", "1", "a", 0, 10).Events(), Options{Checker: CheckerPorcupine, MinOps: -1})
		require.NoError(t, err)
		assert.Equal(t, checkers.Valid, rep.Verdict, "a negative minimum is none")
	})
}

// The run the engine-API issue saw: every in-container cut failed (error
// events of the node-cut modes) while the client black-holes of the same
// nemesis applied. The mode that never applied leaves the run unknown; a
// mode that applied beside a failure is only counted; the counts are in
// the result and the fault lines.
func TestGateFaultModeThatNeverApplied(t *testing.T) {
	events := busyHistory().
		Run(history.RunStart, 0, map[string]any{"requested": "all", "nemeses": []string{"clock", "partition"}}).
		Run(history.RunEnd, 1000, map[string]any{"complete": true}).Events()
	at := int64(600)
	add := func(f, action, mode, errText string, id int) {
		x := map[string]json.RawMessage{}
		put := func(k string, v any) { x[k], _ = json.Marshal(v) }
		put("action", action)
		put("mode", mode)
		if id > 0 {
			put("id", id)
		}
		if errText != "" {
			put("error", errText)
		}
		at++
		events = append(events, history.Event{Index: int64(len(events)), Time: at, Process: history.NemesisProcess,
			Type: history.Info, F: f, Node: "etcd-1", Extra: x})
	}
	for i := 1; i <= 2; i++ {
		add("partition", "start", "clients-from-node", "", i)
		add("partition", "stop", "clients-from-node", "", i)
	}
	for range 3 {
		add("partition", "error", "one", "partition etcd-1: nsenter: cannot open /proc/4242/ns/net", 0)
	}
	add("clock", "start", "step", "", 3)
	add("clock", "stop", "step", "", 3)
	add("clock", "error", "step", "clock of etcd-2: the helper found no process to move", 0)
	add("clock", "start", "strobe", "", 4)
	add("clock", "stop", "strobe", "", 4)

	rep, err := Check(context.Background(), events, Options{Checker: CheckerPorcupine})
	require.NoError(t, err)
	assert.Equal(t, checkers.Unknown, rep.Verdict)
	assert.Equal(t, []string{`nemesis partition: its "one" faults failed to apply every time they were tried (3 times), so they were never exercised: partition etcd-1: nsenter: cannot open /proc/4242/ns/net`},
		rep.GateReasons)
	assert.Equal(t, ExitUnknown, rep.ExitCode)
	assert.Equal(t, NemesisCount{Started: 2, Failed: 3, LastError: "partition etcd-1: nsenter: cannot open /proc/4242/ns/net",
		Modes: map[string]ModeCount{"clients-from-node": {Started: 2}, "one": {Failed: 3, LastError: "partition etcd-1: nsenter: cannot open /proc/4242/ns/net"}}},
		rep.Nemeses["partition"])
	assert.Equal(t, []string{
		"faults applied: clock 2, partition 2",
		"faults that failed to apply: clock 1 of 3 (last error: clock of etcd-2: the helper found no process to move); partition 3 of 5 (last error: partition etcd-1: nsenter: cannot open /proc/4242/ns/net)",
	}, FaultLines(rep.Nemeses))

	// Under "all", a nemesis that failed every try was not exercised either;
	// named, the older rule says it once.
	onlyErrors := busyHistory().
		Run(history.RunStart, 0, map[string]any{"requested": "all", "nemeses": []string{"restart"}}).
		Run(history.RunEnd, 1000, map[string]any{"complete": true}).Events()
	events = onlyErrors
	add("restart", "error", "", "killing etcd-1: no such container", 0)
	rep, err = Check(context.Background(), events, Options{Checker: CheckerPorcupine})
	require.NoError(t, err)
	assert.Equal(t, []string{"nemesis restart failed to apply every time it was tried (once): killing etcd-1: no such container"}, rep.GateReasons)
}

// The summary's and the report's "run:" line says how far the run got, from
// the run events alone.
func TestCompletionSaysHowFarTheRunGot(t *testing.T) {
	var none *RunRecord
	assert.Equal(t, "", none.Completion(), "a history without run events says nothing")
	for _, tc := range []struct {
		rec  RunRecord
		want string
	}{
		{RunRecord{Ended: true, Complete: true}, "completed: the final heal and reads were done"},
		{RunRecord{Ended: true, Complete: true, CutShort: true}, "cut short (interrupted): the main phase ended early; the final heal and reads were done"},
		{RunRecord{Ended: true, CutShort: true}, "cut short (interrupted), and its final phase failed"},
		{RunRecord{Ended: true}, "did not complete: its final phase failed"},
		{RunRecord{Phases: []string{history.PhaseMain}}, "did not finish: the final heal and reads never happened"},
		{RunRecord{Phases: []string{history.PhaseMain, history.PhaseFinal}}, "did not finish: its final phase (heal, recovery, final reads) began but never ended"},
	} {
		assert.Contains(t, tc.rec.Completion(), tc.want, "%+v", tc.rec)
	}
}

// A restart whose node did not start again when due (stop-failed) was
// retried by the final heal: counted, no gate reason. One the final heal
// could not undo either (a stop event with an error) left the system
// faulted: a valid history is unknown, with the error.
func TestGateFaultThatCouldNotBeUndone(t *testing.T) {
	build := func(finalErr string) []history.Event {
		events := busyHistory().
			Run(history.RunStart, 0, map[string]any{"requested": "restart", "nemeses": []string{"restart"}}).
			Run(history.RunEnd, 1000, map[string]any{"complete": true}).Events()
		for i, action := range []string{"start", "stop-failed", "stop"} {
			x := map[string]json.RawMessage{"action": json.RawMessage(`"` + action + `"`), "id": json.RawMessage(`1`)}
			if action == "stop-failed" {
				x["error"], _ = json.Marshal("starting postgres-1: timeout")
			}
			if action == "stop" && finalErr != "" {
				x["error"], _ = json.Marshal(finalErr)
			}
			events = append(events, history.Event{Index: int64(len(events)), Time: int64(600 + i), Process: history.NemesisProcess,
				Type: history.Info, F: "restart", Node: "postgres-1", Extra: x})
		}
		return events
	}
	rep, err := Check(context.Background(), build(""), Options{Checker: CheckerPorcupine})
	require.NoError(t, err)
	assert.Equal(t, checkers.Valid, rep.Verdict, "%v", rep.GateReasons)
	assert.Equal(t, NemesisCount{Started: 1, EndRetried: 1}, rep.Nemeses["restart"])
	assert.Contains(t, FaultLines(rep.Nemeses), "faults not undone when due, left to the final heal: restart 1")
	require.Len(t, rep.Faults, 1, "a stop-failed event neither ends the period nor is a marker")

	rep, err = Check(context.Background(), build("starting postgres-1: no such container"), Options{Checker: CheckerPorcupine})
	require.NoError(t, err)
	assert.Equal(t, checkers.Unknown, rep.Verdict)
	assert.Equal(t, []string{"nemesis restart: a fault could not be undone (the system stayed faulted): starting postgres-1: no such container"}, rep.GateReasons)
	assert.Contains(t, FaultLines(rep.Nemeses), "faults that could not be undone: restart 1 (last error: starting postgres-1: no such container)")
}
