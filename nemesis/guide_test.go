package nemesis

import (
	"bytes"
	"context"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/history"
)

// halves is a target whose issuer and resource state live on nodes of
// their own, beside a stateless adapter; every node can be restarted.
type halves struct{}

func (halves) Nodes() []Node {
	return []Node{{Name: "i1", Role: "issuer"}, {Name: "r1", Role: "resource"}, {Name: "a1", Role: "adapter", Stateless: true}}
}
func (halves) KillNode(context.Context, string) error        { return nil }
func (halves) StartNode(context.Context, string, bool) error { return nil }

// atTarget is a live coverage with every situation the guide aims at
// created GuideTarget times, but for the ones given.
func atTarget(short map[string]int) map[string]int {
	out := map[string]int{}
	for _, id := range Situations() {
		out[id] = GuideTarget
	}
	for id, n := range short {
		out[id] = n
	}
	return out
}

// The next fault is the one that creates the situation furthest below
// target, on a node keeping the state that situation needs; one draw in
// exploreOneIn ignores coverage.
func TestTheGuideAimsAtTheSituationFurthestBelowTarget(t *testing.T) {
	env := &Env{Target: halves{}}
	s := NewScheduler(env, history.NewRecorder(&bytes.Buffer{}), 1, nil)
	free := []Nemesis{restart{}, powerLoss{}, clock{}}
	for _, tc := range []struct {
		short       map[string]int
		nemesis     string
		node, count string
	}{
		{map[string]int{"resource-restart-stale": 0, "issuer-restart-regrant": 2}, Restart, "r1", "resource-restart-stale 0 of 3"},
		{map[string]int{"issuer-restart-regrant": 1, "resource-power-loss-stale": 2}, Restart, "i1", "issuer-restart-regrant 1 of 3"},
		{map[string]int{"issuer-power-loss-regrant": 0, "resource-restart-stale": 1}, PowerLoss, "i1", "issuer-power-loss-regrant 0 of 3"},
	} {
		rng := rand.New(rand.NewPCG(3, 4))
		aimed := 0
		for range 40 {
			a, ok := nextFault(env, atTarget(tc.short), free, nil, triedOnce, rng)
			require.True(t, ok)
			if a.why == "explore" {
				continue
			}
			aimed++
			assert.Equal(t, tc.nemesis, a.nemesis.Name(), tc.count)
			assert.Equal(t, tc.count, a.why)
			if a.nemesis.Name() != Restart {
				continue // power-loss needs a layer to draw on: the aim is enough
			}
			p, err := s.drawAimed(context.Background(), a, rng)
			require.NoError(t, err)
			assert.Equal(t, []string{tc.node}, p.Nodes, "aimed at the node keeping the state")
		}
		assert.Greater(t, aimed, 20, "most draws are aimed")
	}
	// The clock's situation is the issuer's.
	a := aimedFault(t, env, atTarget(map[string]int{"issuer-clock-back-regrant": 0}), free)
	assert.Equal(t, Clock, a.nemesis.Name())
	assert.Equal(t, map[string]bool{"i1": true}, a.nodes)
	// A nemesis that never had a turn has it first.
	a, ok := nextFault(env, atTarget(map[string]int{"resource-restart-stale": 0}), free, nil, map[string]int{Restart: 2, PowerLoss: 1}, rand.New(rand.NewPCG(1, 1)))
	require.True(t, ok)
	assert.Equal(t, Clock, a.nemesis.Name())
	assert.Equal(t, "first turn", a.why, "no situation a clock step creates is short: an unaimed first turn")
	// Among the nemeses that never had a turn, those that create a short
	// situation go first, aimed at the node keeping its state.
	for seed := range uint64(20) {
		a, ok = nextFault(env, atTarget(map[string]int{"resource-restart-stale": 0}), free, nil, map[string]int{PowerLoss: 1}, rand.New(rand.NewPCG(seed, 1)))
		require.True(t, ok)
		assert.Equal(t, Restart, a.nemesis.Name(), "seed %d: the untried remedy before the untried clock", seed)
		assert.Equal(t, "first turn, aimed: resource-restart-stale 0 of 3", a.why)
		assert.True(t, a.short, "an edge remedy's fault is short")
	}
	// A nemesis with a fault live is not free: the next situation's is drawn.
	a = aimedFault(t, env, atTarget(map[string]int{"resource-restart-stale": 0, "issuer-clock-back-regrant": 1}), []Nemesis{clock{}})
	assert.Equal(t, "issuer-clock-back-regrant 1 of 3", a.why)
}

