package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fencecheck/fencecheck/targets/memory"
)

// Row is one line of the matrix: a configuration of the memory reference,
// or a target that breaks fencing by its own configuration.
type Row struct {
	Name string
	// Bug is the --bug switch ("" for the correct reference).
	Bug string
	// Target is the --target ("" for memory); Broken says the target is
	// expected invalid as it is (postgres-async), as a Bug row is.
	Target string
	Broken bool
	// Nemesis replaces the matrix's --nemesis for this row (a target row
	// names the fault that exposes it).
	Nemesis string
	// Args are extra flags for `fencecheck test`.
	Args []string
	// Mode says what the bug breaks (from the design's failure modes).
	Mode string
	// Needs are the fault kinds the bug needs to show, as a shrink should
	// find them (none: it shows without faults).
	Needs []string
	// Spec runs the row the user's way: the server is an external process
	// described by a spec file the matrix writes (a command node, no offset
	// file, no in-process hooks): SpecReference (`fencecheck reference
	// --bug Bug`) or SpecPython (examples/python-fence with --bug Bug).
	// Bug is then the server's switch, not fencecheck's --bug.
	Spec string
	// SpecSealKey makes the reference seal and verify tokens (the spec
	// declares them authenticated; the forger runs by default).
	SpecSealKey string
	// Floor is the earliest the bug can show by its own definition (a key
	// must first sit idle that long): the guided-vs-random bar cannot ask
	// for less.
	Floor time.Duration
}

// Spec kinds of user-path rows.
const (
	SpecReference = "reference"
	SpecPython    = "python-fence"
)

// expectInvalid says the row must be found invalid (a seeded bug or a
// broken target); the other rows must be valid.
func (r Row) expectInvalid() bool { return r.Bug != "" || r.Broken }

// matrixSealKey authenticates tokens where a row needs sealed tokens; it is
// a test key, not a secret.
const matrixSealKey = "matrix-seal-key"

