package main

import (
	"bytes"
	"debug/buildinfo"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/fencecheck/fencecheck/durable"
)

// Shard is one part of a matrix split over machines: --shard I/N.
type Shard struct{ I, N int }

// whole is an unsharded matrix: one part of one.
var whole = Shard{1, 1}

func (s Shard) String() string { return fmt.Sprintf("%d/%d", s.I, s.N) }

// parseShard reads --shard's "I/N" (1 <= I <= N).
func parseShard(v string) (Shard, error) {
	a, b, ok := strings.Cut(v, "/")
	i, err1 := strconv.Atoi(a)
	n, err2 := strconv.Atoi(b)
	if !ok || err1 != nil || err2 != nil {
		return Shard{}, fmt.Errorf("--shard %q: want I/N, e.g. 2/4", v)
	}
	if n < 1 || i < 1 || i > n {
		return Shard{}, fmt.Errorf("--shard %q: want 1 <= I <= N", v)
	}
	return Shard{i, n}, nil
}

// run is one `fencecheck test` process of the matrix.
type run struct {
	row  Row
	seed uint64
}

// matrixRuns is every run of the matrix in its order: seed by seed, and
// within a seed row by row (an interrupted matrix still covers every row).
func matrixRuns(rows []Row, seeds int, first uint64) []run {
	var out []run
	for i := range seeds {
		for _, r := range rows {
			out = append(out, run{r, first + uint64(i)})
		}
	}
	return out
}

// share is the shard's part of runs: the I-th of N contiguous slices of the
// list, runs (I-1)·len/N up to I·len/N. The N shards together hold every
// run once, each about 1/N of them (the sizes differ by one at most), and,
// the list going seed by seed, each shard runs every row about as often as
// the others whenever there are at least N seeds.
func (s Shard) share(runs []run) []run {
	lo, hi := (s.I-1)*len(runs)/s.N, s.I*len(runs)/s.N
	return runs[lo:hi]
}

// resultsFormat names the results file's format; --merge reads this one.
const resultsFormat = "fencecheck-matrix-results/1"

// ResultsFile is what --results writes: one shard's runs (an unsharded
// matrix is shard 1/1) and what they belong to, enough to write the
// detection table from.
type ResultsFile struct {
	Format string    `json:"format"`
	Matrix MatrixKey `json:"matrix"`
	// Shard is I/N, or 1/1 for an unsharded matrix.
	Shard ShardKey `json:"shard"`
	// Command is the command line of this part, as the table prints it.
	Command  string    `json:"command"`
	Parallel int       `json:"parallel"`
	CPUs     int       `json:"cpus"`
	Started  time.Time `json:"started"`
	// ElapsedNS is this part's wall time.
	ElapsedNS int64 `json:"elapsed_ns"`
	// Interrupted: stopped before every run of the shard was done; Runs
	// then holds the ones done.
	Interrupted bool        `json:"interrupted"`
	Runs        []RunResult `json:"runs"`
}

// ShardKey is a shard in the results file.
type ShardKey struct {
	Index int `json:"index"`
	Of    int `json:"of"`
}

// MatrixKey is what makes shards parts of one matrix: --merge asks every
// file for the same.
type MatrixKey struct {
	Rows      []RowKey `json:"rows"`
	Seeds     int      `json:"seeds"`
	FirstSeed uint64   `json:"first_seed"`
	Time      string   `json:"time"`
	Nemesis   string   `json:"nemesis"`
	// NemesisMode is the runs' --nemesis-mode ("": fencecheck's default).
	NemesisMode string `json:"nemesis_mode,omitempty"`
	// Fencecheck is the binary the runs ran.
	Fencecheck Build `json:"fencecheck"`
}

// RowKey is a row by name and the `fencecheck test` arguments its runs
// get, so that a merge notices rows defined differently.
type RowKey struct {
	Name string `json:"name"`
	Args string `json:"args"`
}

// Build says which fencecheck ran: the Go version it was built with and
// its commit, from the binary's build information when it was stamped
// (`go build` in a checkout, -buildvcs not false), otherwise the commit of
// the checkout the matrix ran in; Modified marks a build from a tree with
// uncommitted changes. Empty where neither is known.
type Build struct {
	Go       string `json:"go,omitempty"`
	Revision string `json:"revision,omitempty"`
	Modified bool   `json:"modified,omitempty"`
}

