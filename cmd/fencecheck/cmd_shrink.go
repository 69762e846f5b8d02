package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/fencecheck/fencecheck/gate/shrink"
)

func init() {
	d := shrink.Default()
	opts := d
	cmd := &cobra.Command{
		Use:   "shrink [flags] RUN_DIR",
		Short: "Shrink a failing run to the smallest fault schedule that still fails",
		Long: `shrink re-runs a failing (invalid) stored run with smaller fault schedules,
replayed as 'fencecheck test --schedule' does, with the run's own settings and
workload seed: first the faults that began before the first violation, then no
fault at all, then delta debugging over the nemesis kinds and over the faults
left, then shorter faults and a shorter main phase. Real systems are not
deterministic, so each candidate runs up to --tries times and still fails when
at least --need of them are invalid.

It prints one line per candidate and writes RUN_DIR/shrink/: schedule.json (the
smallest failing schedule), summary.txt (in words, with the command that
replays it), summary.json, candidates/ (every schedule tried) and store/ (every
run it made, each a normal run folder). The stored run's report links the
summary. An interrupt (Ctrl-C) stops it and keeps what it found.

Exit codes: 1 a failing schedule was kept, 2 no candidate failed again,
3 the candidates could not be run, 64 usage error (e.g. the run was not invalid).`,
		Example: `  fencecheck test --bug counter-in-memory --seed 1 || fencecheck shrink store/latest
  fencecheck shrink --tries 5 --need 3 --budget 20m store/etcd/20261201T101435.084Z`,
		Args: cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			o := opts
			o.Progress = os.Stderr
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			res, err := shrink.Run(ctx, args[0], o)
			if err != nil {
				return exitWith(res.ExitCode, err)
			}
			return exitWith(res.ExitCode, nil)
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&opts.Tries, "tries", d.Tries, "runs per candidate at most")
	fl.IntVar(&opts.Need, "need", d.Need, "invalid runs of a candidate for it to still fail")
	fl.DurationVar(&opts.Budget, "budget", d.Budget, "time the whole shrink may take; what failed so far is kept")
	fl.IntVar(&opts.Parallel, "parallel", d.Parallel, "tries run at once")
	fl.BoolVar(&opts.Force, "force", false, "replace RUN_DIR/shrink from an earlier shrink")
	rootCmd.AddCommand(cmd)
}
