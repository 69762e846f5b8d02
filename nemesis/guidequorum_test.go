package nemesis

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/history"
)

// members is a quorum of n members, each keeping both halves' state (as
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

// quorumRun is a guided scheduler on a quorum of n members.
func quorumRun(t *testing.T, n int) *Scheduler {
	t.Helper()
	env := &Env{Target: members(n), TTL: time.Second}
	s := NewScheduler(env, history.NewRecorder(&bytes.Buffer{}), 1, []Nemesis{restart{}})
	s.Guide()
	return s
}

// outageOf is an outage of nodes as the guide aims it, awaiting an answer
// or not.
func outageOf(s *Scheduler, awaits bool, nodes ...string) Plan {
	return Plan{Nodes: nodes, TakesOver: true, Outage: true, keep: replicaGroups(s.Env, nodes), awaits: awaits}
}

// claim claims p's nodes as the scheduler does before a start.
func claim(s *Scheduler, p Plan, fault int64) bool { return s.Env.claims.claimPlan(p, fault) }

// An aimed fault that awaits an answer (a power cut on an acknowledgement)
// starts only while a majority of the members stays up with it, and until
// it has begun, no aimed outage takes another member down. Outages that
// await nothing go side by side, and unaimed draws keep their freedom.
func TestAFaultAwaitingAnAnswerKeepsAMajorityUp(t *testing.T) {
	s := quorumRun(t, 3)
	require.True(t, claim(s, outageOf(s, false, "m1"), 1))
	assert.False(t, claim(s, outageOf(s, true, "m2"), 2), "a second member down would leave no majority to answer")
	assert.True(t, claim(s, outageOf(s, false, "m2"), 3), "a restart beside a restart: both made their situations")
	s.Env.claims.release(1)
	s.Env.claims.release(3)

	require.True(t, claim(s, outageOf(s, true, "m1"), 4))
	assert.False(t, claim(s, outageOf(s, false, "m2"), 5), "the cut still awaits its acknowledgement")
	assert.True(t, claim(s, Plan{Nodes: []string{"m3"}, TakesOver: true, Outage: true}, 6), "an unaimed draw is not held back")
	s.Env.claims.release(6)
	s.Env.claims.begun(4)
	assert.True(t, claim(s, outageOf(s, false, "m2"), 7), "the cut has its answer: the next outage goes")
}

// Of five members two may be down when the fault that awaits an answer
// starts, not three; one that alone takes the majority down (a power cut
// of every member at once) goes with no other outage on the group.
func TestAFaultAwaitingAnAnswerOnFiveMembers(t *testing.T) {
	s := quorumRun(t, 5)
	require.True(t, claim(s, outageOf(s, false, "m1"), 1))
	assert.True(t, claim(s, outageOf(s, true, "m2"), 2))
	s.Env.claims.begun(2)
	require.True(t, claim(s, outageOf(s, false, "m3"), 3))
	assert.False(t, claim(s, outageOf(s, true, "m4"), 4))
	for _, f := range []int64{1, 2, 3} {
		s.Env.claims.release(f)
	}
	assert.True(t, claim(s, outageOf(s, true, "m1", "m2", "m3", "m4", "m5"), 5))
}

// The scheduler's start lets go of the wait once the fault's start
// returned: a later aimed outage goes while the fault is still live.
func TestAStartedFaultAwaitsNoMore(t *testing.T) {
	s := quorumRun(t, 3)
	ctx := context.Background()
	id, _ := s.start(ctx, restart{}, outageOf(s, true, "m1"), func() time.Duration { return time.Second }, time.Time{})
	require.Positive(t, id)
	assert.True(t, claim(s, outageOf(s, false, "m2"), 99))
}

// The guide aims a power cut on an acknowledgement as one that awaits its
// answer, with the member group it acts on; a restart awaits nothing.
func TestTheGuideMarksAnAimedFaultThatAwaitsAnAnswer(t *testing.T) {
	s := quorumRun(t, 3)
	rng := rand.New(rand.NewPCG(1, 2))
	a := aimedFault(t, s.Env, atTarget(map[string]int{"issuer-restart-regrant": 0}), []Nemesis{restart{}})
	p, err := s.drawAimed(context.Background(), a, rng)
	require.NoError(t, err)
	assert.Equal(t, [][]string{{"m1", "m2", "m3"}}, p.keep)
	assert.False(t, p.awaits)
	assert.True(t, awaitsAnswer(crashOnAck{}))
	assert.False(t, awaitsAnswer(restart{}))
}

// The groups are the members keeping a half's state, three or more; a pair
// or a single node has none, and an adapter's fault none.
func TestReplicaGroupsAreQuorumsOfThreeOrMore(t *testing.T) {
	three := &Env{Target: members(3)}
	assert.Equal(t, [][]string{{"m1", "m2", "m3"}}, replicaGroups(three, []string{"m2"}))
	assert.Empty(t, replicaGroups(three, []string{"a1"}))
	assert.Empty(t, replicaGroups(&Env{Target: members(2)}, []string{"m1"}))
	assert.Empty(t, replicaGroups(&Env{Target: halves{}}, []string{"i1"}))
}

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
