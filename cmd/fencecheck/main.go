// Command fencecheck runs fault-injection tests against fencing-token
// implementations and checks the recorded histories for linearizability.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/fencecheck/fencecheck/analysis"
	"github.com/fencecheck/fencecheck/history"
)

// exitError carries an exit code up to main.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// exitWith wraps err so main exits with code.
func exitWith(code int, err error) error { return &exitError{code: code, err: err} }

// usageErrorf is a bad flag, argument or input file: exit 64.
func usageErrorf(format string, args ...any) error {
	return exitWith(analysis.ExitUsage, fmt.Errorf(format, args...))
}

// rootCmd is the fencecheck command; each subcommand registers itself from
// its own file's init.
var rootCmd = &cobra.Command{
	Use:   "fencecheck",
	Short: "Fault-injection tests and a linearizability checker for fencing tokens",
	Long: `fencecheck drives a fencing-token implementation (lock service + token-checking
resource) with concurrent clients while nemeses inject faults, records every
operation, and checks the history with Porcupine and a specialised checker.

Exit codes: 0 valid, 1 invalid, 2 unknown, 3 could not run, 64 usage error.`,
	SilenceUsage:  true,
	SilenceErrors: true,
}

func main() {
	rootCmd.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return exitWith(analysis.ExitUsage, fmt.Errorf("%w\nSee '%s --help'.", err, c.CommandPath()))
	})
	err := rootCmd.Execute()
	if err == nil {
		os.Exit(analysis.ExitValid)
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil && ee.code != analysis.ExitValid {
			fmt.Fprintln(os.Stderr, "fencecheck:", history.PrintableLines(ee.err.Error()))
		}
		os.Exit(ee.code)
	}
	// Cobra's own argument errors (unknown command, wrong arg count) are usage errors.
	fmt.Fprintln(os.Stderr, "fencecheck:", history.PrintableLines(err.Error()))
	os.Exit(analysis.ExitUsage)
}
