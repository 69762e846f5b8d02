package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/fencecheck/fencecheck/harness"
	"github.com/fencecheck/fencecheck/nemesis"
	"github.com/fencecheck/fencecheck/targets"
)

type testFlags struct {
	cfg     harness.Config
	bugs    []string
	sealKey string
	seed    int64
	quiet   bool
	junit   string
}

func init() {
	f := &testFlags{}
	cmd := &cobra.Command{
		Use:   "test",
		Short: "Run a fault-injected test against a fencing target and check its history",
		Long: `test runs one fault-injected test: setup -> main phase (workload + nemeses)
-> heal -> recovery -> final reads -> check, and stores everything under
STORE/<target>/<timestamp>/ (history.jsonl, config.json, results.json,
report.html, Porcupine visualizations, junit.xml, node logs).

Targets: ` + strings.Join(targets.Names(), ", ") + `, spec:FILE.
Exit codes: 0 valid, 1 invalid, 2 unknown, 3 could not run, 64 usage error.`,
		Example: `  fencecheck test --target memory --time 30s --nemesis pause,restart --seed 7
  fencecheck test --target memory --bug accept-equal --nemesis all
  fencecheck test --target etcd --nemesis partition`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runTest(cmd, f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.cfg.Target, "target", "memory", "target to test: "+strings.Join(targets.Names(), ", ")+", or spec:FILE")
	fl.DurationVar(&f.cfg.Time, "time", 30*time.Second, "length of the main phase")
	fl.IntVar(&f.cfg.Concurrency, "concurrency", 5, "writer clients")
	fl.IntVar(&f.cfg.Keys, "keys", 3, "locks/resource keys the clients share")
	fl.IntVar(&f.cfg.Readers, "readers", 2, "extra clients that only read")
	fl.DurationVar(&f.cfg.TTL, "ttl", time.Second, "lease the clients ask for")
	fl.DurationVar(&f.cfg.OpTimeout, "op-timeout", time.Second, "per-request timeout; a request past it is recorded as info")
	fl.StringVar(&f.cfg.Nemesis, "nemesis", "all", "comma-separated nemeses ("+strings.Join(nemesis.Names(), ", ")+"), 'all' (every one that applies, except restart-wipe) or 'none'")
	fl.Int64Var(&f.seed, "seed", 0, "seed for the workload and the fault schedule (0: from the clock; printed so the run can be reproduced)")
	fl.StringVar(&f.cfg.Store, "store", "store", "run store folder")
	fl.StringSliceVar(&f.bugs, "bug", nil, "memory reference bug switch(es) to turn on (see 'fencecheck reference --help')")
	fl.StringVar(&f.sealKey, "seal-key", "", "memory reference: authenticate tokens with this HMAC key")
	fl.BoolVar(&f.cfg.Forge, "forge", false, "add the forge workload: writes with tokens no issuer signed")
	fl.StringVar(&f.cfg.Checker, "checker", "both", "checker: fast, porcupine or both")
	fl.DurationVar(&f.cfg.CheckTimeout, "check-timeout", 30*time.Second, "time Porcupine may search, per model")
	fl.IntVar(&f.cfg.MinOps, "min-ops", 10, "fewest ok operations for a verdict other than unknown")
	fl.StringVar(&f.junit, "junit", "", "also write the JUnit XML file here")
	fl.BoolVarP(&f.quiet, "quiet", "q", false, "no progress lines")
	rootCmd.AddCommand(cmd)
}

func runTest(cmd *cobra.Command, f *testFlags) error {
	cfg := f.cfg
	if f.seed == 0 {
		f.seed = time.Now().UnixNano() & 0x7fffffff
	}
	if f.seed < 0 {
		return usageErrorf("--seed must be >= 0")
	}
	cfg.Seed = uint64(f.seed)
	if err := cfg.Validate(); err != nil {
		return usageErrorf("%v", err)
	}
	cfg.Command = reproduce(cmd, f.seed)
	cfg.Options = map[string]any{}
	if len(f.bugs) > 0 {
		cfg.Options["bugs"] = f.bugs
	}
	if f.sealKey != "" {
		cfg.Options["sealed"] = true
	}
	cfg.Log = os.Stderr
	if !f.quiet {
		cfg.Progress = os.Stderr
	}
	target, err := targets.New(cfg.Target, targets.Options{Bugs: f.bugs, SealKey: f.sealKey, Log: os.Stderr})
	if err != nil {
		return usageErrorf("%v", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fmt.Fprintf(os.Stderr, "fencecheck: seed %d; reproduce with: %s\n", f.seed, strings.Join(cfg.Command, " "))
	run, err := harness.Execute(ctx, cfg, target)
	if err != nil {
		if errors.Is(err, harness.ErrCannotRun) {
			return exitWith(ExitCannot, err)
		}
		return usageErrorf("%v", err)
	}
	return finishRun(ctx, run, target, f.junit)
}

// reproduce is the command line that repeats this run: every setting,
// defaults included (defaults may change between versions), and the seed.
func reproduce(cmd *cobra.Command, seed int64) []string {
	out := []string{"fencecheck", "test"}
	cmd.Flags().VisitAll(func(fl *pflag.Flag) {
		switch fl.Name {
		case "seed", "quiet", "junit", "help":
			return
		}
		v := fl.Value.String()
		if sv, ok := fl.Value.(pflag.SliceValue); ok {
			if len(sv.GetSlice()) == 0 {
				return
			}
			v = strings.Join(sv.GetSlice(), ",")
		}
		if v == "" && fl.Value.Type() == "string" {
			return
		}
		out = append(out, "--"+fl.Name+"="+v)
	})
	return append(out, fmt.Sprintf("--seed=%d", seed))
}