// A crash on an acknowledgement is a remedy of the crash situations too,
// aimed by its mode: a power cut for the power-loss ones.
func TestTheGuideAimsCrashesOnAcknowledgementsByTheirMode(t *testing.T) {
	env := &Env{Target: halves{}}
	free := []Nemesis{powerLoss{}, crashOnAck{}}
	tried := map[string]int{PowerLoss: 1, CrashOnAck: 1}
	seen := map[string]bool{}
	for seed := range uint64(40) {
		a, ok := nextFault(env, atTarget(map[string]int{"resource-power-loss-stale": 1}), free, nil, tried, rand.New(rand.NewPCG(seed, 2)))
		require.True(t, ok)
		if a.why == "explore" {
			continue
		}
		seen[a.nemesis.Name()] = true
		assert.Equal(t, "resource-power-loss-stale 1 of 3", a.why)
		assert.Equal(t, map[string]bool{"r1": true}, a.nodes)
		if a.nemesis.Name() == CrashOnAck {
			assert.True(t, a.hits(Plan{Nodes: []string{"r1"}, Params: &ackCrash{Crash: CrashPower}}, a.nodes))
			assert.False(t, a.hits(Plan{Nodes: []string{"r1"}, Params: &ackCrash{Crash: CrashKill}}, a.nodes), "a kill is no power loss")
			assert.False(t, a.hits(Plan{Nodes: []string{"i1"}, Params: &ackCrash{Crash: CrashPower}}, a.nodes), "the issuer keeps no resource state")
		}
	}
	assert.Equal(t, map[string]bool{PowerLoss: true, CrashOnAck: true}, seen, "either creates it")
}

// twoAdapters is a store behind two stateless adapters.
type twoAdapters struct{ halves }

func (twoAdapters) Nodes() []Node {
	return []Node{{Name: "db", Role: "redis"}, {Name: "a1", Role: "adapter", Stateless: true}, {Name: "a2", Role: "adapter", Stateless: true}}
}

// A write overtaken in flight is aimed at with a node pause of an adapter,
// long, though pause draws on its own otherwise (aimOnly: no first turn or
// explore of the conductor's); a target with one path for writes has no
// such aim.
func TestTheGuideFreezesAnAdapterForAnOvertakenWrite(t *testing.T) {
	cov := atTarget(map[string]int{"write-overtaken": 0})
	for seed := range uint64(10) {
		a, ok := nextFault(&Env{Target: twoAdapters{}}, cov, []Nemesis{restart{}}, []Nemesis{&pause{}}, triedOnce, rand.New(rand.NewPCG(seed, 5)))
		require.True(t, ok)
		if a.why == "explore" {
			assert.Equal(t, Restart, a.nemesis.Name(), "the conductor's own explore")
			continue
		}
		assert.Equal(t, Pause, a.nemesis.Name())
		assert.Equal(t, "write-overtaken 0 of 3", a.why)
		assert.Equal(t, map[string]bool{"a1": true, "a2": true}, a.nodes)
		assert.True(t, a.long, "long enough for the lease to run out")
		assert.True(t, a.hits(Plan{Nodes: []string{"a2"}, Params: &pauseParams{Mode: PauseNode}}, a.nodes))
		assert.False(t, a.hits(Plan{Nodes: []string{holderNode}, Params: &pauseParams{Mode: PauseHolders}}, a.nodes), "a holder pause holds no write inside a node")
		assert.False(t, a.hits(Plan{Nodes: []string{"db"}, Params: &pauseParams{Mode: PauseNode}}, a.nodes), "the store holds every writer alike")
	}
	// Tokens stripped: the proxies' strip, on any link, short.
	a, ok := nextFault(&Env{Target: halves{}}, atTarget(map[string]int{"token-stripped": 0}), nil, []Nemesis{strip{}}, triedOnce, rand.New(rand.NewPCG(1, 5)))
	require.True(t, ok)
	assert.Equal(t, Strip, a.nemesis.Name())
	assert.Nil(t, a.nodes, "any link")
	assert.True(t, a.short)
	// Alone, the aim-only nemesis is drawn only for its aim.
	_, ok = nextFault(&Env{Target: twoAdapters{}}, atTarget(nil), nil, []Nemesis{&pause{}}, triedOnce, rand.New(rand.NewPCG(1, 5)))
	assert.False(t, ok, "nothing short: no turn for pause")
	_, ok = nextFault(&Env{Target: halves{}}, cov, nil, []Nemesis{&pause{}}, triedOnce, rand.New(rand.NewPCG(1, 5)))
	assert.False(t, ok, "one adapter: no second path for a newer write")
}