// RunResult is one run in the results file.
type RunResult struct {
	Row  string `json:"row"`
	Seed uint64 `json:"seed"`
	// Exit is fencecheck's exit code (-1: it did not run; Error says why).
	Exit    int    `json:"exit"`
	Verdict string `json:"verdict"`
	// FirstInvalidNS is results.json's first_invalid_at_ns (null: never
	// invalid).
	FirstInvalidNS *int64         `json:"first_invalid_at_ns"`
	AnomalyKinds   map[string]int `json:"anomaly_kinds,omitempty"`
	// AfterFault is the nemesis of the latest fault started before the
	// first violation.
	AfterFault string `json:"after_fault,omitempty"`
	// FirstFaultNS is when the run's first fault began (-1: no fault; null
	// in a file written before it was kept).
	FirstFaultNS *int64 `json:"first_fault_ns,omitempty"`
	WallNS       int64  `json:"wall_ns"`
	Error        string `json:"error,omitempty"`
	// Dir is the run's store folder on the machine that ran it, when it
	// was kept (--store or --keep).
	Dir string `json:"dir,omitempty"`
	// Situations are the run's coverage counts of the situations that
	// applied, MainPhaseNS the phase they were counted in.
	Situations  map[string]int `json:"situations,omitempty"`
	MainPhaseNS int64          `json:"main_phase_ns,omitempty"`
}

// rowArgs is a row's `fencecheck test` arguments with {seed} and {store}
// for what each run fills in.
func rowArgs(c Config, r Row) string {
	args := c.Args(r, 0, "{store}")
	for i, a := range args {
		if a == "--seed=0" {
			args[i] = "--seed={seed}"
		}
	}
	return strings.Join(args, " ")
}

func matrixKey(c Config, rows []Row, b Build) MatrixKey {
	k := MatrixKey{Seeds: c.Seeds, FirstSeed: c.FirstSeed, Time: c.Time.String(), Nemesis: c.Nemesis, NemesisMode: c.NemesisMode, Fencecheck: b}
	for _, r := range rows {
		k.Rows = append(k.Rows, RowKey{r.Name, rowArgs(c, r)})
	}
	return k
}

// fencecheckBuild reads what Build records of the binary at path.
func fencecheckBuild(path string) Build {
	var b Build
	if info, err := buildinfo.ReadFile(path); err == nil {
		b.Go = info.GoVersion
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				b.Revision = s.Value
			case "vcs.modified":
				b.Modified = s.Value == "true"
			}
		}
	}
	if b.Revision == "" {
		if out, err := exec.Command("git", "rev-parse", "HEAD").Output(); err == nil {
			b.Revision = strings.TrimSpace(string(out))
			st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output()
			b.Modified = err == nil && len(bytes.TrimSpace(st)) > 0
		}
	}
	return b
}

// Results is the matrix's results file (its shard's runs, in the order of
// the matrix).
func (m *Matrix) Results(b Build) ResultsFile {
	s := m.Shard
	if s.N == 0 {
		s = whole
	}
	f := ResultsFile{Format: resultsFormat, Matrix: matrixKey(m.Config, m.Rows, b), Shard: ShardKey{s.I, s.N},
		Command: m.Config.Command, Parallel: m.Config.Parallel, CPUs: m.CPUs, Started: m.Started.UTC(),
		ElapsedNS: int64(m.Elapsed), Interrupted: m.Interrupted, Runs: []RunResult{}}
	for _, r := range m.shardRuns() {
		for _, o := range m.Outcomes[r.row.Name] {
			if o.Seed != r.seed {
				continue
			}
			rr := RunResult{Row: o.Row, Seed: o.Seed, Exit: o.Exit, Verdict: o.Verdict, AnomalyKinds: o.Kinds,
				AfterFault: o.AfterFault, WallNS: int64(o.Wall), Error: o.Err, Situations: o.Situations, MainPhaseNS: int64(o.MainPhase)}
			if m.Config.Store != "" || m.Config.Keep {
				rr.Dir = o.Dir
			}
			if o.FirstInvalid >= 0 {
				ns := int64(o.FirstInvalid)
				rr.FirstInvalidNS = &ns
			}
			ff := int64(max(o.FirstFault, -1))
			rr.FirstFaultNS = &ff
			f.Runs = append(f.Runs, rr)
		}
	}
	return f
}

// shardRuns is the runs of the matrix's shard, in order.
func (m *Matrix) shardRuns() []run {
	s := m.Shard
	if s.N == 0 {
		s = whole
	}
	return s.share(matrixRuns(m.Rows, m.Config.Seeds, m.Config.FirstSeed))
}

