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
//
// Past one machine, --shard I/N runs the I-th of N parts of the runs and
// writes their results (--results FILE, JSON) instead of the table, and
// --merge FILE... checks that the parts make one matrix, each run once, and
// writes the table an unsharded run writes (docs/scaling.md).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/fencecheck/fencecheck/durable"
)

const usageText = `Usage:
  go run ./cmd/matrix [flags]                   the whole matrix: every run, the table into --out
  go run ./cmd/matrix --shard I/N [flags]       the I-th of N parts of the runs: their results into --results
  go run ./cmd/matrix --merge [flags] FILE...   the N parts' results files: the table into --out
  go run ./cmd/matrix --shrink [flags]          for every bug, a failing run shrunk: the shrinking section of --out
  go run ./cmd/matrix --track-record [flags]    the track record: real systems at real releases, into docs/track-record.md
  go run ./cmd/matrix --compare GUIDED RANDOM   two matrices' results files, --nemesis-mode guided and random: side by side into docs/guided-vs-random.md

Every run is one 'fencecheck test' process. --shard splits the list of runs
(rows x seeds, seed by seed and row by row) into N contiguous parts of about
equal size: N machines or CI jobs with --shard 1/N ... N/N together run every
run once. A shard writes no table; --merge reads every shard's file, checks
they are one matrix (rows and their arguments, seeds, time, nemesis,
fencecheck's build), each shard once and each run once, and writes the same
table an unsharded run of those results writes. Merging an unsharded run's own
--results file writes its table again.

Exit codes: 0 the matrix meets the bar (a shard: every run of its part done
and its results written), 1 it does not, 3 could not run (or a merge refused
its files: the message names the file or shard), 64 usage error.

Flags:
`

// options is the command line.
type options struct {
	cfg     Config
	shrink  bool
	merge   bool
	compare bool
	files   []string // --merge's results files
	results string
}

// errUsage is a usage error the flag package has already printed.
var errUsage = errors.New("usage error")