// triedOnce: every nemesis had its first turn.
var triedOnce = map[string]int{Restart: 1, PowerLoss: 1, Clock: 1}

// aimedFault is the guide's next fault that is not an exploring one.
func aimedFault(t *testing.T, env *Env, cov map[string]int, free []Nemesis) aim {
	t.Helper()
	rng := rand.New(rand.NewPCG(1, 1))
	for {
		a, ok := nextFault(env, cov, free, nil, triedOnce, rng)
		require.True(t, ok)
		if a.why != "explore" {
			return a
		}
	}
}

// A calm phase is as long as the longest idle time whose quiet situation
// is below target (and fits in the run), brief when none is.
func TestACalmPhaseWhenQuietIdleSituationsAreShort(t *testing.T) {
	pl := defaultPhases
	d, why := pl.calmFor(atTarget(map[string]int{"key-idle-5s-stale": 1}), 20*time.Second)
	assert.Equal(t, 5*time.Second+pl.calmMargin, d)
	assert.Equal(t, "key-idle-5s-stale 1 of 3", why)
	d, why = pl.calmFor(atTarget(map[string]int{"lock-free-1s-regrant": 0}), 20*time.Second)
	assert.Equal(t, time.Second+pl.calmMargin, d)
	assert.Equal(t, "lock-free-1s-regrant 0 of 3", why)
	d, _ = pl.calmFor(atTarget(map[string]int{"key-idle-5s-stale": 0, "key-idle-1s-stale": 0}), 6*time.Second)
	assert.Equal(t, time.Second+pl.calmMargin, d, "the 5 s scale does not fit in what is left")
	d, why = pl.calmFor(atTarget(nil), 20*time.Second)
	assert.Equal(t, pl.brief, d)
	assert.Contains(t, why, "brief")
	// Early in a run the 5 s scale does not apply yet (too little main
	// phase so far): it counts as short while the 1 s scale applies.
	early := atTarget(nil)
	delete(early, "key-idle-5s-stale")
	delete(early, "lock-free-5s-regrant")
	d, _ = pl.calmFor(early, 20*time.Second)
	assert.Equal(t, 5*time.Second+pl.calmMargin, d)
	// Without a live count every situation is short.
	d, _ = pl.calmFor(nil, 20*time.Second)
	assert.Equal(t, 5*time.Second+pl.calmMargin, d)
}

// fastPause is the pause nemesis with a test's timing.
type fastPause struct{ *pause }

func (fastPause) Timing(*Env) Timing {
	return Timing{QuietMin: 20 * time.Millisecond, QuietMax: 60 * time.Millisecond, FaultMin: 50 * time.Millisecond, FaultMax: 120 * time.Millisecond}
}

// guidedRun runs a guided scheduler with short phases on a one-node
// target whose quiet idle situations are all at target (brief calm
// phases) and the rest short, and returns its schedule.
func guidedRun(t *testing.T, d time.Duration) *Schedule {
	t.Helper()
	env := &Env{Target: newClockedNode(), Holders: &holders{}, TTL: 40 * time.Millisecond,
		Coverage: func() map[string]int {
			return atTarget(map[string]int{"issuer-restart-regrant": 0, "issuer-clock-back-regrant": 1})
		}}
	s := NewScheduler(env, history.NewRecorder(&bytes.Buffer{}), 5, []Nemesis{fast{restart{}}, fastPause{&pause{}}, fast{clock{}}})
	s.Guide()
	s.guide.lengths = phaseLengths{faultMin: 600 * time.Millisecond, faultMax: 900 * time.Millisecond,
		calmMargin: 200 * time.Millisecond, brief: 400 * time.Millisecond, gapMin: 40 * time.Millisecond, gapMax: 80 * time.Millisecond}
	runFor(t, s, d)
	return s.Planned(d, "restart,pause,clock")
}