// Rows is every bug of issue 4 and the correct reference, plain and sealed
// with the forger writing beside the clients.
var Rows = []Row{
	{Name: "counter-in-memory", Bug: "counter-in-memory", Mode: "counter reset: the issuer forgets its counter on restart", Needs: []string{"restart"}},
	{Name: "wallclock-tokens", Bug: "wallclock-tokens", Mode: "tokens are wall-clock milliseconds", Needs: []string{"clock"}},
	{Name: "accept-equal", Bug: "accept-equal", Mode: "replay: a token equal to the high-water mark is accepted"},
	{Name: "missing-as-zero", Bug: "missing-as-zero", Mode: "a missing token is read as zero", Needs: []string{"strip"}},
	{Name: "forget-highwater", Bug: "forget-highwater", Mode: "the resource forgets its high-water marks on restart", Needs: []string{"restart"}},
	{Name: "split-issuers", Bug: "split-issuers", Mode: "split brain: partitioned issuer replicas each issue", Needs: []string{"partition"}},
	{Name: "accept-forged", Bug: "accept-forged", Args: []string{"--seal-key=" + matrixSealKey, "--forge"}, Mode: "forgery: seals are not verified"},
	{Name: "no-fencing", Bug: "no-fencing", Mode: "lease-only safety: tokens are not checked"},
	// Idle-time flaws: only a key left alone for seconds, then written with
	// an older token, shows them; the second also needs the node left alone
	// (no restart) for that long, as a server that keeps its timers in
	// memory does.
	{Name: "forget-idle", Bug: "forget-idle", Mode: "the resource forgets an idle key's high-water mark", Floor: memory.ForgetIdleAfter},
	{Name: "forget-idle-since-start", Bug: "forget-idle-since-start", Mode: "the same, its timers rebuilt at each start (a quiet idle period needed)", Floor: memory.ForgetIdleAfter},
	// Written without fsync: a kill keeps it (the page cache), only a
	// power loss (the lazyfs layer dropping what was never synced) shows it.
	{Name: "counter-no-fsync", Bug: "counter-no-fsync", Nemesis: "power-loss", Needs: []string{"power-loss"},
		Mode: "counter not durable: written without fsync, lost at a power loss"},
	{Name: "highwater-no-fsync", Bug: "highwater-no-fsync", Nemesis: "power-loss", Needs: []string{"power-loss"},
		Mode: "high-water marks not durable: written without fsync, lost at a power loss"},
	// Answered before the fsync: only a power loss in the few ms after an
	// answer shows it. Under all (crash-on-ack aims there) and under all
	// as it was before crash-on-ack (faults at random times), side by side.
	{Name: "ack-before-fsync", Bug: "ack-before-fsync", Needs: []string{"crash-on-ack"},
		Mode: "acknowledged before durable: each commit answered, then fsynced 2 ms later"},
	{Name: "ack-before-fsync-random", Bug: "ack-before-fsync", Nemesis: "clock,delay,disk-slow,partition,pause,power-loss,restart,strip", Needs: []string{"power-loss"},
		Mode: "the same, under all without crash-on-ack (faults at random times)"},
	// Issuer replicas safe against a cut both ways, a restart and a pause,
	// and not against a cut one way: only the partition nemesis's one-way
	// shapes show it.
	{Name: "one-way-failover", Bug: "one-way-failover", Needs: []string{"partition"},
		Mode: "failover on a one-way cut: a follower that cannot reach its leader issues, the leader still reaching it issues the same tokens"},
	{Name: "one-way-failover-partition", Bug: "one-way-failover", Nemesis: "partition", Needs: []string{"partition"},
		Mode: "the same, under the partition nemesis alone"},
	// Issuer replicas safe against every cut, restart and pause, whose
	// failover is a membership change: only member-replace shows a replica
	// added back on its empty folder.
	{Name: "rejoin-empty", Bug: "rejoin-empty", Needs: []string{"member-replace"},
		Mode: "a member that rejoins empty: a replica removed and added back on its empty folder grants its locks' tokens again"},
	{Name: "rejoin-empty-member-replace", Bug: "rejoin-empty", Nemesis: "member-replace", Needs: []string{"member-replace"},
		Mode: "the same, under the member-replace nemesis alone"},
	// Disk faults (opt-in, so not under all): a full disk's failed writes
	// answered as done, forgotten at the next operation; a damaged state
	// file taken for a fresh one at start. Each against the correct
	// reference under the same fault.
	{Name: "ignore-write-errors", Bug: "ignore-write-errors", Nemesis: "disk-full", Needs: []string{"disk-full"},
		Mode: "counter and high-water reset: writes that failed on a full disk answered as done"},
	{Name: "trust-truncated-state", Bug: "trust-truncated-state", Nemesis: "disk-corrupt", Needs: []string{"disk-corrupt"},
		Mode: "counter and high-water reset: a damaged state file taken for a fresh one at start"},
	{Name: "reference", Mode: "correct"},
	{Name: "reference-power-loss", Nemesis: "power-loss", Mode: "correct, under power loss"},
	{Name: "reference-disk-full", Nemesis: "disk-full", Mode: "correct, under a full disk"},
	{Name: "reference-disk-corrupt", Nemesis: "disk-corrupt", Mode: "correct, under a damaged disk (two checksummed copies of its state)"},
	{Name: "reference-sealed", Args: []string{"--seal-key=" + matrixSealKey, "--forge"}, Mode: "correct, sealed tokens, forger writing"},
	// PostgreSQL acknowledging commits before their WAL is written: a kill
	// -9 loses the last ones, lock grants included. Its durable twin under
	// the same faults is the control.
	{Name: "postgres-async", Target: "postgres-async", Broken: true, Nemesis: "restart", Needs: []string{"restart"},
		Mode: "counter and high-water not durable: synchronous_commit = off loses acknowledged commits at a crash"},
	{Name: "postgres", Target: "postgres", Nemesis: "restart", Mode: "PostgreSQL, synchronous_commit = on"},
	// Redis's default AOF policy: acknowledged before fsynced, so a power
	// loss drops up to a second of acquires and writes. appendfsync always
	// under the same fault is the control.
	{Name: "redis-everysec", Target: "redis-everysec", Broken: true, Nemesis: "power-loss", Needs: []string{"power-loss"},
		Mode: "counter and high-water not durable: appendfsync everysec loses the last second at a power loss"},
	{Name: "redis-power-loss", Target: "redis", Nemesis: "power-loss", Mode: "Redis, appendfsync always, under power loss"},
}