// parseFlags reads the command line; an error is a usage error (exit 64).
func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	cfg := &o.cfg
	var rows, shard string
	fs := flag.NewFlagSet("matrix", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usageText)
		fs.PrintDefaults()
	}
	fs.StringVar(&cfg.Fencecheck, "fencecheck", "bin/fencecheck", "the fencecheck binary to run")
	fs.IntVar(&cfg.Seeds, "seeds", 20, "seeds per row (1..N, offset by --first-seed)")
	fs.Uint64Var(&cfg.FirstSeed, "first-seed", 1, "first seed")
	fs.DurationVar(&cfg.Time, "time", 30*time.Second, "main phase of each run")
	fs.IntVar(&cfg.Parallel, "parallel", 2, "runs at a time")
	fs.StringVar(&cfg.Nemesis, "nemesis", "all", "nemeses of every run")
	fs.StringVar(&cfg.NemesisMode, "nemesis-mode", "", "every run's --nemesis-mode: guided or random (default: fencecheck's, guided for all)")
	fs.BoolVar(&o.compare, "compare", false, "instead of running: read two results files given as arguments (a matrix run with --nemesis-mode guided, then the same with random) and write them side by side into --out (default docs/guided-vs-random.md)")
	fs.StringVar(&cfg.Store, "store", "", "run store (default: a temporary folder, removed unless --keep)")
	fs.BoolVar(&cfg.Keep, "keep", false, "keep the run store")
	fs.StringVar(&rows, "rows", "", "comma-separated rows to run (default: every bug and the correct reference); 'user-path' names the bugs run as external servers, 'situations' the targets whose failure situations are counted (--compare tables them per minute)")
	fs.StringVar(&cfg.Out, "out", "docs/detection.md", "where to write the table ('-' for stdout); not with --shard")
	fs.StringVar(&cfg.Command, "command", "", "the command to print as the one that regenerated the table (default: this command line)")
	fs.StringVar(&shard, "shard", "", "run only part I of N of the runs (`I/N`: 1 <= I <= N) and write their results to --results instead of the table")
	fs.StringVar(&o.results, "results", "", "write the runs' results (JSON, the input of --merge) to `FILE` (default with --shard: matrix-shard-I-of-N.json; without: none)")
	fs.BoolVar(&o.merge, "merge", false, "instead of running: read the results files given as arguments (every shard's, or an unsharded run's) and write their table")
	fs.BoolVar(&o.shrink, "shrink", false, "instead of the matrix: for every bug, shrink a failing run (fencecheck shrink) and write the table of what was left into --out's shrinking section")
	fs.BoolVar(&cfg.Track, "track-record", false, "instead of the matrix: the track record's rows (real systems at real releases, published bugs and their correct counterparts) into --out (default docs/track-record.md); exit 1 when a row's verdict changed")
	fs.DurationVar(&cfg.Budget, "budget", 10*time.Minute, "with --shrink: fencecheck shrink's --budget")
	// Flags may follow the files: `--merge a.json b.json --out -`.
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if err == flag.ErrHelp {
				return o, err
			}
			return o, errUsage
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	switch {
	case cfg.NemesisMode != "" && cfg.NemesisMode != "guided" && cfg.NemesisMode != "random":
		return o, fmt.Errorf("--nemesis-mode must be guided or random, got %q", cfg.NemesisMode)
	case o.compare && (o.merge || o.shrink || cfg.Track || set["shard"] || set["results"]):
		return o, errors.New("--compare reads two results files: no --merge, --shrink, --track-record, --shard or --results")
	case o.compare && len(pos) != 2:
		return o, fmt.Errorf("--compare: name two results files, the guided matrix's then the random one's (got %d)", len(pos))
	case o.merge && o.shrink:
		return o, errors.New("--merge and --shrink: one at a time")
	case o.merge && set["shard"]:
		return o, errors.New("--merge takes the shards' files, not --shard")
	case o.merge && len(pos) == 0:
		return o, errors.New("--merge: name the results files (e.g. --merge shard-*.json)")
	case !o.merge && !o.compare && len(pos) > 0:
		return o, fmt.Errorf("unexpected argument %q (results files go with --merge)", pos[0])
	case o.shrink && (set["shard"] || set["results"]):
		return o, errors.New("--shrink runs on one machine: no --shard or --results")
	case cfg.Track && (o.merge || o.shrink || set["shard"] || set["results"]):
		return o, errors.New("--track-record runs on one machine: no --merge, --shrink, --shard or --results")
	case cfg.Seeds < 1 || cfg.Parallel < 1 || cfg.Time <= 0:
		return o, errors.New("--seeds and --parallel must be at least 1, --time above 0")
	}
	if o.merge {
		for _, f := range []string{"fencecheck", "seeds", "first-seed", "time", "parallel", "nemesis", "store", "keep", "rows", "results", "budget"} {
			if set[f] {
				return o, fmt.Errorf("--merge takes the matrix from its files: --%s does not apply", f)
			}
		}
		o.files = pos
	}
	if shard != "" {
		s, err := parseShard(shard)
		if err != nil {
			return o, err
		}
		if set["out"] {
			return o, fmt.Errorf("--shard %s writes its results (--results), not the table: merge every shard's with --merge --out %s", s, cfg.Out)
		}
		cfg.Shard = s
		if o.results == "" {
			o.results = fmt.Sprintf("matrix-shard-%d-of-%d.json", s.I, s.N)
		}
	}
	if o.compare {
		o.files = pos
		if !set["out"] {
			cfg.Out = "docs/guided-vs-random.md"
		}
	}
	if cfg.Track && !set["out"] {
		cfg.Out = "docs/track-record.md"
	}
	if rows != "" {
		for _, r := range strings.Split(rows, ",") {
			cfg.Rows = append(cfg.Rows, strings.TrimSpace(r))
		}
	}
	if cfg.Command == "" {
		cfg.Command = strings.Join(append([]string{"go run ./cmd/matrix"}, os.Args[1:]...), " ")
	}
	return o, nil
}