// A guided schedule alternates fault phases and calm phases, and no fault
// on a node overlaps a calm phase; the clients' faults (holder pauses) go
// on through them.
func TestAGuidedScheduleHasCalmPhasesWithNoNodeFault(t *testing.T) {
	sched := guidedRun(t, 3*time.Second)
	assert.Equal(t, ModeGuided, sched.Mode)
	require.GreaterOrEqual(t, len(sched.Calm), 2, "calm phases alternate with fault phases")
	nodeFaults, aimed := 0, 0
	for _, f := range sched.Faults {
		if f.Error != "" {
			continue
		}
		if onClientsOnly(&pause{}, f.Plan()) {
			continue
		}
		nodeFaults++
		if f.Why != "" && f.Why != "explore" {
			aimed++
		}
		for _, c := range sched.Calm {
			assert.False(t, f.Start < c.End() && f.End() > c.Start, "%s overlaps the calm phase at %s-%s", f.Describe(), c.Start, c.End())
		}
	}
	assert.GreaterOrEqual(t, nodeFaults, 3)
	assert.Positive(t, aimed, "faults aimed at the short situations")
}

// A guided run opens calm for the shortest first quiet of its nemeses'
// own draws, so the workload's first cycles (where a bug that needs no
// fault shows) meet no fault on a node, as under the random draw.
func TestAGuidedRunOpensCalm(t *testing.T) {
	sched := guidedRun(t, 1500*time.Millisecond)
	require.NotEmpty(t, sched.Calm)
	open := sched.Calm[0]
	assert.Less(t, open.Start, 10*time.Millisecond, "the first calm phase is the opening")
	assert.Equal(t, fast{}.Timing(nil).QuietMin, open.Duration)
	assert.Contains(t, open.Why, "opening")
	for _, f := range sched.Faults {
		if f.Error == "" && !onClientsOnly(&pause{}, f.Plan()) {
			assert.GreaterOrEqual(t, f.Start, open.End(), "%s starts after the opening", f.Describe())
		}
	}
	assert.Equal(t, 20*time.Millisecond, opening(&Env{}, []Nemesis{fast{restart{}}, clock{}}))
	assert.Equal(t, time.Second, opening(&Env{}, []Nemesis{restart{}, clock{}}))
}

// A guided run's schedule survives the file (mode, calm phases, each
// fault's why) and replays: the same faults, each at its time.
func TestAGuidedScheduleReplays(t *testing.T) {
	sched := guidedRun(t, 2*time.Second)
	b, err := sched.Marshal()
	require.NoError(t, err)
	file, err := ParseSchedule(b)
	require.NoError(t, err)
	assert.Equal(t, sched.Calm, file.Calm)
	assert.Equal(t, sched.Mode, file.Mode)
	require.Len(t, file.Faults, len(sched.Faults))
	for i := range file.Faults {
		file.Faults[i].line = 0
		assert.Equal(t, sched.Faults[i], file.Faults[i], "fault %d survives the file", i+1)
	}
	env := &Env{Target: newClockedNode(), Holders: &holders{}, TTL: 40 * time.Millisecond}
	replayed := NewReplay(env, history.NewRecorder(&bytes.Buffer{}), 5, file, []Nemesis{restart{}, &pause{}, clock{}})
	runFor(t, replayed, 2200*time.Millisecond)
	again := replayed.Planned(2*time.Second, "")
	assert.Empty(t, again.Mode, "a replay carries out faults; it draws no phases")
	require.Len(t, again.Faults, len(file.Faults))
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
			assert.InDelta(t, f.Start, g.Start-g.Waited, float64(150*time.Millisecond), "%s is tried when it started (waited %s)", f.Describe(), g.Waited)
		}
	}
}

// calmHolders is a workload that follows calm phases (CalmFollower): it
// records what it was told, and when.
type calmHolders struct {
	*holders
	mu     sync.Mutex
	follow bool
	calls  []Phase // Start: when told, from the first call; Duration: until then
	first  time.Time
	hold   time.Duration
}

func (c *calmHolders) FollowCalm() { c.mu.Lock(); c.follow = true; c.mu.Unlock() }

// CalmNeeded: with hold set, each calm phase is needed hold past its end.
func (c *calmHolders) CalmNeeded() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.hold == 0 || len(c.calls) == 0 {
		return time.Time{}
	}
	last := c.calls[len(c.calls)-1]
	return c.first.Add(last.Start + last.Duration + c.hold)
}
func (c *calmHolders) Calm(until time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if c.first.IsZero() {
		c.first = now
	}
	c.calls = append(c.calls, Phase{Start: now.Sub(c.first), Duration: until.Sub(now)})
}