// UserPathRows are the same bugs the user's way (issue 15): each server an
// external process through a spec, as a user runs a system no one here
// wrote. `--rows user-path` selects them all.
var UserPathRows = func() []Row {
	var out []Row
	for _, r := range Rows[:8] {
		if r.Bug == "split-issuers" {
			continue // two issuer replicas of one process: the standalone reference has one
		}
		u := Row{Name: "spec-" + r.Name, Bug: r.Bug, Mode: r.Mode, Needs: r.Needs, Spec: SpecReference}
		if r.Bug == "accept-forged" {
			u.SpecSealKey = matrixSealKey
		}
		out = append(out, u)
	}
	out = append(out, Row{Name: "spec-reference", Mode: "correct", Spec: SpecReference},
		Row{Name: "spec-reference-sealed", Mode: "correct, sealed tokens, forger writing", Spec: SpecReference, SpecSealKey: matrixSealKey})
	for _, b := range []struct {
		bug, mode string
		floor     time.Duration // the bug's own time (Row.Floor): fence.py's FORGET_*_S
	}{
		{"counter-in-memory", "counter reset", 0}, {"wallclock-tokens", "wall-clock tokens", 0},
		{"accept-equal", "equal token accepted", 0}, {"missing-as-zero", "missing token accepted", 0},
		{"forget-highwater", "forgotten high-water", 0},
		{"forget-idle", "an idle key's mark forgotten (3 s, timers rebuilt at each start)", 3 * time.Second},
		{"forget-free-lock", "a free lock's counter forgotten (4 s, timers rebuilt at each start)", 4 * time.Second},
	} {
		out = append(out, Row{Name: "python-" + b.bug, Bug: b.bug, Mode: b.mode, Spec: SpecPython, Floor: b.floor})
	}
	return append(out, Row{Name: "python-fence", Mode: "correct", Spec: SpecPython})
}()

// specFile writes the spec of a user-path row into dir and returns its
// path.
func specFile(cfg Config, r Row, dir string) (string, error) {
	bin, err := filepath.Abs(cfg.Fencecheck)
	if err != nil {
		return "", err
	}
	var command []string
	switch r.Spec {
	case SpecReference:
		command = []string{bin, "reference", "--addr", "127.0.0.1:{port}", "--data", "{data}"}
		if r.SpecSealKey != "" {
			command = append(command, "--seal-key", r.SpecSealKey)
		}
	case SpecPython:
		py, err := filepath.Abs(filepath.Join("examples", "python-fence", "fence.py"))
		if err != nil {
			return "", err
		}
		command = []string{"python3", py, "--port", "{port}", "--data", "{data}"}
	default:
		return "", fmt.Errorf("row %s: unknown spec kind %q", r.Name, r.Spec)
	}
	if r.Bug != "" {
		command = append(command, "--bug", r.Bug)
	}
	spec := map[string]any{
		"name": r.Name, "fencing_api": "v1", "start_timeout": "20s",
		"semantics": map[string]any{"equal": "reject", "scope": "per-lock", "authenticated": r.SpecSealKey != ""},
		"nodes":     []any{map[string]any{"name": "n1", "roles": []string{"issuer", "resource"}, "command": command}},
	}
	b, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "spec.json")
	return path, os.WriteFile(path, b, 0o644)
}

// Config is one matrix invocation.
type Config struct {
	Fencecheck string
	Seeds      int
	FirstSeed  uint64
	Time       time.Duration
	Parallel   int
	Nemesis    string
	// NemesisMode is every run's --nemesis-mode (guided or random; "":
	// fencecheck's default, guided for all).
	NemesisMode string
	Store       string
	Keep        bool
	// Rows names the rows to run (nil: all).
	Rows    []string
	Out     string
	Command string
	// Budget is fencecheck shrink's --budget (--shrink).
	Budget time.Duration
	// Shard is the part of the runs to run (zero: all of them).
	Shard Shard
	// Track runs the track record's rows (TrackRows) instead of the
	// matrix's (--track-record).
	Track bool
}

// Outcome is one run's result.
type Outcome struct {
	Row  string
	Seed uint64
	// Exit is fencecheck's exit code (0 valid, 1 invalid, 2 unknown, 3
	// could not run).
	Exit int
	// Verdict, FirstInvalid (-1 if none) and Kinds come from results.json.
	Verdict      string
	FirstInvalid time.Duration
	// FirstFault is when the run's first fault began (-1: none), from
	// results.json's faults.
	FirstFault time.Duration
	Kinds      map[string]int
	AfterFault string
	// System is the system the run said it ran (results.json run.system);
	// Metrics its numeric metrics (lease_overlaps, ...).
	System  string
	Metrics map[string]float64
	// Situations are the run's coverage counts of the failure situations
	// that applied (counted honestly: quiet idles only), MainPhase the
	// length of the phase they were counted in.
	Situations map[string]int
	MainPhase  time.Duration
	Wall       time.Duration
	Err        string
	Dir        string
}

