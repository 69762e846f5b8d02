package nemesis

import (
	"bytes"
	"context"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/history"
)

// The guided schedule and a nemesis that starts alone (guide.go: Alone,
// wholeFor, aloneTurn): a member replacement needs the rest of the cluster
// whole from its start to its end.

// soloRestart is a restart that needs the rest of the system whole.
type soloRestart struct{ restart }

func (soloRestart) Name() string      { return "solo" }
func (soloRestart) StartsAlone() bool { return true }

// A nemesis that starts alone is free only when no other conducted fault is
// live or starting but clock steps, and while it is on no other one is
// free but the clock.
func TestANemesisThatStartsAloneWaitsForTheOthers(t *testing.T) {
	env := &Env{Target: newClockedNode(), Holders: &holders{}, TTL: 40 * time.Millisecond}
	conducted := []Nemesis{restart{}, clock{}, soloRestart{}}
	s := NewScheduler(env, history.NewRecorder(&bytes.Buffer{}), 1, conducted)
	s.Guide()
	names := func(ns []Nemesis) []string {
		var out []string
		for _, n := range ns {
			out = append(out, n.Name())
		}
		return out
	}
	assert.Equal(t, []string{Restart, Clock, "solo"}, names(s.free(conducted)), "nothing on: all free")
	s.guide.starting(Restart, true)
	assert.Equal(t, []string{Clock}, names(s.free(conducted)), "a restart starting: the solo one waits")
	s.guide.starting(Restart, false)
	s.guide.starting("solo", true)
	assert.Equal(t, []string{Clock}, names(s.free(conducted)), "the solo one starting: nothing else but a clock step, which keeps every node up and connected")
	s.guide.starting("solo", false)
	s.guide.starting(Clock, true)
	assert.Equal(t, []string{Restart, "solo"}, names(s.free(conducted)), "a clock step on: the solo one may start")
	s.guide.starting(Clock, false)
	assert.True(t, alone(&memberReplace{}), "a member replacement starts alone")
}

// A nemesis that starts alone and never had a turn gets one: in a phase's
// extension the conductor starts nothing new while other faults are live,
// once every other nemesis had its first turn.
func TestTheConductorDrainsForAnAloneNemesisFirstTurn(t *testing.T) {
	env := &Env{Target: halves{}}
	replace := &memberReplace{}
	s := NewScheduler(env, history.NewRecorder(&bytes.Buffer{}), 1, []Nemesis{restart{}, clock{}, replace})
	s.Guide()
	conducted := []Nemesis{restart{}, clock{}, replace}
	s.active[1] = &live{nem: restart{}}
	s.Counts[Restart].Started = 1
	assert.False(t, s.drainForAlone(conducted, s.free(conducted)), "clock has not had its turn: it may start beside the restart")
	s.Counts[Clock].Started = 1
	assert.True(t, s.drainForAlone(conducted, s.free(conducted)), "only the member replacement is untried, and the restart is live")
	delete(s.active, 1)
	assert.False(t, s.drainForAlone(conducted, s.free(conducted)), "nothing live: it is free, no need to hold back")
	s.Counts[MemberReplace].Started = 1
	s.active[1] = &live{nem: restart{}}
	assert.False(t, s.drainForAlone(conducted, s.free(conducted)), "every nemesis had its turn")
}

// fastSolo is a fast restart that starts alone.
type fastSolo struct{ fast }

func (fastSolo) Name() string      { return "solo" }
func (fastSolo) StartsAlone() bool { return true }

