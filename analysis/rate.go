package analysis

import "math"

// Repeated runs (`fencecheck test --repeat N`) end with how often they found
// a violation, and one exit code for them all.

// Rate is how many of N runs were invalid (K), with the 95 % Wilson score
// interval of the true rate: unlike K/N ± a normal error it stays inside
// [0, 1] and is honest at 0 of 10 or 10 of 10, where the runs of a
// detection matrix mostly are.
type Rate struct {
	K, N      int
	Low, High float64
}

// wilsonZ is the normal quantile of a two-sided 95 % interval.
const wilsonZ = 1.959963984540054

// DetectionRate is the rate of k invalid runs out of n.
func DetectionRate(k, n int) Rate {
	r := Rate{K: k, N: n, High: 1}
	if n <= 0 {
		return r
	}
	p, nf, z2 := float64(k)/float64(n), float64(n), wilsonZ*wilsonZ
	denom := 1 + z2/nf
	center := (p + z2/(2*nf)) / denom
	half := wilsonZ * math.Sqrt(p*(1-p)/nf+z2/(4*nf*nf)) / denom
	r.Low, r.High = max(center-half, 0), min(center+half, 1)
	return r
}

// exitSeverity orders the exit codes of runs, worst first: a violation
// found is the answer a release gate most needs, whatever else happened; a
// run that could not be carried out left the gate without an answer; an
// unknown one ran but proved nothing; valid is the only pass. A usage
// error is not a run's outcome: every run of one config gets it.
var exitSeverity = []int{ExitInvalid, ExitCannot, ExitUnknown, ExitValid}

// WorstExit is the worst of the exit codes of several runs (exitSeverity):
// invalid 1, then could not run 3, then unknown 2, then valid 0; no codes
// is valid.
func WorstExit(codes ...int) int {
	for _, worst := range exitSeverity {
		for _, c := range codes {
			if c == worst {
				return c
			}
		}
	}
	return ExitValid
}