// Matrix is every outcome (of its shard's runs).
type Matrix struct {
	Config   Config
	Rows     []Row
	Outcomes map[string][]Outcome
	Started  time.Time
	Elapsed  time.Duration
	// CPUs is the number of CPUs of the machine that ran it.
	CPUs int
	// Interrupted: the matrix was stopped before every run was done.
	Interrupted bool
	// Shard is the part of the runs this matrix ran (1/1 or zero: all).
	Shard Shard
	// Parts are the shards a merged matrix came from (nil: one run made
	// it).
	Parts []Part
}

// Run runs every row × seed (those of cfg.Shard), Parallel at a time.
func Run(ctx context.Context, cfg Config, log io.Writer) (*Matrix, error) {
	rows, err := selectRows(cfg.Rows)
	if cfg.Track {
		rows, err = selectTrackRows(cfg.Rows)
	}
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(cfg.Fencecheck); err != nil {
		return nil, fmt.Errorf("fencecheck binary: %w (build it: go build -o bin/fencecheck ./cmd/fencecheck)", err)
	}
	store := cfg.Store
	if store == "" {
		if store, err = os.MkdirTemp("", "fencecheck-matrix-"); err != nil {
			return nil, err
		}
		if !cfg.Keep {
			defer os.RemoveAll(store)
		}
	}
	shard := cfg.Shard
	if shard.N == 0 {
		shard = whole
	}
	m := &Matrix{Config: cfg, Rows: rows, Outcomes: map[string][]Outcome{}, Started: time.Now(), CPUs: runtime.NumCPU(), Shard: shard}
	jobs := shard.share(matrixRuns(rows, cfg.Seeds, cfg.FirstSeed))
	if shard != whole {
		fmt.Fprintf(log, "matrix: shard %s: %d of the matrix's %d runs\n", shard, len(jobs), len(rows)*cfg.Seeds)
	}
	var mu sync.Mutex
	next := 0
	done := 0
	var wg sync.WaitGroup
	for w := 0; w < cfg.Parallel; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				if next >= len(jobs) || ctx.Err() != nil {
					mu.Unlock()
					return
				}
				j := jobs[next]
				next++
				mu.Unlock()
				o := runOne(ctx, cfg, store, j.row, j.seed)
				mu.Lock()
				m.Outcomes[j.row.Name] = append(m.Outcomes[j.row.Name], o)
				done++
				fmt.Fprintf(log, "[%d/%d] %-18s seed %-3d exit %d %-8s (%3.0f s) %s%s\n", done, len(jobs), j.row.Name, j.seed, o.Exit, o.Verdict, o.Wall.Seconds(),
					ttd(o), errSuffix(o))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	m.Elapsed = time.Since(m.Started)
	for _, os := range m.Outcomes {
		sort.Slice(os, func(i, j int) bool { return os[i].Seed < os[j].Seed })
	}
	if ctx.Err() != nil {
		return m, ctx.Err()
	}
	return m, nil
}

func ttd(o Outcome) string {
	if o.FirstInvalid < 0 {
		return ""
	}
	return fmt.Sprintf("detected at %.1f s", o.FirstInvalid.Seconds())
}

func errSuffix(o Outcome) string {
	if o.Err == "" {
		return ""
	}
	return " (" + o.Err + ")"
}

func selectRows(names []string) ([]Row, error) {
	if len(names) == 0 {
		return Rows, nil
	}
	var out []Row
	all := append(append(append([]Row(nil), Rows...), UserPathRows...), SituationRows...)
	for _, n := range names {
		if n == "user-path" {
			out = append(out, UserPathRows...)
			continue
		}
		if n == "situations" {
			out = append(out, SituationRows...)
			continue
		}
		found := false
		for _, r := range all {
			if r.Name == n {
				out = append(out, r)
				found = true
			}
		}
		if !found {
			known := []string{"user-path", "situations"}
			for _, r := range all {
				known = append(known, r.Name)
			}
			return nil, fmt.Errorf("unknown row %q (known: %s)", n, strings.Join(known, ", "))
		}
	}
	return out, nil
}