// The workload hears of every calm phase as it begins, for as long as it
// lasts, in a guided run and in its replay; a random run's and a guided
// run's with only clients' faults never say calm phases will come.
func TestCalmPhasesAreAnnouncedToTheWorkload(t *testing.T) {
	cov := func() map[string]int { return atTarget(map[string]int{"issuer-restart-regrant": 0}) }
	newEnv := func(w *calmHolders) *Env {
		return &Env{Target: newClockedNode(), Holders: w, TTL: 40 * time.Millisecond, Coverage: cov}
	}
	w := &calmHolders{holders: &holders{}}
	s := NewScheduler(newEnv(w), history.NewRecorder(&bytes.Buffer{}), 5, []Nemesis{fast{restart{}}, fastPause{&pause{}}})
	s.Guide()
	assert.True(t, w.follow, "told before the main phase")
	s.guide.lengths = phaseLengths{faultMin: 300 * time.Millisecond, faultMax: 400 * time.Millisecond,
		calmMargin: 200 * time.Millisecond, brief: 300 * time.Millisecond, gapMin: 40 * time.Millisecond, gapMax: 80 * time.Millisecond}
	runFor(t, s, 2*time.Second)
	sched := s.Planned(2*time.Second, "restart,pause")
	require.GreaterOrEqual(t, len(sched.Calm), 2)
	require.Len(t, w.calls, len(sched.Calm), "one announcement per calm phase")
	for i, p := range sched.Calm {
		assert.InDelta(t, p.Duration, w.calls[i].Duration, float64(20*time.Millisecond), "calm phase %d lasts as announced", i)
		assert.InDelta(t, p.Start-sched.Calm[0].Start, w.calls[i].Start, float64(30*time.Millisecond), "calm phase %d announced as it began", i)
	}

	again := &calmHolders{holders: &holders{}}
	replayed := NewReplay(newEnv(again), history.NewRecorder(&bytes.Buffer{}), 5, sched, []Nemesis{fast{restart{}}, fastPause{&pause{}}})
	assert.True(t, again.follow, "a replay of calm phases says so too")
	runFor(t, replayed, 2*time.Second)
	require.Len(t, again.calls, len(sched.Calm), "the replay announces the recorded calm phases")
	for i, p := range sched.Calm {
		assert.InDelta(t, p.Duration, again.calls[i].Duration, float64(30*time.Millisecond), "replayed calm phase %d", i)
		assert.InDelta(t, p.Start-sched.Calm[0].Start, again.calls[i].Start, float64(40*time.Millisecond), "replayed calm phase %d at its time", i)
	}
	assert.Equal(t, sched.Calm, replayed.Planned(2*time.Second, "").Calm, "and records them again")

	random := &calmHolders{holders: &holders{}}
	runFor(t, NewScheduler(newEnv(random), history.NewRecorder(&bytes.Buffer{}), 5, []Nemesis{fast{restart{}}}), 300*time.Millisecond)
	clientsOnly := &calmHolders{holders: &holders{}}
	s = NewScheduler(newEnv(clientsOnly), history.NewRecorder(&bytes.Buffer{}), 5, []Nemesis{fastPause{&pause{}}})
	s.Guide()
	assert.False(t, random.follow, "random draws have no calm phases")
	assert.False(t, clientsOnly.follow, "nothing conducted: no calm phases")
}

// In a calm phase only holder pauses go on: the clients' link faults (a
// strip, a delay) and node pauses wait for a fault phase, as node faults do.
func TestOnlyHolderPausesRunInCalmPhases(t *testing.T) {
	assert.True(t, calmToo(&pause{}, Plan{Params: &pauseParams{Mode: PauseHolders}}))
	assert.False(t, calmToo(&pause{}, Plan{Nodes: []string{"n1"}, Params: &pauseParams{Mode: PauseNode}}))
	assert.False(t, calmToo(strip{}, Plan{}))
	assert.False(t, calmToo(delay{}, Plan{}))
	assert.False(t, calmToo(restart{}, Plan{}))
}