// A nemesis that starts alone (a member replacement) has its first turn
// right after a calm phase long enough for the cluster to be whole (a calm
// phase is held that long for it), first, before the phase's own faults:
// not in the first fault phase's extension, right after faults that
// disrupted the cluster (etcd refused the removal for 5 s there).
func TestAnAloneNemesisFirstTurnFollowsACalmPhase(t *testing.T) {
	sched := runAlone(t, newClockedNode(), 2500*time.Millisecond)
	var solo *Scheduled
	for i, f := range sched.Faults {
		if f.Nemesis == "solo" && f.Error == "" {
			solo = &sched.Faults[i]
			break
		}
	}
	require.NotNil(t, solo, "the solo nemesis had its turn: %+v", sched.Faults)
	assert.Contains(t, solo.Why, "first turn, alone, after a calm phase")
	var before *Phase
	for i, c := range sched.Calm {
		if c.End() <= solo.Start {
			before = &sched.Calm[i]
		}
	}
	require.NotNil(t, before)
	assert.Greater(t, before.Start, sched.Calm[0].End(), "not in the first fault phase, after the opening")
	assert.GreaterOrEqual(t, before.Duration, 250*time.Millisecond, "the calm phase before it left the cluster whole")
	assert.Contains(t, before.Why, "whole for solo's first turn", "held that long for it")
	assert.Less(t, solo.Start-before.End(), 100*time.Millisecond, "first thing after the calm phase")
	for _, f := range sched.Faults {
		if f.Nemesis != "solo" && f.Error == "" && !onClientsOnly(&pause{}, f.Plan()) {
			assert.False(t, f.Start < solo.End() && f.End() > solo.Start, "%s overlaps the solo fault", f.Describe())
		}
	}
}

// runAlone runs a guided schedule of fast restarts, clock faults and a fast
// nemesis that starts alone on target, in phases of tenths of a second
// (a cluster whole for 250 ms), for d, and returns what it did.
func runAlone(t *testing.T, target Cluster, d time.Duration) *Schedule {
	env := &Env{Target: target, Holders: &holders{}, TTL: 40 * time.Millisecond,
		Coverage: func() map[string]int { return atTarget(map[string]int{"issuer-restart-regrant": 0}) }}
	s := NewScheduler(env, history.NewRecorder(&bytes.Buffer{}), 3, []Nemesis{fast{restart{}}, fast{clock{}}, fastSolo{fast{restart{}}}})
	s.Guide()
	s.guide.lengths = phaseLengths{faultMin: 300 * time.Millisecond, faultMax: 400 * time.Millisecond,
		calmMargin: 100 * time.Millisecond, brief: 100 * time.Millisecond, gapMin: 20 * time.Millisecond, gapMax: 40 * time.Millisecond,
		whole: 250 * time.Millisecond}
	runFor(t, s, d)
	return s.Planned(d, "")
}

// slowSolo is a restart that starts alone and lasts a few tenths of a second.
type slowSolo struct{ soloRestart }

func (slowSolo) Timing(*Env) Timing {
	return Timing{QuietMin: 20 * time.Millisecond, QuietMax: 60 * time.Millisecond, FaultMin: 300 * time.Millisecond, FaultMax: 400 * time.Millisecond}
}

// While a nemesis that starts alone has its turn (a member replacement:
// seconds with nothing else on), the conductor goes on drawing the faults
// that keep every node up and connected, clock steps, toward their
// situations, on the other nodes; no other.
func TestClockFaultsGoOnBesideAnAloneNemesis(t *testing.T) {
	cov := func() map[string]int {
		return atTarget(map[string]int{"issuer-clock-back-regrant": 0, "issuer-restart-regrant": 0})
	}
	besides := 0
	for seed := range uint64(6) {
		s, launched := besideAlone(t, &Env{Target: halves{}, Coverage: cov}, nil, false, seed)
		faults := s.Planned(0, "").Faults
		require.Len(t, faults, 1)
		assert.Equal(t, "solo", faults[0].Nemesis)
		assert.Contains(t, faults[0].Why, "first turn, alone, after a calm phase of 8s")
		require.LessOrEqual(t, len(launched), 1, "one clock fault at a time")
		for _, a := range launched {
			besides++
			assert.Equal(t, Clock, a.nemesis.Name(), "no restart beside it")
			assert.Equal(t, "first turn, aimed: issuer-clock-back-regrant 0 of 3", a.why)
			assert.NotContains(t, a.nodes, faults[0].Nodes[0], "not on the node it holds")
		}
		if faults[0].Nodes[0] != "i1" {
			assert.Len(t, launched, 1, "seed %d: the issuer's node i1 is free: a clock step there", seed)
		}
	}
	assert.Positive(t, besides)
}