// Args is the `fencecheck test` command line of one run (without the
// binary).
func (c Config) Args(r Row, seed uint64, store string) []string {
	target, nem := "memory", c.Nemesis
	if r.Target != "" {
		target = r.Target
	}
	if r.Spec != "" {
		target = "spec:" + filepath.Join(store, "spec.json") // runOne writes it
	}
	if r.Nemesis != "" {
		nem = r.Nemesis
	}
	args := []string{"test", "--target=" + target, "--nemesis=" + nem, "--time=" + c.Time.String(),
		"--seed=" + strconv.FormatUint(seed, 10), "--store=" + store, "--quiet"}
	if r.Bug != "" && r.Spec == "" {
		args = append(args, "--bug="+r.Bug)
	}
	if c.NemesisMode != "" {
		args = append(args, "--nemesis-mode="+c.NemesisMode)
	}
	return append(args, r.Args...)
}

func runOne(ctx context.Context, cfg Config, store string, r Row, seed uint64) Outcome {
	o := Outcome{Row: r.Name, Seed: seed, FirstInvalid: -1, FirstFault: -1, Exit: -1}
	dir := filepath.Join(store, r.Name, strconv.FormatUint(seed, 10))
	o.Dir = dir
	if err := os.MkdirAll(dir, 0o755); err != nil {
		o.Err = err.Error()
		return o
	}
	logf, err := os.Create(filepath.Join(dir, "output.txt"))
	if err != nil {
		o.Err = err.Error()
		return o
	}
	defer logf.Close()
	if r.Spec != "" {
		if _, err := specFile(cfg, r, dir); err != nil {
			o.Err = err.Error()
			return o
		}
	}
	cmd := exec.CommandContext(ctx, cfg.Fencecheck, cfg.Args(r, seed, dir)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	start := time.Now()
	err = cmd.Run()
	o.Wall = time.Since(start)
	var ee *exec.ExitError
	switch {
	case err == nil:
		o.Exit = 0
	case errors.As(err, &ee):
		o.Exit = ee.ExitCode()
	default:
		o.Err = err.Error()
		return o
	}
	res, err := readResults(dir)
	if err != nil {
		o.Err = "results.json: " + err.Error()
		return o
	}
	o.Verdict = res.Verdict
	o.Kinds = res.AnomalyKinds
	if res.FirstInvalidAt != nil {
		o.FirstInvalid = time.Duration(*res.FirstInvalidAt)
	}
	o.AfterFault = res.afterFault()
	for _, f := range res.Faults {
		if at := time.Duration(f.Start); o.FirstFault < 0 || at < o.FirstFault {
			o.FirstFault = at
		}
	}
	o.System = res.Run.System
	o.Situations, o.MainPhase = res.situations()
	for k, v := range res.Metrics {
		if f, ok := v.(float64); ok {
			if o.Metrics == nil {
				o.Metrics = map[string]float64{}
			}
			o.Metrics[k] = f
		}
	}
	return o
}

// idleCause is how the tables name a first violation the cause rule
// explains by idle time, not by a fault (results.json schema 5).
const idleCause = "idle time"

// results is the part of results.json the matrix reads.
type results struct {
	Verdict        string         `json:"verdict"`
	FirstInvalidAt *int64         `json:"first_invalid_at_ns"`
	AnomalyKinds   map[string]int `json:"anomaly_kinds"`
	AfterFault     *struct {
		Nemesis string `json:"nemesis"`
		Idle    int64  `json:"idle_ns"`
	} `json:"after_fault"`
	Run struct {
		System string `json:"system"`
	} `json:"run"`
	Metrics  map[string]any `json:"metrics"`
	Coverage coverage       `json:"coverage"`
	Faults   []struct {
		Start int64 `json:"start_ns"`
	} `json:"faults"`
}

// afterFault names what the cause rule named for the first violation: a
// nemesis, idleCause, or "" (none).
func (res *results) afterFault() string {
	switch {
	case res.AfterFault == nil:
		return ""
	case res.AfterFault.Idle > 0:
		return idleCause
	}
	return res.AfterFault.Nemesis
}

// readResults finds the one results.json under a run's store folder.
func readResults(dir string) (*results, error) {
	var found []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && d.Name() == "results.json" {
			found = append(found, p)
		}
		return nil
	})
	if len(found) != 1 {
		return nil, fmt.Errorf("found %d results.json files", len(found))
	}
	b, err := os.ReadFile(found[0])
	if err != nil {
		return nil, err
	}
	var r results
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, err
	}
	return &r, nil
}
