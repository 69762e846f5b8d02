package fast

import (
	"testing"
)

// FuzzCrossValidate: go test ./checkers -run '^$' -fuzz=FuzzCrossValidate.
// The seed picks a simulated (possibly buggy, possibly mutated) history;
// non-empty data instead drives the chaos generator byte by byte, so
// coverage guidance shapes the history directly. Any disagreement between
// the fast checker and Porcupine is a bug.
func FuzzCrossValidate(f *testing.F) {
	for seed := uint64(1); seed <= 8; seed++ {
		f.Add(seed, []byte(nil))
	}
	f.Add(uint64(0), []byte{5, 1, 3, 0, 2, 9, 4, 1, 7, 0, 3, 3, 2, 8, 1, 0, 5, 2, 2, 6})
	f.Fuzz(func(t *testing.T, seed uint64, data []byte) {
		st := newCVStats()
		if len(data) > 0 {
			events, sem := cvChaosHistory(&cvBytes{b: data})
			cvCheckOne(t, events, sem, "chaos bytes", true, st)
			return
		}
		events, sem, desc := cvRandomHistory(seed)
		cvCheckOne(t, events, sem, desc, true, st)
	})
}
