// Command matrix runs the detection matrix: every seeded bug of the memory
// reference under --nemesis all over N seeds, and the correct reference over
// the same seeds, each run a separate `fencecheck test` process. It writes
// docs/detection.md: in how many runs each bug was found, how soon, with
// which anomalies, and how many false alarms the correct reference raised.
//
//	go build -o bin/fencecheck ./cmd/fencecheck
//	go run ./cmd/matrix --fencecheck bin/fencecheck --seeds 20 --time 30s --parallel 2
//
// `make matrix` (scripts/matrix.mk) does both, with SEEDS, TIME and PARALLEL
// overrides. With --shrink it measures `fencecheck shrink` instead (`make
// shrink-matrix`): for every bug, a failing run shrunk to what it needs.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/fencecheck/fencecheck/durable"
)

func main() {
	var cfg Config
	var rows string
	flag.StringVar(&cfg.Fencecheck, "fencecheck", "bin/fencecheck", "the fencecheck binary to run")
	flag.IntVar(&cfg.Seeds, "seeds", 20, "seeds per row (1..N, offset by --first-seed)")
	flag.Uint64Var(&cfg.FirstSeed, "first-seed", 1, "first seed")
	flag.DurationVar(&cfg.Time, "time", 30*time.Second, "main phase of each run")
	flag.IntVar(&cfg.Parallel, "parallel", 2, "runs at a time")
	flag.StringVar(&cfg.Nemesis, "nemesis", "all", "nemeses of every run")
	flag.StringVar(&cfg.Store, "store", "", "run store (default: a temporary folder, removed unless --keep)")
	flag.BoolVar(&cfg.Keep, "keep", false, "keep the run store")
	flag.StringVar(&rows, "rows", "", "comma-separated rows to run (default: every bug and the correct reference)")
	flag.StringVar(&cfg.Out, "out", "docs/detection.md", "where to write the table ('-' for stdout)")
	flag.StringVar(&cfg.Command, "command", "", "the command to print as the one that regenerated the table (default: this command line)")
	shrinkMode := flag.Bool("shrink", false, "instead of the matrix: for every bug, shrink a failing run (fencecheck shrink) and write the table of what was left into --out's shrinking section")
	flag.DurationVar(&cfg.Budget, "budget", 10*time.Minute, "with --shrink: fencecheck shrink's --budget")
	flag.Parse()
	if flag.NArg() > 0 || cfg.Seeds < 1 || cfg.Parallel < 1 || cfg.Time <= 0 {
		flag.Usage()
		os.Exit(64)
	}
	if rows != "" {
		for _, r := range strings.Split(rows, ",") {
			cfg.Rows = append(cfg.Rows, strings.TrimSpace(r))
		}
	}
	if cfg.Command == "" {
		cfg.Command = strings.Join(append([]string{"go run ./cmd/matrix"}, os.Args[1:]...), " ")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *shrinkMode {
		os.Exit(runShrinks(ctx, cfg))
	}
	m, err := Run(ctx, cfg, os.Stderr)
	if err != nil && m == nil {
		fmt.Fprintln(os.Stderr, "matrix:", err)
		os.Exit(3)
	}
	if err != nil {
		// Interrupted: the runs so far are still worth a table.
		fmt.Fprintln(os.Stderr, "matrix: interrupted; writing the runs done so far")
		m.Interrupted = true
	}
	md := m.Markdown()
	if old, err := os.ReadFile(cfg.Out); err == nil && cfg.Out != "-" {
		if i := strings.Index(string(old), shrinkHeading); i >= 0 {
			md = splice(md, string(old[i:])) // the shrink table is --shrink's
		}
	}
	if cfg.Out == "-" {
		fmt.Print(md)
	} else if err := durable.WriteFile(cfg.Out, []byte(md), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "matrix:", err)
		os.Exit(3)
	} else {
		fmt.Fprintf(os.Stderr, "matrix: wrote %s\n", cfg.Out)
	}
	if !m.Passed() {
		os.Exit(1)
	}
}
