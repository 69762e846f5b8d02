package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"time"

	"github.com/spf13/cobra"

	"github.com/fencecheck/fencecheck/analysis"
	"github.com/fencecheck/fencecheck/reports"
)

func init() {
	var addr, store string
	cmd := &cobra.Command{
		Use:   "serve [--addr 127.0.0.1:8080] [--store DIR]",
		Short: "Browse the run store: every run with its verdict, report and files",
		Long: `serve lists the runs in the store (newest first, with verdict, target, date and
duration) and serves each run's report and files. It listens on loopback by
default: reports and node logs hold whatever the system under test said, so
exposing them on a network is an explicit choice (--addr 0.0.0.0:8080).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return runServe(addr, store) },
	}
	cmd.Flags().StringVar(&addr, "addr", reports.DefaultAddr, "address to listen on")
	cmd.Flags().StringVar(&store, "store", "store", "run store folder")
	rootCmd.AddCommand(cmd)
}

func runServe(addr, store string) error {
	if fi, err := os.Stat(store); err != nil || !fi.IsDir() {
		return usageErrorf("--store %s: not a folder (run fencecheck test first, or pass --store)", store)
	}
	srv, err := reports.NewServer(store)
	if err != nil {
		return exitWith(analysis.ExitCannot, err)
	}
	defer srv.Close()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return exitWith(analysis.ExitCannot, fmt.Errorf("listen: %w", err))
	}
	if !reports.IsLoopback(addr) {
		fmt.Fprintf(os.Stderr, "warning: serving %s beyond loopback on %s\n", store, addr)
	}
	fmt.Printf("serving %s on http://%s/ (Ctrl-C stops)\n", store, ln.Addr())
	hs := reports.NewHTTPServer(srv)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	go func() {
		<-ctx.Done()
		shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		hs.Shutdown(shut)
	}()
	if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return exitWith(analysis.ExitCannot, err)
	}
	return nil
}
