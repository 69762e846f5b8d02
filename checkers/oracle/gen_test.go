package oracle

import (
	"strings"
	"testing"
)

// A correct resource and issuer, simulated with every effect at a point
// inside its operation's window, give linearizable histories: the oracle
// must find every one valid (no false alarm), and each must be readable.
func TestCorrectSimulationsAreValid(t *testing.T) {
	n := 3000
	if testing.Short() {
		n = 500
	}
	stats := map[string][2]int{}
	for seed := uint64(0); seed < uint64(n); seed++ {
		g := Generate(seed)
		res, err := Check(g.History, g.Sem)
		if err != nil {
			t.Fatalf("seed %d (%s): %v\n%s", seed, g.Label, err, g.History)
		}
		if res.Verdict == TooBig {
			t.Fatalf("seed %d: generator exceeded the bound: %v", seed, res)
		}
		if g.Label == "correct" && res.Verdict != Valid {
			t.Fatalf("seed %d: a correct simulation judged %v (%v)\n%s", seed, res.Verdict, g.Sem, g.History)
		}
		kind, _, _ := strings.Cut(g.Label, "+")
		if strings.Contains(g.Label, "+perturbed") {
			kind += "+perturbed"
		}
		s := stats[kind]
		if res.Verdict == Valid {
			s[0]++
		} else {
			s[1]++
		}
		stats[kind] = s
	}
	valid, invalid := 0, 0
	for k, s := range stats {
		t.Logf("%-32s valid %4d invalid %4d", k, s[0], s[1])
		valid += s[0]
		invalid += s[1]
	}
	t.Logf("total: valid %d, invalid %d", valid, invalid)
}