// A calm phase whose idle probes still need it when it ends is held on for
// them, as long as they say and at most maxCalmExtension, and recorded so.
func TestACalmPhaseIsHeldOnForTheIdleProbes(t *testing.T) {
	w := &calmHolders{holders: &holders{}, hold: 250 * time.Millisecond}
	env := &Env{Target: newClockedNode(), Holders: w, TTL: 40 * time.Millisecond,
		Coverage: func() map[string]int { return atTarget(map[string]int{"key-idle-1s-stale": 0}) }}
	s := NewScheduler(env, history.NewRecorder(&bytes.Buffer{}), 5, []Nemesis{fast{restart{}}})
	s.Guide()
	s.guide.lengths = phaseLengths{faultMin: 300 * time.Millisecond, faultMax: 400 * time.Millisecond,
		calmMargin: 200 * time.Millisecond, brief: 300 * time.Millisecond, gapMin: 40 * time.Millisecond, gapMax: 80 * time.Millisecond}
	runFor(t, s, 4*time.Second)
	sched := s.Planned(4*time.Second, "restart")
	held := 0
	for _, p := range sched.Calm[1:] { // the opening is not held: no probe round fits in it
		if strings.Contains(p.Why, "held on") {
			held++
			assert.InDelta(t, float64(time.Second+200*time.Millisecond+250*time.Millisecond), float64(p.Duration), float64(60*time.Millisecond), "held on as long as needed: %s", p.Why)
		}
	}
	assert.Positive(t, held, "calm phases held on: %v", sched.Calm)
	for _, f := range sched.Faults {
		for _, p := range sched.Calm {
			assert.False(t, f.Start >= p.Start && f.Start < p.End(), "%s starts in a calm phase held on", f.Describe())
		}
	}
}

// slowRestart is restart with faults of 400 ms to 1 s.
type slowRestart struct{ restart }

func (slowRestart) Timing(*Env) Timing {
	return Timing{QuietMin: 20 * time.Millisecond, QuietMax: 60 * time.Millisecond, FaultMin: 400 * time.Millisecond, FaultMax: time.Second}
}

// A fault aimed at a situation made while it lasts keeps the longer half
// of its range even when the fault phase ends first; an edge fault is cut
// to its shortest.
func TestALongAimIsNotCutByThePhaseEnd(t *testing.T) {
	for _, tc := range []struct {
		long     bool
		min, max time.Duration
	}{{true, 700 * time.Millisecond, time.Second}, {false, 400 * time.Millisecond, 450 * time.Millisecond}} {
		env := &Env{Target: newClockedNode(), TTL: 40 * time.Millisecond}
		s := NewScheduler(env, history.NewRecorder(&bytes.Buffer{}), 1, []Nemesis{slowRestart{}})
		s.Guide()
		s.conductOne(context.Background(), rand.New(rand.NewPCG(1, 1)), aim{nemesis: slowRestart{}, long: tc.long, short: !tc.long}, time.Now().Add(10*time.Millisecond))
		sched := s.Planned(2*time.Second, "restart")
		require.Len(t, sched.Faults, 1)
		d := sched.Faults[0].Duration
		assert.True(t, d >= tc.min && d <= tc.max, "long %v: lasted %s, not in %s-%s", tc.long, d, tc.min, tc.max)
	}
}

// frozenAdapters is twoAdapters whose nodes can be frozen; it notes when.
type frozenAdapters struct {
	twoAdapters
	mu     sync.Mutex
	frozen map[string]time.Time
}

func (f *frozenAdapters) PauseNode(_ context.Context, node string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.frozen[node] = time.Now()
	return nil
}
func (f *frozenAdapters) ResumeNode(context.Context, string) error { return nil }

