package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/fencecheck/fencecheck/analysis"
	"github.com/fencecheck/fencecheck/targets/memory"
)

func init() {
	var addr, data, sealKey string
	var bugs []string
	var names []string
	for _, b := range memory.AllBugs() {
		names = append(names, string(b))
	}
	cmd := &cobra.Command{
		Use:   "reference --addr 127.0.0.1:PORT --data DIR",
		Short: "Run the reference fencing server (Fencing API v1) as a standalone process",
		Long: `reference serves Fencing API v1 (fencing/PROTOCOL.md) from a durable store in
--data: every change is fsynced before it is answered, so a kill -9 loses
nothing acknowledged. With --bug it breaks one rule on purpose, to prove a
checker catches it. Bugs: ` + strings.Join(names, ", ") + `.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if data == "" {
				return usageErrorf("--data is required")
			}
			bs, err := memory.ParseBugs(bugs...)
			if err != nil {
				return usageErrorf("%v", err)
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			fmt.Fprintf(os.Stderr, "reference: serving Fencing API v1 on http://%s (data %s)\n", addr, data)
			if err := memory.Serve(ctx, memory.Config{Name: "reference", Dir: data, Addr: addr,
				SealKey: []byte(sealKey), Bugs: bs, Log: os.Stderr}); err != nil {
				return exitWith(analysis.ExitCannot, err)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&addr, "addr", "127.0.0.1:7070", "address to listen on")
	cmd.Flags().StringVar(&data, "data", "", "data directory (created if missing)")
	cmd.Flags().StringVar(&sealKey, "seal-key", "", "seal tokens with this HMAC key and verify seals (403 on forgery)")
	cmd.Flags().StringSliceVar(&bugs, "bug", nil, "bug switch(es) to turn on: "+strings.Join(names, ", "))
	rootCmd.AddCommand(cmd)
}
