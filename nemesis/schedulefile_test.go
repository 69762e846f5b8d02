package nemesis

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/history"
	"github.com/fencecheck/fencecheck/nemesis/lazyfs"
)

// clockedNode is oneNode with a clock: restart, pause and clock all act on
// it.
type clockedNode struct {
	oneNode
	*fakeClocks
}

func (c *clockedNode) Nodes() []Node { return c.oneNode.Nodes() }

func newClockedNode() *clockedNode { return &clockedNode{fakeClocks: newFakeClocks("n1")} }

// fast shortens a nemesis's timing so a test run sees many faults.
type fast struct{ Nemesis }

func (fast) Timing(*Env) Timing {
	return Timing{QuietMin: 20 * time.Millisecond, QuietMax: 60 * time.Millisecond, FaultMin: 30 * time.Millisecond, FaultMax: 90 * time.Millisecond}
}

// runFor runs s for d and heals.
func runFor(t *testing.T, s *Scheduler, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	s.Run(ctx)
	cancel()
	require.NoError(t, s.Heal(context.Background()))
}

// The schedule a run records is what it did, and replaying it does it again:
// the same faults with the same nodes and parameters, starting when they
// started then (within the scheduler's jitter), each for its length.
func TestAScheduleReplaysWhatWasDrawn(t *testing.T) {
	env := &Env{Target: newClockedNode(), Holders: &holders{}, TTL: 40 * time.Millisecond}
	nems := []Nemesis{fast{restart{}}, fast{&pause{}}, fast{clock{}}}
	var hist bytes.Buffer
	drawn := NewScheduler(env, history.NewRecorder(&hist), 7, nems)
	runFor(t, drawn, 1500*time.Millisecond)
	planned := drawn.Planned(1500*time.Millisecond, "restart,pause,clock")
	require.GreaterOrEqual(t, len(planned.Faults), 9, "every nemesis acted several times")
	assert.Len(t, planned.Nemeses(), 3)
	started := 0
	for _, f := range planned.Faults {
		if f.Error == "" {
			started++
			assert.Positive(t, f.ID, "a started fault has its history id")
		}
	}
	assert.Equal(t, strings.Count(hist.String(), `"action":"start"`), started, "the schedule lists every fault the history started")

	// Through the file format and back.
	b, err := planned.Marshal()
	require.NoError(t, err)
	file, err := ParseSchedule(b)
	require.NoError(t, err)
	require.Len(t, file.Faults, len(planned.Faults))
	for i := range file.Faults {
		file.Faults[i].line = 0
		assert.Equal(t, planned.Faults[i], file.Faults[i], "fault %d survives the file", i+1)
	}

	env2 := &Env{Target: newClockedNode(), Holders: &holders{}, TTL: 40 * time.Millisecond}
	replayed := NewReplay(env2, history.NewRecorder(&bytes.Buffer{}), 7, file, []Nemesis{restart{}, &pause{}, clock{}})
	runFor(t, replayed, 1500*time.Millisecond+200*time.Millisecond)
	again := replayed.Planned(1500*time.Millisecond, "")
	require.Len(t, again.Faults, len(file.Faults), "every fault of the schedule was carried out")
	// Jitter: sleeps on a shared 2-core machine wake late by a few ms, more
	// under load; a fault that finds its node still held waits for it.
	const jitter = 150 * time.Millisecond
	// Faults of different nemeses that start close together may swap places
	// in a replay: compare each nemesis's faults in order.
	byNemesis := func(s *Schedule) map[string][]Scheduled {
		out := map[string][]Scheduled{}
		for _, f := range s.Faults {
			out[f.Nemesis] = append(out[f.Nemesis], f)
		}
		return out
	}
	want, got := byNemesis(file), byNemesis(again)
	for name, fs := range want {
		require.Len(t, got[name], len(fs), name)
		for i, f := range fs {
			g := got[name][i]
			assert.Equal(t, f.Nodes, g.Nodes, "%s fault %d", name, i+1)
			assert.Equal(t, f.Params, g.Params, "%s fault %d", name, i+1)
			assert.Equal(t, f.TakesOver, g.TakesOver, "%s fault %d", name, i+1)
			assert.InDelta(t, f.Start, g.Start, float64(jitter), "%s fault %d (%s) starts when it did", name, i+1, f.Describe())
			if f.Error == "" {
				assert.Equal(t, f.Duration, g.Duration, "%s fault %d lasts as long", name, i+1)
			}
		}
	}
}