// settledNode is a cluster that agrees to a membership change at any time
// (Settler: 0), as the memory reference's replica pair does.
type settledNode struct{ *clockedNode }

func (settledNode) SettleBeforeChange() time.Duration { return 0 }

// Where the cluster needs no settling before a membership change, the
// first turn of a nemesis that starts alone comes right after the opening
// quiet, first of all, with the cluster whole: not after the first calm
// phase, which came halfway through a 30 s run (rejoin-empty: 16-22 s
// guided against 8-18 s random).
func TestAnAloneNemesisGoesFirstWhereTheClusterNeedsNoSettling(t *testing.T) {
	// Its turn is an edge's: it ends edgeRoom before the run does.
	sched := runAlone(t, settledNode{newClockedNode()}, edgeRoom+500*time.Millisecond)
	var first *Scheduled
	for i, f := range sched.Faults {
		if f.Error == "" && !onClientsOnly(&pause{}, f.Plan()) {
			first = &sched.Faults[i]
			break
		}
	}
	require.NotNil(t, first, "%+v", sched.Faults)
	assert.Equal(t, "solo", first.Nemesis, "the first fault: %s", first.Why)
	assert.Contains(t, first.Why, "first turn, alone")
	require.NotEmpty(t, sched.Calm)
	assert.Less(t, first.Start-sched.Calm[0].End(), 100*time.Millisecond, "right after the opening")
}

// Beside a nemesis that starts alone, the freeze of an adapter aimed at a
// write overtaken goes on too (pause draws on its own otherwise: aimOnly):
// the members stay up and connected, and the newer write needs only their
// quorum. A clients' nemesis aimed at a node keeping state would not.
func TestAFreezeOfAnAdapterGoesOnBesideAnAloneNemesis(t *testing.T) {
	cov := func() map[string]int {
		return atTarget(map[string]int{"write-overtaken": 0, "issuer-restart-regrant": 0})
	}
	freezes := 0
	for seed := range uint64(4) {
		_, launched := besideAlone(t, &Env{Target: twoAdapters{}, Coverage: cov}, []Nemesis{&pause{}}, true, seed)
		for _, a := range launched {
			require.Equal(t, Pause, a.nemesis.Name(), "no restart beside it: %s", a.why)
			assert.Equal(t, "write-overtaken 0 of 3", a.why)
			assert.Equal(t, map[string]bool{"a1": true, "a2": true}, a.nodes, "only the adapters")
			freezes++
		}
	}
	assert.Positive(t, freezes)
	env := &Env{Target: twoAdapters{}}
	assert.True(t, statelessOnly(env, map[string]bool{"a1": true, "a2": true}))
	assert.False(t, statelessOnly(env, map[string]bool{"a1": true, "db": true}), "the store keeps state")
	assert.False(t, statelessOnly(env, nil))
}

// besideAlone gives a slow nemesis that starts alone its turn among a
// restart and a clock (conducted) and others (drawing on their own), with
// tried the restart and the clock having had their first turns, and
// returns the scheduler, healed, and the faults launched beside it (each
// held as conductOne would hold it).
func besideAlone(t *testing.T, env *Env, others []Nemesis, tried bool, seed uint64) (*Scheduler, []aim) {
	t.Helper()
	solo := slowSolo{}
	conducted := []Nemesis{restart{}, clock{}, solo}
	s := NewScheduler(env, history.NewRecorder(&bytes.Buffer{}), 1, append(slices.Clone(conducted), others...))
	s.Guide()
	if tried {
		s.Counts[Restart].Started, s.Counts[Clock].Started = 1, 1
	}
	s.guide.lengths.gapMin, s.guide.lengths.gapMax = 20*time.Millisecond, 40*time.Millisecond
	var launched []aim
	launch := func(a aim, _ time.Time) {
		launched = append(launched, a)
		s.guide.starting(a.nemesis.Name(), true)
	}
	require.True(t, s.aloneTurn(context.Background(), rand.New(rand.NewPCG(seed, 1)), solo, 8*time.Second, conducted, launch))
	require.NoError(t, s.Heal(context.Background()))
	return s, launched
}