func (o RunResult) outcome() Outcome {
	out := Outcome{Row: o.Row, Seed: o.Seed, Exit: o.Exit, Verdict: o.Verdict, FirstInvalid: -1, Kinds: o.AnomalyKinds,
		AfterFault: o.AfterFault, Wall: time.Duration(o.WallNS), Err: o.Error, Dir: o.Dir,
		Situations: o.Situations, MainPhase: time.Duration(o.MainPhaseNS)}
	if o.FirstInvalidNS != nil {
		out.FirstInvalid = time.Duration(*o.FirstInvalidNS)
	}
	// A file without first faults (older) counts every run as having had
	// one at its start, so no row is set aside on its account.
	if o.FirstFaultNS != nil {
		out.FirstFault = time.Duration(*o.FirstFaultNS)
	}
	return out
}

// writeResults writes f to path (atomically: a shard's file is whole or
// absent).
func writeResults(path string, f ResultsFile) error {
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	if dir := filepath.Dir(path); dir != "." {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	return durable.WriteFile(path, append(b, '\n'), 0o644)
}

func readResultsFile(path string) (ResultsFile, error) {
	var f ResultsFile
	b, err := os.ReadFile(path)
	if err != nil {
		return f, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return f, fmt.Errorf("%s: %w", path, err)
	}
	if f.Format != resultsFormat {
		return f, fmt.Errorf("%s: format %q, not %q (not a cmd/matrix --results file, or another version's)", path, f.Format, resultsFormat)
	}
	return f, nil
}

// Merge reads the results files of a matrix's shards and puts the matrix
// back together. The files must be one matrix (the same rows, seeds, time,
// nemesis and fencecheck build), every shard present once, each complete
// and holding exactly its share of the runs; an error names the file or
// shard at fault. The merged matrix writes the table an unsharded run of
// the same runs writes.
func Merge(paths []string) (*Matrix, error) {
	if len(paths) == 0 {
		return nil, fmt.Errorf("--merge: no results files given")
	}
	files := make([]ResultsFile, len(paths))
	for i, p := range paths {
		f, err := readResultsFile(p)
		if err != nil {
			return nil, err
		}
		files[i] = f
	}
	first := files[0]
	for i, f := range files[1:] {
		if err := sameMatrix(paths[0], first.Matrix, paths[i+1], f.Matrix); err != nil {
			return nil, err
		}
		if f.Shard.Of != first.Shard.Of {
			return nil, fmt.Errorf("%s is shard %d/%d but %s is shard %d/%d: not one split of the matrix",
				paths[0], first.Shard.Index, first.Shard.Of, paths[i+1], f.Shard.Index, f.Shard.Of)
		}
	}
	n := first.Shard.Of
	byShard := map[int]int{}
	for i, f := range files {
		if f.Shard.Index < 1 || f.Shard.Index > f.Shard.Of {
			return nil, fmt.Errorf("%s: shard %d/%d is not one of 1..%d", paths[i], f.Shard.Index, f.Shard.Of, f.Shard.Of)
		}
		if j, dup := byShard[f.Shard.Index]; dup {
			return nil, fmt.Errorf("shard %d/%d given twice: %s and %s", f.Shard.Index, n, paths[j], paths[i])
		}
		byShard[f.Shard.Index] = i
	}
	var missing []string
	for s := 1; s <= n; s++ {
		if _, ok := byShard[s]; !ok {
			missing = append(missing, fmt.Sprintf("%d/%d", s, n))
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("shard %s missing (%d of %d files given)", strings.Join(missing, ", shard "), len(files), n)
	}

	key := first.Matrix
	if len(key.Rows) == 0 {
		return nil, fmt.Errorf("%s: no rows", paths[0])
	}
	var names []string
	for _, r := range key.Rows {
		names = append(names, r.Name)
	}
	rows, err := selectRows(names)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", paths[0], err)
	}
	d, err := time.ParseDuration(key.Time)
	if err != nil {
		return nil, fmt.Errorf("%s: time %q: %w", paths[0], key.Time, err)
	}
	cfg := Config{Seeds: key.Seeds, FirstSeed: key.FirstSeed, Time: d, Nemesis: key.Nemesis, NemesisMode: key.NemesisMode}
	if key.Seeds < 1 {
		return nil, fmt.Errorf("%s: seeds %d", paths[0], key.Seeds)
	}
	// The rows must be this cmd/matrix's rows, or the table would describe
	// other runs than the ones counted.
	for i, rk := range matrixKey(cfg, rows, Build{}).Rows {
		if rk.Args != key.Rows[i].Args {
			return nil, fmt.Errorf("row %s: the shards ran `fencecheck %s`, this cmd/matrix defines `fencecheck %s`: merge with the cmd/matrix that ran them",
				rk.Name, key.Rows[i].Args, rk.Args)
		}
	}

	m := &Matrix{Config: cfg, Rows: rows, Outcomes: map[string][]Outcome{}, Shard: whole}
	all := matrixRuns(rows, cfg.Seeds, cfg.FirstSeed)
	for s := 1; s <= n; s++ {
		i := byShard[s]
		f, path := files[i], paths[i]
		if f.Interrupted {
			return nil, fmt.Errorf("shard %d/%d (%s) was interrupted: %d of its %d runs done; run it again", s, n, path, len(f.Runs), len(Shard{s, n}.share(all)))
		}
		want := map[string]bool{}
		for _, r := range (Shard{s, n}).share(all) {
			want[runName(r.row.Name, r.seed)] = true
		}
		got := map[string]bool{}
		for _, rr := range f.Runs {
			name := runName(rr.Row, rr.Seed)
			switch {
			case got[name]:
				return nil, fmt.Errorf("shard %d/%d (%s): run %s is there twice", s, n, path, name)
			case !want[name]:
				return nil, fmt.Errorf("shard %d/%d (%s): run %s is not one of this shard's runs", s, n, path, name)
			}
			got[name] = true
			m.Outcomes[rr.Row] = append(m.Outcomes[rr.Row], rr.outcome())
		}
		var lost []string
		for _, r := range (Shard{s, n}).share(all) {
			if !got[runName(r.row.Name, r.seed)] {
				lost = append(lost, runName(r.row.Name, r.seed))
			}
		}
		if len(lost) > 0 {
			return nil, fmt.Errorf("shard %d/%d (%s): %d of its runs missing: %s", s, n, path, len(lost), strings.Join(lost, ", "))
		}
		m.Parts = append(m.Parts, Part{Shard: Shard{s, n}, Command: f.Command, Parallel: f.Parallel, CPUs: f.CPUs,
			Started: f.Started, Elapsed: time.Duration(f.ElapsedNS), Runs: len(f.Runs)})
	}
	for _, os := range m.Outcomes {
		sort.Slice(os, func(i, j int) bool { return os[i].Seed < os[j].Seed })
	}
	if n == 1 {
		// An unsharded matrix's own file: its table as that run wrote it.
		p := m.Parts[0]
		m.Config.Command, m.Config.Parallel, m.CPUs, m.Started, m.Elapsed = p.Command, p.Parallel, p.CPUs, p.Started, p.Elapsed
		m.Parts = nil
	}
	return m, nil
}

func runName(row string, seed uint64) string { return row + " seed " + strconv.FormatUint(seed, 10) }

// sameMatrix says how two files' matrices differ, if they do.
func sameMatrix(pa string, a MatrixKey, pb string, b MatrixKey) error {
	differ := func(what string, va, vb any) error {
		return fmt.Errorf("%s and %s are not one matrix: %s %v in the first, %v in the second", pa, pb, what, va, vb)
	}
	names := func(k MatrixKey) []string {
		var out []string
		for _, r := range k.Rows {
			out = append(out, r.Name)
		}
		return out
	}
	switch {
	case !slices.Equal(names(a), names(b)):
		return differ("rows", strings.Join(names(a), ","), strings.Join(names(b), ","))
	case !slices.Equal(a.Rows, b.Rows):
		for i := range a.Rows {
			if a.Rows[i] != b.Rows[i] {
				return differ("row "+a.Rows[i].Name+"'s arguments", "`"+a.Rows[i].Args+"`", "`"+b.Rows[i].Args+"`")
			}
		}
	case a.Seeds != b.Seeds || a.FirstSeed != b.FirstSeed:
		return differ("seeds", fmt.Sprintf("%d..%d", a.FirstSeed, a.FirstSeed+uint64(a.Seeds)-1), fmt.Sprintf("%d..%d", b.FirstSeed, b.FirstSeed+uint64(b.Seeds)-1))
	case a.Time != b.Time:
		return differ("time", a.Time, b.Time)
	case a.Nemesis != b.Nemesis:
		return differ("nemesis", a.Nemesis, b.Nemesis)
	case a.Fencecheck != b.Fencecheck:
		return differ("fencecheck build", a.Fencecheck.describe(), b.Fencecheck.describe())
	}
	return nil
}

func (b Build) describe() string {
	s := b.Revision
	if s == "" {
		s = "unknown commit"
	}
	if b.Modified {
		s += " (modified)"
	}
	if b.Go != "" {
		s += ", " + b.Go
	}
	return s
}

// Part is one shard of a merged matrix, as its results file tells it.
type Part struct {
	Shard    Shard
	Command  string
	Parallel int
	CPUs     int
	Started  time.Time
	Elapsed  time.Duration
	Runs     int
}
