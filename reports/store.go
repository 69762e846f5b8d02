package reports

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/fencecheck/fencecheck/checkers"
)

// LatestLink is the name of the symlink to the newest run, both at the top of
// the store and inside each target's folder.
const LatestLink = "latest"

// timestampLayout names run folders: sortable, no colons (which some file
// systems and tools reject), millisecond precision so quick runs don't clash.
const timestampLayout = "20060102T150405.000Z"

// TargetDirName makes a target name safe as one path element:
// "spec:/x/y.yaml" becomes "spec-_x_y.yaml".
func TargetDirName(target string) string {
	var b strings.Builder
	for _, r := range target {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '_', r == '-':
			b.WriteRune(r)
		case r == ':':
			b.WriteByte('-')
		default:
			b.WriteByte('_')
		}
	}
	s := strings.Trim(b.String(), ".")
	if s == "" || s == LatestLink {
		s = "_" + s
	}
	return clip(s, 100)
}

// NewRunDir creates STORE/<target>/<timestamp>/ for a run that starts at
// start and returns its path. If a run already has that name (two runs in the
// same millisecond) a suffix keeps them apart.
func NewRunDir(store, target string, start time.Time) (string, error) {
	parent := filepath.Join(store, TargetDirName(target))
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return "", fmt.Errorf("run store: %w", err)
	}
	base := start.UTC().Format(timestampLayout)
	for i := 0; i < 1000; i++ {
		name := base
		if i > 0 {
			name = fmt.Sprintf("%s-%d", base, i)
		}
		dir := filepath.Join(parent, name)
		err := os.Mkdir(dir, 0o755)
		if err == nil {
			return dir, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return "", fmt.Errorf("run store: %w", err)
		}
	}
	return "", fmt.Errorf("run store: too many runs named %s in %s", base, parent)
}

// UpdateLatest points STORE/latest and STORE/<target>/latest at runDir. The
// links are relative (the store can be moved or mounted elsewhere) and
// replaced atomically (a new link renamed over the old), so a reader never
// sees a missing or half-written link even with concurrent runs.
func UpdateLatest(store, runDir string) error {
	absStore, err := filepath.Abs(store)
	if err != nil {
		return err
	}
	absRun, err := filepath.Abs(runDir)
	if err != nil {
		return err
	}
	rel, err := filepath.Rel(absStore, absRun)
	if err != nil || rel == "." || strings.HasPrefix(rel, "..") {
		return fmt.Errorf("run store: %s is not inside %s", runDir, store)
	}
	if err := replaceSymlink(filepath.Join(absStore, LatestLink), rel); err != nil {
		return err
	}
	if dir, name := filepath.Split(rel); dir != "" {
		return replaceSymlink(filepath.Join(absStore, dir, LatestLink), name)
	}
	return nil
}

func replaceSymlink(link, target string) error {
	tmp := fmt.Sprintf("%s.tmp-%d-%d", link, os.Getpid(), time.Now().UnixNano())
	if err := os.Symlink(target, tmp); err != nil {
		return fmt.Errorf("run store: %w", err)
	}
	if err := os.Rename(tmp, link); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("run store: %w", err)
	}
	return nil
}

// Run is one stored run as the store listing shows it.
type Run struct {
	// Path is the run directory relative to the store, with forward slashes.
	Path    string
	Target  string
	Start   time.Time
	Verdict checkers.Verdict // "" when the run has no results.json (crashed or running)
	Summary string
	// Duration is 0 when unknown.
	Duration  time.Duration
	Ops       int
	Anomalies int
	HasReport bool
	Files     []string
	// State says what a run without results is: StateCouldNotRun (its
	// target did not start: error.txt says why, in Summary), StateNoResults
	// (a history but no results.json: killed, or still running),
	// StateSetup (only config.json: stopped during setup); "" with results.
	State string
}

// Run states of a run folder without results.json.
const (
	StateCouldNotRun = "could not run"
	StateNoResults   = "no results"
	StateSetup       = "stopped during setup"
)

// ListRuns lists the runs in store, newest first. Folders that are not runs
// (no history, results or config file) are left out; a run whose
// results.json cannot be read is listed with an empty verdict.
func ListRuns(store string) ([]Run, error) {
	targets, err := os.ReadDir(store)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	var runs []Run
	for _, t := range targets {
		if !t.IsDir() { // also skips the latest symlink
			continue
		}
		entries, err := os.ReadDir(filepath.Join(store, t.Name()))
		if err != nil {
			continue
		}
		for _, e := range entries {
			if !e.IsDir() {
				continue
			}
			if r, ok := readRun(store, t.Name(), e.Name()); ok {
				runs = append(runs, r)
			}
		}
	}
	sort.SliceStable(runs, func(i, j int) bool {
		if !runs[i].Start.Equal(runs[j].Start) {
			return runs[i].Start.After(runs[j].Start)
		}
		return runs[i].Path > runs[j].Path
	})
	return runs, nil
}

