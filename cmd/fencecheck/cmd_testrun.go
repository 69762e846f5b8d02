package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/fencecheck/fencecheck/gate"
	"github.com/fencecheck/fencecheck/harness"
	"github.com/fencecheck/fencecheck/history"
	"github.com/fencecheck/fencecheck/targets"
)

// testFlags are test's flags: one per setting of the run (harness.Config's
// own flags), and --quiet.
type testFlags struct {
	cfg   harness.Config
	quiet bool
	// repeat runs the config that many times, seeds one after another
	// (cmd_repeat.go); failFast stops at the first invalid run.
	repeat   int
	failFast bool
}

func init() {
	cmd, f := newTestCmd()
	cmd.RunE = func(c *cobra.Command, _ []string) error {
		if err := refuseZeros(c.Flags()); err != nil {
			return err
		}
		if err := replayFlags(c, f); err != nil {
			return err
		}
		if f.repeat < 1 {
			return usageErrorf("--repeat must be 1 or more, got %d", f.repeat)
		}
		if f.repeat > 1 {
			return runRepeat(f)
		}
		return runTest(f)
	}
	rootCmd.AddCommand(cmd)
}

// newTestCmd is the test command with its flags bound to a fresh testFlags.
func newTestCmd() (*cobra.Command, *testFlags) {
	f := &testFlags{}
	cmd := &cobra.Command{
		Use:   "test",
		Short: "Run a fault-injected test against a fencing target and check its history",
		Long: `test runs one fault-injected test: setup -> main phase (workload + nemeses)
-> heal -> recovery -> final reads -> check, and stores everything under
STORE/<target>/<timestamp>/ (history.jsonl, config.json, results.json,
report.html, Porcupine visualizations, junit.xml, node logs). Its first line
is the command that repeats the run: every setting, the seed included.

Ctrl-C (or SIGTERM) cuts the run short: faults are healed, the final reads
made, the history checked and every report written; the verdict is then at
best unknown. A second Ctrl-C tears down at once (exit 3, no report).

With --repeat N it runs N times, seeds one after another (each its own run
folder and report), stops at the first invalid run with --fail-fast (and
after the run an interrupt cut short), and ends with every verdict, the
detection rate with its 95% Wilson interval, and the reproduce line of each
run that did not pass. Its exit code is the worst verdict: invalid (1), then
could not run (3), then unknown (2), then valid (0).

Targets: ` + strings.Join(targets.Names(), ", ") + `, spec:FILE.
Exit codes: 0 valid, 1 invalid, 2 unknown, 3 could not run, 64 usage error.`,
		Example: `  fencecheck test --target memory --time 30s --nemesis pause,restart --seed 7
  fencecheck test --target memory --bug accept-equal --nemesis all
  fencecheck test --target etcd --nemesis partition
  fencecheck test --target memory --bug counter-in-memory --seed 7 --schedule store/latest/shrink/schedule.json
  fencecheck test --target memory --bug highwater-no-fsync --repeat 10 --time 20s`,
		Args: cobra.NoArgs,
	}
	fl := cmd.Flags()
	bindSettings(fl, &f.cfg)
	fl.Lookup("target").Usage = "target to test: " + strings.Join(targets.Names(), ", ") + ", or spec:FILE"
	fl.BoolVarP(&f.quiet, "quiet", "q", false, "no progress lines")
	fl.IntVar(&f.repeat, "repeat", 1, "run N times, seeds one after another from --seed (drawn once when not given), and end with every verdict, the detection rate with its 95% Wilson interval and the reproduce line of each run that did not pass; exit code: the worst verdict (invalid 1, then could not run 3, then unknown 2, then valid 0)")
	fl.BoolVar(&f.failFast, "fail-fast", false, "with --repeat: stop at the first invalid run")
	return cmd, f
}

// zeroTakesDefault are test's flags whose zero in a Config means "the
// default": given as 0 on the command line, they would silently run the
// default (--time 0s ran 30 s), so they are refused.
var zeroTakesDefault = []string{"time", "concurrency", "keys", "ttl", "op-timeout", "recovery", "check-timeout"}