// The aim at an overtaken write freezes an adapter as it serves a write:
// the plan is made, not drawn (a node pause of an adapter on a write is
// a rare draw of pause's own), and the freeze comes the drawn delay after
// the next write sent to that node, not before, the details saying which.
func TestAnOvertakenWriteAimFreezesAnAdapterOnAWrite(t *testing.T) {
	target := &frozenAdapters{frozen: map[string]time.Time{}}
	rec, acks := ackedRecorder(&bytes.Buffer{})
	env := &Env{Target: target, Acks: acks, TTL: time.Second}
	s := NewScheduler(env, rec, 1, []Nemesis{&pause{}})
	a, ok := nextFault(env, atTarget(map[string]int{"write-overtaken": 0}), nil, []Nemesis{&pause{}}, triedOnce, rand.New(rand.NewPCG(2, 2)))
	require.True(t, ok)
	require.NotNil(t, a.plan)
	p, err := s.drawAimed(context.Background(), a, rand.New(rand.NewPCG(2, 2)))
	require.NoError(t, err)
	pp := p.Params.(*pauseParams)
	require.True(t, pp.OnWrite)
	require.Len(t, p.Nodes, 1)
	node := p.Nodes[0]
	assert.Contains(t, []string{"a1", "a2"}, node)
	assert.True(t, pp.AfterWriteUS >= 300 && pp.AfterWriteUS < 4000, "%d us", pp.AfterWriteUS)
	other := map[string]string{"a1": "a2", "a2": "a1"}[node]
	started := make(chan *Fault, 1)
	go func() {
		f, err := (&pause{}).Start(context.Background(), env, p)
		assert.NoError(t, err)
		started <- f
	}()
	time.Sleep(100 * time.Millisecond)
	rec.Record(history.Event{Process: 1, Type: history.Invoke, F: history.Write, Key: "k", Node: other})
	rec.Record(history.Event{Process: 2, Type: history.Invoke, F: history.Read, Key: "k", Node: node})
	rec.Record(history.Event{Process: 1, Type: history.Ok, F: history.Acquire, Key: "k", Node: other})
	time.Sleep(50 * time.Millisecond)
	target.mu.Lock()
	assert.Empty(t, target.frozen, "not frozen before a write is sent to it")
	target.mu.Unlock()
	sent := time.Now()
	w := rec.Record(history.Event{Process: 3, Type: history.Invoke, F: history.Write, Key: "k", Node: node})
	f := <-started
	target.mu.Lock()
	at := target.frozen[node]
	target.mu.Unlock()
	assert.GreaterOrEqual(t, at.Sub(sent), time.Duration(pp.AfterWriteUS)*time.Microsecond, "frozen the drawn delay after the write was sent")
	assert.Equal(t, true, f.Details["timed"])
	assert.Equal(t, w.Index, f.Details["write_index"])
}

// The freeze takes the next write sent to its node, whatever its key: the
// writer fails over and overtakes it itself (a wait for a key granted
// through another node took half a second, a crash of the store beginning
// meanwhile).
func TestAFreezeOnAWriteTakesTheNextWrite(t *testing.T) {
	rec, got := awaitingFreeze(t)
	rec.Record(history.Event{Process: 1, Type: history.Ok, F: history.Acquire, Key: "mine", Node: "a1"})
	rec.Record(history.Event{Process: 2, Type: history.Invoke, F: history.Write, Key: "other", Node: "a2"})
	w := rec.Record(history.Event{Process: 1, Type: history.Invoke, F: history.Write, Key: "mine", Node: "a1"})
	d := <-got
	assert.Equal(t, true, d["timed"])
	assert.Equal(t, w.Index, d["write_index"], "the first write sent to a1")
	assert.Equal(t, "mine", d["write_key"])
}

// A fault aimed at a situation made at its end ends edgeRoom before the
// main phase does, so the node serves again and grants while the run goes
// on; one that cannot is not started.
func TestAnEdgeFaultEndsBeforeTheRunDoes(t *testing.T) {
	env := &Env{Target: newClockedNode(), Holders: &holders{}, TTL: 40 * time.Millisecond}
	s := NewScheduler(env, history.NewRecorder(&bytes.Buffer{}), 1, []Nemesis{clock{}})
	s.Guide()
	a := aim{nemesis: clock{}, short: true, why: "issuer-clock-back-regrant 0 of 3"}
	floor := max(minFault, min(clock{}.Timing(env).FaultMin, time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), edgeRoom+floor/2)
	s.conductOne(ctx, rand.New(rand.NewPCG(1, 1)), a, time.Now().Add(time.Minute))
	cancel()
	assert.Empty(t, s.Planned(0, "").Faults, "no room left for its end: not started")

	room := edgeRoom + floor + 200*time.Millisecond
	ctx, cancel = context.WithTimeout(context.Background(), room)
	defer cancel()
	begun := time.Now()
	s.conductOne(ctx, rand.New(rand.NewPCG(1, 1)), a, time.Now().Add(time.Minute))
	faults := s.Planned(0, "").Faults
	require.Len(t, faults, 1)
	assert.LessOrEqual(t, faults[0].Duration, room-edgeRoom, "it ends edgeRoom before the run")
	assert.Less(t, time.Since(begun), room, "and has ended by then")
	require.NoError(t, s.Heal(context.Background()))
}