func main() {
	o, err := parseFlags(os.Args[1:], os.Stderr)
	switch {
	case err == flag.ErrHelp:
		os.Exit(0)
	case err == errUsage:
		os.Exit(64)
	case err != nil:
		fmt.Fprintf(os.Stderr, "matrix: %v\nSee 'go run ./cmd/matrix --help'.\n", err)
		os.Exit(64)
	}
	cfg := o.cfg
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if o.shrink {
		os.Exit(runShrinks(ctx, cfg))
	}
	if o.compare {
		g, r, err := Compare(o.files[0], o.files[1])
		if err != nil {
			fmt.Fprintln(os.Stderr, "matrix:", err)
			os.Exit(3)
		}
		md, passed := CompareMarkdown(g, r, cfg.Command)
		if err := writeOut(cfg.Out, md); err != nil {
			fmt.Fprintln(os.Stderr, "matrix:", err)
			os.Exit(3)
		}
		if !passed {
			os.Exit(1)
		}
		os.Exit(0)
	}
	if o.merge {
		m, err := Merge(o.files)
		if err != nil {
			fmt.Fprintln(os.Stderr, "matrix:", err)
			os.Exit(3)
		}
		if len(m.Parts) > 0 {
			m.Config.Command = cfg.Command // an unsharded file keeps its own
		}
		fmt.Fprintf(os.Stderr, "matrix: merged %d results files: %d rows x %d seeds\n", len(o.files), len(m.Rows), m.Config.Seeds)
		os.Exit(writeTable(cfg.Out, m))
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
	if o.results != "" {
		f := m.Results(fencecheckBuild(cfg.Fencecheck))
		if err := writeResults(o.results, f); err != nil {
			fmt.Fprintln(os.Stderr, "matrix:", err)
			os.Exit(3)
		}
		fmt.Fprintf(os.Stderr, "matrix: wrote the results of %d runs (shard %d/%d) to %s\n", len(f.Runs), f.Shard.Index, f.Shard.Of, o.results)
	}
	if cfg.Track {
		os.Exit(writeTrackRecord(cfg.Out, m))
	}
	if cfg.Shard.N != 0 {
		if m.Interrupted {
			os.Exit(3) // a merge refuses an incomplete shard
		}
		os.Exit(0)
	}
	os.Exit(writeTable(cfg.Out, m))
}

// writeTable writes m's table into out (keeping its shrinking section)
// and returns the exit code: 0 when the matrix meets the bar.
func writeTable(out string, m *Matrix) int {
	md := m.Markdown()
	if old, err := os.ReadFile(out); err == nil && out != "-" {
		if i := strings.Index(string(old), shrinkHeading); i >= 0 {
			md = splice(md, string(old[i:])) // the shrink table is --shrink's
		}
	}
	if err := writeOut(out, md); err != nil {
		fmt.Fprintln(os.Stderr, "matrix:", err)
		return 3
	}
	if !m.Passed() {
		return 1
	}
	return 0
}

// writeOut writes a table to out ("-": standard output).
func writeOut(out, md string) error {
	if out == "-" {
		_, err := fmt.Print(md)
		return err
	}
	if err := durable.WriteFile(out, []byte(md), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "matrix: wrote %s\n", out)
	return nil
}

// writeTrackRecord records m's rows in the measurements kept beside out
// (track-record.json: the rows not run keep their last), writes the track
// record into out, and returns the exit code: 0 when every row of the
// record kept its verdict, 1 when one changed.
func writeTrackRecord(out string, m *Matrix) int {
	md := m.TrackMarkdown()
	passed := m.TrackPassed()
	if out != "-" {
		f := readTrackFile(trackJSON(out))
		f.record(m)
		b, err := json.MarshalIndent(f, "", "  ")
		if err == nil {
			err = durable.WriteFile(trackJSON(out), append(b, '\n'), 0o644)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "matrix:", err)
			return 3
		}
		md = f.TrackMarkdown(m.Config.Command, m.Interrupted)
		passed = f.matrix("", m.Interrupted).TrackPassed()
	}
	if err := writeOut(out, md); err != nil {
		fmt.Fprintln(os.Stderr, "matrix:", err)
		return 3
	}
	if !passed {
		fmt.Fprintln(os.Stderr, "matrix: a track-record row changed its verdict (see the rows marked ⚠)")
		return 1
	}
	return 0
}