// refuseZeros is a usage error for each flag of zeroTakesDefault given as
// zero.
func refuseZeros(fl *pflag.FlagSet) error {
	var bad []string
	for _, name := range zeroTakesDefault {
		f := fl.Lookup(name)
		if f == nil || !fl.Changed(name) {
			continue
		}
		zero := f.Value.String() == "0"
		if d, err := fl.GetDuration(name); err == nil {
			zero = d == 0
		}
		if zero {
			bad = append(bad, fmt.Sprintf("--%s %s: must be positive (leave the flag out for its default, %s)", name, f.Value, f.DefValue))
		}
	}
	if len(bad) > 0 {
		return usageErrorf("%s", strings.Join(bad, "\n"))
	}
	return nil
}

// bindSettings defines one flag per setting of a run (harness.Config's
// Settings) on fl, bound to c, with the values of harness.Default (c is set
// to them): the one place flags are bound to a run's config.
func bindSettings(fl *pflag.FlagSet, c *harness.Config) {
	*c = harness.Default()
	for _, s := range c.Settings() {
		switch v := s.Value.(type) {
		case *string:
			fl.StringVar(v, s.Name, *v, s.Usage)
		case *[]string:
			fl.StringSliceVar(v, s.Name, *v, s.Usage)
		case *time.Duration:
			fl.DurationVar(v, s.Name, *v, s.Usage)
		case *int:
			fl.IntVar(v, s.Name, *v, s.Usage)
		case *uint64:
			fl.Uint64Var(v, s.Name, *v, s.Usage)
		case *bool:
			fl.BoolVar(v, s.Name, *v, s.Usage)
		case harness.FlagValue:
			fl.Var(v, s.Name, s.Usage)
		default:
			panic(fmt.Sprintf("setting --%s: no flag for a %T", s.Name, s.Value))
		}
	}
}

// replayFlags applies what --schedule means for the other flags: the
// schedule names its nemeses (so --nemesis beside it is a mistake), and
// without --time the main phase is the schedule's.
func replayFlags(c *cobra.Command, f *testFlags) error {
	if f.cfg.Schedule == "" {
		return nil
	}
	if c.Flags().Changed("nemesis") {
		return usageErrorf("--nemesis and --schedule exclude each other: a schedule names its own nemeses")
	}
	if !c.Flags().Changed("time") {
		f.cfg.Time = 0 // the schedule's main phase
	}
	return nil
}

// runTest is gate.Run, the one run path, with the summary printed.
func runTest(f *testFlags) error {
	cfg := f.cfg
	// Log lines carry the system's answers (a recovery's last answer, a
	// node's log tail): escaped for the terminal.
	cfg.Log = history.NewPrintableWriter(os.Stderr)
	if !f.quiet {
		cfg.Progress = os.Stderr // its line is escaped (harness/progress.go)
	}
	ctx, abort, stop := interrupts(os.Stderr)
	defer stop()
	cfg.Abort = abort
	res, err := gate.Run(ctx, cfg)
	if err != nil {
		return exitWith(res.ExitCode, err)
	}
	printSummary(os.Stdout, res.Checked.Result, res.Dir)
	return exitWith(res.ExitCode, nil)
}

// interrupts is the run's signal behaviour. The first SIGINT or SIGTERM
// cancels ctx: the main phase stops, and the run heals, makes its final
// reads, checks and writes every report, marked as cut short (its verdict
// is then at best unknown). The second closes abort: the target is torn
// down at once, with no check or report (exit 3). stop ends the handling.
func interrupts(log io.Writer) (ctx context.Context, abort <-chan struct{}, stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	ab := make(chan struct{})
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		n := 0
		for {
			select {
			case <-done:
				return
			case sig := <-sigs:
				n++
				switch n {
				case 1:
					fmt.Fprintf(log, "fencecheck: %s: cutting the run short (heal, final reads, check, report); interrupt again to tear down at once\n", sig)
					cancel()
				case 2:
					fmt.Fprintf(log, "fencecheck: %s again: tearing down at once, no report\n", sig)
					close(ab)
				}
			}
		}
	}()
	return ctx, ab, func() {
		signal.Stop(sigs)
		close(done)
		cancel()
	}
}
