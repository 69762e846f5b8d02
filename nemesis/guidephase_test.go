package nemesis

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/history"
)

// members is a cluster of n members, each keeping both halves' state (as
// etcd's), beside a stateless adapter; every node can be restarted.
type members int

func (m members) Nodes() []Node {
	out := []Node{{Name: "a1", Role: "adapter", Stateless: true}}
	for i := range int(m) {
		out = append(out, Node{Name: fmt.Sprintf("m%d", i+1), Role: "member"})
	}
	return out
}
func (members) KillNode(context.Context, string) error        { return nil }
func (members) StartNode(context.Context, string, bool) error { return nil }

// longRestart is restart with faults of 2.5 s, longer than a test's phase.
type longRestart struct{ restart }

func (longRestart) Timing(*Env) Timing {
	return Timing{QuietMin: 20 * time.Millisecond, QuietMax: 60 * time.Millisecond, FaultMin: 2500 * time.Millisecond, FaultMax: 2500 * time.Millisecond}
}

// Where the calm to come is brief (no idle situation asks for one) and a
// node fault is still on at the phase's end, the phase runs on: the other
// faults go on beside the long one instead of waiting for it to end before
// a brief calm (etcd, 3 members: no fault began from 24 to 28.8 s of a
// 30 s run, the calm waiting for a 4 s freeze of an adapter).
func TestAPhaseRunsOnWhileANodeFaultIsOnBeforeABriefCalm(t *testing.T) {
	env := &Env{Target: members(3), TTL: 40 * time.Millisecond,
		Coverage: func() map[string]int { return atTarget(map[string]int{"issuer-restart-regrant": 0}) }}
	s := NewScheduler(env, history.NewRecorder(&bytes.Buffer{}), 3, []Nemesis{longRestart{}, fast{restart{wipe: true}}})
	s.Guide()
	s.guide.lengths = phaseLengths{faultMin: 600 * time.Millisecond, faultMax: 700 * time.Millisecond,
		calmMargin: 200 * time.Millisecond, brief: 400 * time.Millisecond, gapMin: 40 * time.Millisecond, gapMax: 80 * time.Millisecond}
	runFor(t, s, 4*time.Second)
	sched := s.Planned(4*time.Second, "restart,restart-wipe")
	var long *Scheduled
	for i, f := range sched.Faults {
		if f.Nemesis == Restart && f.Error == "" {
			long = &sched.Faults[i]
			break
		}
	}
	require.NotNil(t, long, "%v", sched.Faults)
	beside := 0
	for _, f := range sched.Faults {
		// The first phase ends 0.7 s after it began at the latest.
		if f.Nemesis == RestartWipe && f.Start > long.Start+800*time.Millisecond && f.Start < long.End() {
			beside++
		}
	}
	assert.Positive(t, beside, "faults beside the long restart after the first phase's end")
	for _, c := range sched.Calm[1:] {
		assert.False(t, c.Start < long.End() && c.End() > long.Start, "no calm phase while the restart is on: %+v", c)
	}
}