func readRun(store, targetDir, name string) (Run, bool) {
	dir := filepath.Join(store, targetDir, name)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return Run{}, false
	}
	r := Run{Path: targetDir + "/" + name, Target: targetDir}
	isRun := false
	has := map[string]bool{}
	for _, e := range entries {
		has[e.Name()] = true
		switch e.Name() {
		case HistoryFile, ResultsFile, ConfigFile, ErrorFile:
			isRun = true
		case ReportFile:
			r.HasReport = true
		}
		f := e.Name()
		if e.IsDir() {
			f += "/"
		}
		r.Files = append(r.Files, f)
	}
	if !isRun {
		return Run{}, false
	}
	if t, err := time.Parse(timestampLayout, strings.SplitN(name, "-", 2)[0]); err == nil {
		r.Start = t
	} else if fi, err := os.Stat(dir); err == nil {
		r.Start = fi.ModTime()
	}
	var res struct {
		Verdict  checkers.Verdict `json:"verdict"`
		Summary  string           `json:"summary"`
		Duration time.Duration    `json:"duration_ns"`
		Run      struct {
			Target string    `json:"target"`
			Start  time.Time `json:"start"`
		} `json:"run"`
		Counts struct {
			Ops int `json:"ops"`
		} `json:"counts"`
		AnomalyCount *int           `json:"anomaly_count"`
		AnomalyKinds map[string]int `json:"anomaly_kinds"`
	}
	if b, err := os.ReadFile(filepath.Join(dir, ResultsFile)); err == nil && json.Unmarshal(b, &res) == nil {
		r.Verdict = res.Verdict
		r.Summary = clip(res.Summary, 300)
		r.Duration = res.Duration
		r.Ops = res.Counts.Ops
		if res.AnomalyCount != nil {
			r.Anomalies = *res.AnomalyCount // the one count (schema 3)
		} else {
			for _, n := range res.AnomalyKinds {
				r.Anomalies += n
			}
		}
		if res.Run.Target != "" {
			r.Target = clip(res.Run.Target, 200)
		}
		if !res.Run.Start.IsZero() {
			r.Start = res.Run.Start
		}
	}
	if r.Verdict == "" {
		switch {
		case has[ErrorFile]:
			r.State = StateCouldNotRun
			if b, err := os.ReadFile(filepath.Join(dir, ErrorFile)); err == nil {
				r.Summary = clip(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]), 300)
			}
		case has[HistoryFile]:
			r.State = StateNoResults
			r.Summary = "a history without results: the run was killed or is still running; fencecheck report on its folder checks it"
		default:
			r.State = StateSetup
			r.Summary = "only config.json: the run stopped during setup, before its history began"
		}
	}
	return r, true
}

// ErrNoHistory is the error of a run folder without a history: the run
// stopped during setup (killed, interrupted, or its target did not start),
// before the history began. Such a folder has nothing to check; it is not a
// usage error.
var ErrNoHistory = errors.New("no history")

// HistoryOf returns path's history file: path itself, or its history.jsonl
// when path is a folder. A run folder (it has config.json) whose history is
// missing gives an error wrapping ErrNoHistory that says so; a path that is
// neither gives an error wrapping fs.ErrNotExist.
func HistoryOf(path string) (string, error) {
	dir, file := path, filepath.Join(path, HistoryFile)
	if st, err := os.Stat(path); err != nil || !st.IsDir() {
		dir, file = filepath.Dir(path), path
	}
	if _, err := os.Stat(file); err == nil || !errors.Is(err, fs.ErrNotExist) {
		return file, err
	}
	if _, err := os.Stat(filepath.Join(dir, ConfigFile)); err == nil && filepath.Base(file) == HistoryFile {
		why := ""
		if b, err := os.ReadFile(filepath.Join(dir, ErrorFile)); err == nil {
			why = fmt.Sprintf("; its %s says why: %s", ErrorFile, strings.TrimSpace(string(b)))
		}
		return file, fmt.Errorf("%w: %s has no %s: the run stopped during setup, before its history began (killed, interrupted, or its target did not start; its %s says what it set out to do%s): there is nothing to check",
			ErrNoHistory, dir, HistoryFile, ConfigFile, why)
	}
	if file == path {
		return file, fmt.Errorf("no such run folder or history: %s: %w", path, fs.ErrNotExist)
	}
	return file, fmt.Errorf("%s is not a run folder: it has no %s: %w", path, HistoryFile, fs.ErrNotExist)
}
