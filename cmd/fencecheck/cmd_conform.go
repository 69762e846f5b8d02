package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/fencecheck/fencecheck/analysis"
	"github.com/fencecheck/fencecheck/gate"
	"github.com/fencecheck/fencecheck/history"
	"github.com/fencecheck/fencecheck/targets"
	"github.com/fencecheck/fencecheck/targets/conform"
)

type conformFlags struct {
	target  string
	bugs    []string
	sealKey string
	keep    bool
	timeout time.Duration
}

func init() {
	f := &conformFlags{}
	cmd := &cobra.Command{
		Use:   "conform",
		Short: "Check that a target speaks Fencing API v1 (the preflight before a fault run)",
		Long: `conform starts the target, speaks Fencing API v1 to every node and checks each
answer against the contract: every endpoint and its status codes, stale and
equal tokens rejected with 409 and high_water, a missing token 428, a malformed
one 400, Fencing-Token on reads, 404 for a key never written, name rules, and
JSON error bodies. Each deviation is printed in words. 'test' runs the same
preflight before a spec target's fault run and stops with exit 3 when it fails.

Exit codes: 0 conformant, 1 deviations found, 3 the target could not be
started, 64 usage error.`,
		Example: `  fencecheck conform --target spec:examples/python-fence/spec.json
  fencecheck conform --target memory --bug accept-equal`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runConform(f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.target, "target", "memory", "target to check: "+strings.Join(targets.Names(), ", ")+", or spec:FILE")
	fl.StringSliceVar(&f.bugs, "bug", nil, "memory reference bug switch(es) to turn on")
	fl.StringVar(&f.sealKey, "seal-key", "", "memory reference: authenticate tokens with this HMAC key")
	fl.BoolVar(&f.keep, "keep", false, "keep the folder with the nodes' logs and data")
	fl.DurationVar(&f.timeout, "timeout", conform.DefaultTimeout, "per-request timeout")
	rootCmd.AddCommand(cmd)
}

func runConform(f *conformFlags) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, dir, err := gate.Conform(ctx, gate.ConformConfig{Target: f.target, Bugs: f.bugs, SealKey: f.sealKey,
		Keep: f.keep, Timeout: f.timeout, Log: history.NewPrintableWriter(os.Stderr), Progress: os.Stderr})
	if err != nil {
		if gate.IsUsage(err) {
			return usageErrorf("%v", err)
		}
		return exitWith(analysis.ExitCannot, err)
	}
	fmt.Fprintf(os.Stdout, "conformance of %s to Fencing API v1:\n", f.target)
	rep.Print(history.NewPrintableWriter(os.Stdout)) // deviations quote the system's answers
	if dir != "" {
		fmt.Fprintf(os.Stdout, "node logs: %s\n", dir)
	}
	if !rep.Conformant() {
		return exitWith(analysis.ExitInvalid, nil)
	}
	return nil
}