// A fault phase runs on for the nemeses that never had a turn only where no
// later fault phase fits after the longest calm phase: in a 30 s run their
// first turns go first in the next phase instead (etcd's first phase ran on
// to 13 s, and the run had no second one).
func TestFirstTurnsWaitForTheNextPhaseWhereOneFits(t *testing.T) {
	pl := defaultPhases
	longest := 5*time.Second + pl.calmMargin
	assert.True(t, pl.laterPhase(true, 23*time.Second), "a 30 s run after its first phase")
	assert.False(t, pl.laterPhase(true, pl.faultMax+longest), "no whole phase after the long calm: the phase runs on")
	assert.False(t, pl.laterPhase(true, 6*time.Second), "a 12 s run: every fault tried in its one phase")
	assert.False(t, pl.laterPhase(false, time.Hour), "an unbounded run keeps the extension")
}

// A fault that leaves its node serving (the clock's step back) holds no
// node, so the next node fault follows it as one of the clients' faults
// does, 20 ms on, not a gap later: after the clock's first turn, the
// crashes' came a gap later, and the bugs they show 0.5-1 s later.
func TestANodeFaultFollowsAClockStepWithoutAGap(t *testing.T) {
	env := &Env{Target: newClockedNode(), Holders: &holders{}, TTL: 40 * time.Millisecond,
		Coverage: func() map[string]int {
			return atTarget(map[string]int{"issuer-restart-regrant": 0, "issuer-clock-back-regrant": 0})
		}}
	s := NewScheduler(env, history.NewRecorder(&bytes.Buffer{}), 5, []Nemesis{fast{restart{}}, fast{clock{}}})
	s.Guide()
	s.guide.lengths = phaseLengths{faultMin: 2 * time.Second, faultMax: 2 * time.Second,
		calmMargin: 200 * time.Millisecond, brief: 400 * time.Millisecond, gapMin: 400 * time.Millisecond, gapMax: 500 * time.Millisecond}
	first := firstStarts(t, s)
	assert.Less(t, first[Clock], first[Restart], "the clock's turn first")
	assert.Less(t, first[Restart]-first[Clock], 200*time.Millisecond, "no gap after the clock's step")
}

// The next node fault waits for the clock's step (it comes on the next
// grant), a gap at most: a crash armed 20 ms after the clock's launch held
// the node, and the step waited out the crash (the python example: 1.3 s).
func TestANodeFaultWaitsForTheClockStepOnAGrant(t *testing.T) {
	rec, acks := ackedRecorder(&bytes.Buffer{})
	env := &Env{Target: newClockedNode(), Holders: &holders{}, TTL: 40 * time.Millisecond, Acks: acks,
		Coverage: func() map[string]int {
			return atTarget(map[string]int{"issuer-restart-regrant": 0, "issuer-clock-back-regrant": 0})
		}}
	s := NewScheduler(env, rec, 5, []Nemesis{fast{restart{}}, fast{clock{}}})
	s.Guide()
	s.guide.lengths = phaseLengths{faultMin: 2 * time.Second, faultMax: 2 * time.Second,
		calmMargin: 200 * time.Millisecond, brief: 400 * time.Millisecond, gapMin: 700 * time.Millisecond, gapMax: 800 * time.Millisecond}
	// The first grant comes 300 ms after the phase begins, the next (the
	// one after the step, which ends its hush on outages) 20 ms later.
	go func() {
		time.Sleep(20*time.Millisecond + 300*time.Millisecond)
		for i, token := range []string{"1", "2"} {
			rec.Record(history.Event{Process: i + 1, Type: history.Invoke, F: history.Acquire, Key: "k", Node: "n1"})
			rec.Record(history.Event{Process: i + 1, Type: history.Ok, F: history.Acquire, Key: "k", Node: "n1", Token: token})
			time.Sleep(20 * time.Millisecond)
		}
	}()
	first := firstStarts(t, s)
	after := first[Restart] - first[Clock]
	assert.Greater(t, after, 200*time.Millisecond, "after the step, not 20 ms after the clock's launch")
	assert.Less(t, after, 600*time.Millisecond, "right after the step, not a whole gap later")
}

// firstStarts runs s (a clock and a restart) long enough for an edge fault
// to end edgeRoom before the run does, and gives each one's first start.
func firstStarts(t *testing.T, s *Scheduler) map[string]time.Duration {
	t.Helper()
	runFor(t, s, edgeRoom+2*time.Second)
	sched := s.Planned(edgeRoom+2*time.Second, "restart,clock")
	first := map[string]time.Duration{}
	for _, f := range sched.Faults {
		if _, ok := first[f.Nemesis]; !ok && f.Error == "" {
			first[f.Nemesis] = f.Start
		}
	}
	require.Contains(t, first, Clock)
	require.Contains(t, first, Restart)
	return first
}
