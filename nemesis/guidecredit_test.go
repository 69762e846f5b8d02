package nemesis

import (
	"bytes"
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/history"
)

// An aimed fault's situation counts as made from its start until awaitSettle
// after its end, while the live count does not show it: aimed again at
// once, one situation took three or four faults in a row while the others
// waited. Once the count rises above where it was, the credit is gone.
func TestAnAimedSituationCountsAsMadeWhileItSettles(t *testing.T) {
	var g guide
	cov := map[string]int{"issuer-restart-regrant": 1, "resource-restart-stale": 1}
	g.awaiting("issuer-restart-regrant", 1, time.Now().Add(50*time.Millisecond))
	assert.Equal(t, 2, g.credited(cov)["issuer-restart-regrant"])
	assert.Equal(t, 1, g.credited(cov)["resource-restart-stale"])
	assert.Equal(t, 1, cov["issuer-restart-regrant"], "the live count itself is left alone")
	// The count showed it: no credit on top.
	assert.Equal(t, 2, g.credited(map[string]int{"issuer-restart-regrant": 2})["issuer-restart-regrant"])
	assert.Nil(t, g.credited(nil), "no feed, no coverage")
	// Past the settling time, it is short again.
	g.pending[0].until = time.Now().Add(-time.Millisecond)
	assert.Equal(t, 1, g.credited(cov)["issuer-restart-regrant"])
}

// The conductor credits the situation of the fault it started for it, for
// the fault's length and awaitSettle after: the next aim weighs it as made,
// and the other short situation has its turn.
func TestTheNextAimGoesElsewhereWhileAnAimedSituationSettles(t *testing.T) {
	cov := atTarget(map[string]int{"issuer-restart-regrant": 1, "issuer-power-loss-regrant": 2})
	env := &Env{Target: halves{}, Coverage: func() map[string]int { return cov }}
	s := NewScheduler(env, history.NewRecorder(&bytes.Buffer{}), 3, []Nemesis{restart{}, powerLoss{}})
	s.Guide()
	free := []Nemesis{restart{}, powerLoss{}}
	tried := map[string]int{Restart: 1, PowerLoss: 1}
	a, ok := nextFault(env, s.aimCoverage(), free, nil, tried, rand.New(rand.NewPCG(1, 1)))
	require.True(t, ok)
	require.Equal(t, "issuer-restart-regrant", a.situation, a.why)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s.conductOne(ctx, rand.New(rand.NewPCG(1, 2)), a, time.Now().Add(time.Second))
	require.NoError(t, s.Heal(context.Background()))
	seen := map[string]bool{}
	for seed := range uint64(30) {
		b, ok := nextFault(env, s.coverage(), free, nil, tried, rand.New(rand.NewPCG(seed, 1)))
		require.True(t, ok)
		if b.situation == "" {
			continue // an explore turn
		}
		assert.Equal(t, "issuer-restart-regrant", b.situation, "by the live count alone, still the furthest below")
		b, ok = nextFault(env, s.aimCoverage(), free, nil, tried, rand.New(rand.NewPCG(seed, 1)))
		require.True(t, ok)
		seen[b.situation] = true
	}
	assert.True(t, seen["issuer-power-loss-regrant"], "with the restart counted in, the two are level: %v", seen)
}

// In a calm phase held for the idle probes, the clients' faults that would
// spoil a probe's write wait: a delay (its answer times out) and a strip
// (its older token stripped or garbled on the way is no older token). In a
// calm phase held for nothing idle, both run.
func TestAnIdleCalmPhaseHoldsTheFaultsThatSpoilProbes(t *testing.T) {
	assert.True(t, spoilsProbes(strip{}))
	assert.True(t, spoilsProbes(delay{}))
	assert.False(t, spoilsProbes(clock{}))
	var g guide
	g.set(true, time.Now().Add(time.Minute))
	g.forIdle(true)
	for _, n := range []Nemesis{strip{}, delay{}} {
		_, ok := g.clientWindow(spoilsProbes(n))
		assert.False(t, ok, "%s waits in an idle calm phase", n.Name())
	}
	_, ok := g.clientWindow(false)
	assert.True(t, ok, "a fault that spoils no probe runs")
	g.forIdle(false)
	_, ok = g.clientWindow(spoilsProbes(strip{}))
	assert.True(t, ok, "a brief calm phase holds nothing back")
}
