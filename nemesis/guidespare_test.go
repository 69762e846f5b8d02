package nemesis

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/history"
)

// fastCrash is restart (or restart-wipe) with short faults, its effects
// kept.
type fastCrash struct{ restart }

func (fastCrash) Timing(*Env) Timing {
	return Timing{QuietMin: 20 * time.Millisecond, QuietMax: 60 * time.Millisecond, FaultMin: 60 * time.Millisecond, FaultMax: 90 * time.Millisecond}
}

// crashesOf runs a guided schedule of two crash nemeses for 3 s on target
// with the given live coverage, and returns the crashes applied, by start.
func crashesOf(t *testing.T, target Cluster, cov map[string]int) []Scheduled {
	t.Helper()
	env := &Env{Target: target, TTL: 40 * time.Millisecond, Coverage: func() map[string]int { return cov }}
	s := NewScheduler(env, history.NewRecorder(&bytes.Buffer{}), 5, []Nemesis{fastCrash{restart{}}, fastCrash{restart{wipe: true}}})
	s.Guide()
	s.guide.lengths = phaseLengths{faultMin: 2 * time.Second, faultMax: 2 * time.Second, calmMargin: 200 * time.Millisecond,
		brief: 300 * time.Millisecond, gapMin: 40 * time.Millisecond, gapMax: 80 * time.Millisecond, spare: time.Second}
	runFor(t, s, 3*time.Second)
	var out []Scheduled
	for _, f := range s.Planned(3*time.Second, "restart,restart-wipe").Faults {
		if f.Error == "" {
			out = append(out, f)
		}
	}
	require.NotEmpty(t, out)
	return out
}

// startedWithin counts the crashes that began within the stretch after the
// first one ended.
func startedWithin(fs []Scheduled, d time.Duration) int {
	n := 0
	for _, f := range fs[1:] {
		if f.Start > fs[0].End() && f.Start < fs[0].End()+d-50*time.Millisecond {
			n++
		}
	}
	return n
}

// Where one node keeps all the state, every crash starts a system's idle
// timers again: once the first crash ended, no other starts for the
// stretch while an idle situation is short (the reference's
// forget-idle-since-start waited 9.5 s for the calm phase after the first
// fault phase's crashes; random found it at 5.0 s).
func TestCrashesSpareTheStretchAfterTheFirst(t *testing.T) {
	short := atTarget(map[string]int{"key-idle-5s-stale": 0, "issuer-restart-regrant": 0, "resource-restart-stale": 0})
	fs := crashesOf(t, members(1), short)
	assert.Zero(t, startedWithin(fs, time.Second), "no crash within 1 s of the first one's end: %+v", fs)
	assert.Greater(t, len(fs), 1, "crashes again after the stretch: %+v", fs)

	// No idle situation short: the crashes follow each other.
	fs = crashesOf(t, members(1), atTarget(map[string]int{"issuer-restart-regrant": 0, "resource-restart-stale": 0}))
	assert.Positive(t, startedWithin(fs, time.Second), "%+v", fs)

	// Two nodes keep state: a crash of one leaves the other's timers.
	fs = crashesOf(t, members(2), short)
	assert.Positive(t, startedWithin(fs, time.Second), "%+v", fs)
}
