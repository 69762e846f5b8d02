// Package analysis is the one pass over a history: it pairs the operations,
// runs the checkers, pairs the faults, names causes, counts and measures, and
// returns one typed result that every report renders.
package analysis

import "github.com/fencecheck/fencecheck/checkers"

// Exit codes of every fencecheck command and of the Go gate API. Release
// gates depend on them; they are defined here and nowhere else.
const (
	ExitValid   = 0
	ExitInvalid = 1
	// ExitUnknown: the checkers could not decide, the run did too little to
	// trust a "valid", or it did not complete. Never folded into valid.
	ExitUnknown = 2
	// ExitCannot: the run could not be carried out (Docker unreachable, image
	// build failed, target did not start).
	ExitCannot = 3
	// ExitUsage: a bad flag, argument, spec or input file.
	ExitUsage = 64
)

// ExitCode maps a verdict to the exit code; anything but valid or invalid is
// unknown.
func ExitCode(v checkers.Verdict) int {
	switch v {
	case checkers.Valid:
		return ExitValid
	case checkers.Invalid:
		return ExitInvalid
	}
	return ExitUnknown
}