// A plan's parameters decode into the nemesis's own type, so Start gets
// back what Draw made.
func TestParamsSurviveTheFileForEveryNemesis(t *testing.T) {
	for _, mk := range table {
		n := mk()
		p := n.Params()
		if p == nil {
			continue
		}
		b, err := (&Schedule{Faults: []Scheduled{{Nemesis: n.Name(), Nodes: []string{"n1"}, Params: p, Duration: time.Second}}}).Marshal()
		require.NoError(t, err)
		s, err := ParseSchedule(b)
		require.NoError(t, err, n.Name())
		assert.IsType(t, p, s.Faults[0].Params, n.Name())
	}
}

func TestScheduleFileErrorsNameTheLineAndTheReason(t *testing.T) {
	for name, tc := range map[string]struct{ file, want string }{
		"syntax":        {"{\n  \"schedule_version\": 1,\n  \"faults\": [\n    {\"nemesis\": \"restart\",}\n  ]\n}", "line 4"},
		"version":       {`{"schedule_version": 9, "faults": []}`, "schedule_version 9"},
		"unknown field": {`{"schedule_version": 1, "faults": [], "extra": 1}`, `unknown field "extra"`},
		"unknown nemesis": {"{\"schedule_version\": 1, \"faults\": [\n{\"nemesis\": \"gremlin\", \"nodes\": [\"n1\"], \"start_ns\": 0, \"duration_ns\": 5}]}",
			`line 2: unknown nemesis "gremlin"`},
		"param typo": {"{\"schedule_version\": 1,\n\"faults\": [\n{\"nemesis\": \"clock\", \"nodes\": [\"n1\"], \"params\": {\"mode\": \"step\", \"ofset_ms\": 5}}]}",
			`fault 1: line 3: params of clock: json: unknown field "ofset_ms"`},
		"param type": {`{"schedule_version": 1, "faults": [{"nemesis": "strip", "nodes": ["n1"], "params": {"share": "half"}}]}`,
			"params of strip"},
		"no params": {`{"schedule_version": 1, "faults": [{"nemesis": "restart", "nodes": ["n1"], "params": {"wipe": true}}]}`,
			"restart takes no params"},
		"negative": {`{"schedule_version": 1, "faults": [{"nemesis": "restart", "nodes": ["n1"], "start_ns": -5}]}`,
			"must not be negative"},
		"one nemesis twice at once": {"{\"schedule_version\": 1, \"faults\": [\n" +
			`{"nemesis": "restart", "nodes": ["n1"], "takes_over": true, "start_ns": 0, "duration_ns": 1000000000},` + "\n" +
			`{"nemesis": "restart", "nodes": ["n2"], "takes_over": true, "start_ns": 500000000, "duration_ns": 1000000000}]}`,
			"line 3: fault 2 (restart): starts while line 2: fault 1 (restart) is still live"},
		"node held": {"{\"schedule_version\": 1, \"faults\": [\n" +
			`{"nemesis": "restart", "nodes": ["n1"], "takes_over": true, "start_ns": 0, "duration_ns": 1000000000},` + "\n" +
			`{"nemesis": "pause", "nodes": ["n1"], "takes_over": true, "params": {"mode": "node"}, "start_ns": 900000000, "duration_ns": 1000000000}]}`,
			"fault 2 (pause): takes over n1 while line 2: fault 1 (restart) holds it"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ParseSchedule([]byte(tc.file))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	// Faults that follow one another are fine, and so are faults of
	// different nemeses on one node when they do not take it over.
	_, err := ParseSchedule([]byte(`{"schedule_version": 1, "faults": [
		{"nemesis": "restart", "nodes": ["n1"], "takes_over": true, "start_ns": 0, "duration_ns": 1000000000},
		{"nemesis": "restart", "nodes": ["n1"], "takes_over": true, "start_ns": 1000000000, "duration_ns": 1000000000},
		{"nemesis": "clock", "nodes": ["n1"], "params": {"mode": "step", "offset_ms": 5000}, "start_ns": 500000000, "duration_ns": 1000000000}]}`))
	assert.NoError(t, err)
}

// What a schedule names must exist on the target it is replayed on: its
// nemeses must apply, its nodes and links exist, its parameters make sense.
func TestScheduleMustFitTheTarget(t *testing.T) {
	f := newLinkFixture(t)
	env := &Env{Target: newClockedNode(), Links: f.set, TTL: time.Second}
	sel := Select([]string{"restart", "pause", "clock", "strip", "partition"}, env)
	require.Empty(t, sel.NotApplicable)
	check := func(faults string) error {
		s, err := ParseSchedule([]byte(`{"schedule_version": 1, "faults": [` + faults + `]}`))
		require.NoError(t, err)
		return s.CheckTarget(env, sel.Active, sel.NotApplicable)
	}
	assert.NoError(t, check(`{"nemesis": "restart", "nodes": ["n1"], "takes_over": true, "duration_ns": 5},
		{"nemesis": "strip", "nodes": ["n1"], "params": {"share": 0.5, "links": ["clients->n1"]}, "duration_ns": 5},
		{"nemesis": "clock", "nodes": ["n1"], "params": {"mode": "step", "offset_ms": 9000}, "duration_ns": 5}`))
	for faults, want := range map[string]string{
		`{"nemesis": "restart", "nodes": ["etcd-2"], "duration_ns": 5}`:                                               "the target has no node etcd-2 (it has: n1)",
		`{"nemesis": "restart", "nodes": ["n1", "n1"], "duration_ns": 5}`:                                             "exactly one node",
		`{"nemesis": "strip", "nodes": ["n1"], "params": {"share": 0.5, "links": ["clients->n9"]}, "duration_ns": 5}`: "no clients' link clients->n9",
		`{"nemesis": "pause", "nodes": ["n1"], "params": {"mode": "holder", "stall_ms": 5}, "duration_ns": 5}`:        "lock holders cannot be paused",
		`{"nemesis": "partition", "nodes": ["n1"], "params": {"mode": "one", "groups": [["n1"], ["n2"]]}}`:            "cannot cut links between its nodes",
		`{"nemesis": "delay", "nodes": ["n1"], "params": {"share": 0.5, "bound_ms": 5, "links": ["clients->n1"]}}`:    "the nemesis is not part of this run",
	} {
		err := check(faults)
		if assert.Error(t, err, faults) {
			assert.Contains(t, err.Error(), want)
			assert.Contains(t, err.Error(), "fault 1")
		}
	}
	na := map[string]string{"clock": "no clock here"}
	s, err := ParseSchedule([]byte(`{"schedule_version": 1, "faults": [{"nemesis": "clock", "nodes": ["n1"], "params": {"mode": "step"}}]}`))
	require.NoError(t, err)
	assert.ErrorContains(t, s.CheckTarget(env, nil, na), "the nemesis cannot act on this target: no clock here")
}

// In words, as the shrinker's summary says it.
func TestScheduledFaultInWords(t *testing.T) {
	assert.Equal(t, "restart of reference at 2.10 s for 0.80 s",
		Scheduled{Nemesis: "restart", Nodes: []string{"reference"}, Start: 2100 * time.Millisecond, Duration: 800 * time.Millisecond}.Describe())
	assert.Equal(t, "partition (issuers) of issuer-1, issuer-2 at 0.50 s for 2.00 s",
		Scheduled{Nemesis: "partition", Nodes: []string{"issuer-1", "issuer-2"}, Params: &partitionParams{Mode: "issuers"},
			Start: 500 * time.Millisecond, Duration: 2 * time.Second}.Describe())
	s := &Schedule{Faults: []Scheduled{{Nemesis: "pause"}, {Nemesis: "restart"}, {Nemesis: "restart"}}}
	assert.Equal(t, "restart ×2, pause", s.Kinds())
	assert.Equal(t, []string{"pause", "restart"}, s.Nemeses())
}

// A power loss recorded before crash states (no params) replays as it ran
// then: lose-all; one with a crash state gives it back.
func TestSchedulePowerLossCrashStateIsOptional(t *testing.T) {
	s, err := ParseSchedule([]byte(`{"schedule_version":1,"main_phase_ns":10000000000,"faults":[
{"nemesis":"power-loss","nodes":["n2"],"takes_over":true,"start_ns":1000000000,"duration_ns":500000000},
{"nemesis":"power-loss","nodes":["n2"],"takes_over":true,"params":{"mode":"torn-seq","seed":77},"start_ns":3000000000,"duration_ns":500000000}]}`))
	require.NoError(t, err)
	require.Len(t, s.Faults, 2)
	assert.Equal(t, &lazyfs.CrashState{}, s.Faults[0].Params)
	assert.Equal(t, &lazyfs.CrashState{Mode: lazyfs.TornSeq, Seed: 77}, s.Faults[1].Params)
	_, err = ParseSchedule([]byte(`{"schedule_version":1,"main_phase_ns":1,"faults":[{"nemesis":"crash-on-ack","nodes":["n1"],"start_ns":0,"duration_ns":1}]}`))
	assert.ErrorContains(t, err, "needs params", "crash-on-ack's trigger is its plan")
}
