package reports

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"html/template"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/fencecheck/fencecheck/analysis"
	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/durable"
)

// Write renders an analysis of dir/history.jsonl into the run directory dir:
// results.json, report.html, junit.xml and Porcupine's visualizations.
func Write(dir string, info RunInfo, res *analysis.Result) (*Results, error) {
	return write(dir, info, res, time.Now())
}

// WriteFrom is Write for a history stored elsewhere (`fencecheck check
// --report DIR` on a bare history file). The history is referenced, not
// copied (a 1M-operation history is 250 MB): a hard link when dir is on
// the same file system (the folder is then complete on its own), else a
// symbolic link to its absolute path; a copy only where neither can be
// made.
func WriteFrom(dir, historyPath string, info RunInfo, res *analysis.Result) (*Results, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	dst := filepath.Join(dir, HistoryFile)
	if !sameFile(historyPath, dst) {
		if err := referHistory(historyPath, dst); err != nil {
			return nil, fmt.Errorf("history in the report folder: %w", err)
		}
	}
	return write(dir, info, res, time.Now())
}

// referHistory puts src at dst without copying its bytes where it can.
func referHistory(src, dst string) error {
	if err := os.Remove(dst); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if os.Link(src, dst) == nil {
		return nil
	}
	if abs, err := filepath.Abs(src); err == nil && os.Symlink(abs, dst) == nil {
		return nil
	}
	return durable.Copy(src, dst, 0o644)
}

func write(dir string, info RunInfo, res *analysis.Result, now time.Time) (*Results, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	files := Files{Report: ReportFile, History: HistoryFile, JUnit: JUnitFile}
	if res.CanVisualize() {
		files.Visualizations = visualize(res, dir)
	} else {
		files.Visualizations = keptVisualizations(dir)
	}
	if _, err := os.Stat(filepath.Join(dir, ConfigFile)); err == nil {
		files.Config = ConfigFile
	}
	files.Logs = listFiles(dir, LogsDir, 200)
	for _, f := range []struct {
		field *string
		name  string
	}{{&files.Schedule, ScheduleFile}, {&files.Shrink, ShrinkSummaryFile}} {
		if _, err := os.Stat(filepath.Join(dir, filepath.FromSlash(f.name))); err == nil {
			*f.field = f.name
		}
	}
	r := buildResults(info, res, files, now)

	rj, err := marshalResults(r)
	if err != nil {
		return nil, fmt.Errorf("results.json: %w", err)
	}
	ju, err := marshalJUnit(r)
	if err != nil {
		return nil, fmt.Errorf("junit.xml: %w", err)
	}
	page, err := renderReport(dir, info, r, res)
	if err != nil {
		return nil, fmt.Errorf("report.html: %w", err)
	}
	for _, f := range []struct {
		name string
		data []byte
	}{{ResultsFile, rj}, {JUnitFile, ju}, {ReportFile, page}} {
		if err := durable.WriteFile(filepath.Join(dir, f.name), f.data, 0o644); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// VisualizeDir is the run folder's subfolder of Porcupine visualizations.
const VisualizeDir = "porcupine"

// keyFileName is a file name for a key, unique per key: the key itself when
// it is a safe name, else its safe form and a short hash of the key (so
// "a/b" and "a_b" get two pages).
func keyFileName(key string) string {
	safe := TargetDirName(key)
	if safe == key {
		return safe
	}
	h := fnv.New64a()
	h.Write([]byte(key))
	return fmt.Sprintf("%s-%08x", safe, h.Sum64()>>32)
}

// visualize writes a visualization of every key a checker found invalid and
// of up to three keys otherwise.
func visualize(res *analysis.Result, dir string) map[string]string {
	out := map[string]string{}
	sample := 0
	for _, k := range res.Keys {
		if k.Verdict != checkers.Invalid {
			if sample >= 3 || k.Verdict != checkers.Valid {
				continue
			}
			sample++
		}
		rel := filepath.Join(VisualizeDir, fmt.Sprintf("%s-%s.html", k.Model, keyFileName(k.Key)))
		if err := os.MkdirAll(filepath.Join(dir, VisualizeDir), 0o755); err != nil {
			continue
		}
		err := durable.WriteFileFrom(filepath.Join(dir, rel), 0o644, func(w io.Writer) error {
			return res.Visualize(k.Model, k.Key, &capped{w: w, left: MaxVisualizationBytes})
		})
		if errors.Is(err, errTooBig) {
			// Even the window around the violation is too big (a segment
			// that cannot be cut): a page that says so, not 50 MB.
			note := fmt.Sprintf("<!DOCTYPE html><meta charset=utf-8><title>%s</title><p>The visualization of %s %s would exceed %d MB (%d operations); the report's timeline shows the key's operations, and history.jsonl has them all.</p>",
				template.HTMLEscapeString(k.Key), template.HTMLEscapeString(k.Model), template.HTMLEscapeString(k.Key), MaxVisualizationBytes>>20, k.Ops)
			err = durable.WriteFile(filepath.Join(dir, rel), []byte(note), 0o644)
		}
		if err == nil {
			out[k.Model+"/"+k.Key] = filepath.ToSlash(rel)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// MaxVisualizationBytes bounds one Porcupine visualization file (the
// checker draws the window around a big key's violation, MaxVisualizedOps;
// this catches a window that cannot be cut).
var MaxVisualizationBytes = 5 << 20

var errTooBig = errors.New("visualization over its size bound")

// capped is a writer that fails once more than left bytes were written.
type capped struct {
	w    io.Writer
	left int
}

func (c *capped) Write(p []byte) (int, error) {
	if len(p) > c.left {
		return 0, errTooBig
	}
	c.left -= len(p)
	return c.w.Write(p)
}

// keptVisualizations are those the folder's previous results.json lists and
// that are still there: a re-render without Porcupine keeps its drawings.
func keptVisualizations(dir string) map[string]string {
	var prev struct {
		Files Files `json:"files"`
	}
	b, err := os.ReadFile(filepath.Join(dir, ResultsFile))
	if err != nil || json.Unmarshal(b, &prev) != nil {
		return nil
	}
	out := map[string]string{}
	for k, rel := range prev.Files.Visualizations {
		if _, err := os.Stat(filepath.Join(dir, filepath.FromSlash(rel))); err == nil {
			out[k] = rel
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// Stored is what a run folder says about its run, for checking it again.
type Stored struct {
	Info RunInfo
	// Options are the analysis options the run was checked with
	// (semantics, checker, budget, minimum, lease ttl), as far as the
	// folder records them; the rest are zero (the analysis's defaults).
	Options analysis.Options
	// Checks are the stored checker results (nil without results.json).
	Checks []checkers.Result
}

// LoadRun reads a run folder's results.json (this package's own file, read
// exactly) or, for a run killed before its check, the few well-known fields
// of config.json (the harness's file).
func LoadRun(dir string) (*Stored, error) {
	if _, err := os.Stat(filepath.Join(dir, HistoryFile)); err != nil {
		return nil, fmt.Errorf("%s is not a run folder: %w", dir, err)
	}
	st := &Stored{}
	cfg, cfgErr := os.ReadFile(filepath.Join(dir, ConfigFile))
	if cfgErr == nil && json.Valid(cfg) {
		st.Info.Config = json.RawMessage(cfg)
	}
	var loose struct {
		RunID      string              `json:"run_id"`
		Target     string              `json:"target"`
		TargetName string              `json:"target_name"`
		System     string              `json:"system"`
		Seed       json.Number         `json:"seed"`
		Command    json.RawMessage     `json:"command"` // a string, or argv
		Start      time.Time           `json:"start"`
		End        time.Time           `json:"end"`
		Nemesis    json.RawMessage     `json:"nemesis"`
		Nemeses    []string            `json:"nemeses"`
		Semantics  *checkers.Semantics `json:"semantics"`
		Checker    string              `json:"checker"`
		Timeout    time.Duration       `json:"check_timeout_ns"`
		MinOps     int                 `json:"min_ops"`
		TTL        time.Duration       `json:"ttl_ns"`
		Coverage   bool                `json:"require_coverage"`
	}
	if cfgErr == nil {
		_ = json.Unmarshal(cfg, &loose) // best effort: any field may be missing
	}
	st.Options = analysis.Options{Checker: loose.Checker, Timeout: loose.Timeout, MinOps: loose.MinOps, TTL: loose.TTL,
		RequireCoverage: loose.Coverage}
	if loose.Semantics != nil {
		st.Options.Semantics = *loose.Semantics
	}

	var res Results
	b, err := os.ReadFile(filepath.Join(dir, ResultsFile))
	if err == nil && json.Unmarshal(b, &res) == nil && res.SchemaVersion > 0 {
		cfg := st.Info.Config
		st.Info = res.Run
		st.Info.Config = cfg
		st.Checks = res.Checks
		if st.Checks == nil {
			st.Checks = []checkers.Result{}
		}
		if res.Run.Semantics != nil {
			st.Options.Semantics = *res.Run.Semantics
		}
		if res.SchemaVersion >= 2 {
			o := res.Options
			st.Options.Checker, st.Options.Timeout, st.Options.MinOps, st.Options.TTL = o.Checker, o.Timeout, o.MinOps, o.TTL
			st.Options.RequireCoverage = o.RequireCoverage
		} else {
			dropV1Causes(st.Checks)
		}
		return st, nil
	}

	info := &st.Info
	info.RunID, info.Target, info.System = loose.RunID, loose.Target, loose.System
	if info.Target == "" {
		info.Target = loose.TargetName
	}
	if n, err := loose.Seed.Int64(); err == nil {
		info.Seed = n
	}
	var argv []string
	if json.Unmarshal(loose.Command, &info.Command) != nil && json.Unmarshal(loose.Command, &argv) == nil {
		info.Command = strings.Join(argv, " ")
	}
	info.Start, info.End, info.Semantics, info.Nemeses = loose.Start, loose.End, loose.Semantics, loose.Nemeses
	if info.Nemeses == nil && len(loose.Nemesis) > 0 {
		var s string
		if json.Unmarshal(loose.Nemesis, &s) == nil && s != "" {
			info.Nemeses = strings.Split(s, ",")
		} else {
			_ = json.Unmarshal(loose.Nemesis, &info.Nemeses)
		}
	}
	resolved := filepath.Clean(dir)
	if r, err := filepath.EvalSymlinks(dir); err == nil {
		resolved = r // store/latest names no target; the folder it points at does
	}
	if info.Target == "" {
		// STORE/<target>/<timestamp>: the folder names the target.
		info.Target = filepath.Base(filepath.Dir(resolved))
	}
	if info.Start.IsZero() {
		if t, err := time.Parse(timestampLayout, strings.SplitN(filepath.Base(resolved), "-", 2)[0]); err == nil {
			info.Start = t
		}
	}
	return st, nil
}

// Rerender writes a stored run's results.json, report.html and junit.xml
// again from its stored checker results, without checking again (`fencecheck
// report --stored`): after a file the report links was added to the folder
// (a shrink's summary).
func Rerender(ctx context.Context, dir string) error {
	st, err := LoadRun(dir)
	if err != nil {
		return err
	}
	if st.Checks == nil {
		return fmt.Errorf("%s has no %s to re-render", dir, ResultsFile)
	}
	opts := st.Options
	opts.Lenient = true
	opts.Checkers = []analysis.Checker{analysis.Replay(st.Checks)}
	res, err := analysis.CheckFile(ctx, filepath.Join(dir, HistoryFile), opts)
	if err != nil {
		return err
	}
	_, err = Write(dir, st.Info, res)
	return err
}

// dropV1Causes takes the fault words version 1 appended to each violation
// ("… — 0.04 s after the restart of n1 (2.50–3.50 s) ended") off the text:
// the analysis names causes again, by its rule (no checker's own text
// contains " — ").
func dropV1Causes(checks []checkers.Result) {
	for i := range checks {
		for j := range checks[i].Anomalies {
			a := &checks[i].Anomalies[j]
			if k := strings.LastIndex(a.Text, " — "); k >= 0 && !a.Finding && a.Cause == nil {
				a.Text = a.Text[:k]
			}
		}
	}
}

// listFiles lists regular files under dir/sub (relative to dir), sorted,
// at most max.
func listFiles(dir, sub string, max int) []string {
	var out []string
	root := filepath.Join(dir, sub)
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || len(out) >= max {
			return filepath.SkipDir
		}
		if d.IsDir() && p != root && d.Name() == "shrink" && filepath.Dir(p) == filepath.Clean(dir) {
			return filepath.SkipDir // a shrink's own runs: its summary is linked instead
		}
		if d.Type().IsRegular() {
			if rel, err := filepath.Rel(dir, p); err == nil {
				out = append(out, filepath.ToSlash(rel))
			}
		}
		return nil
	})
	sort.Strings(out)
	return out
}

func sameFile(a, b string) bool {
	fa, err := os.Stat(a)
	if err != nil {
		return false
	}
	fb, err := os.Stat(b)
	if err != nil {
		return false
	}
	return os.SameFile(fa, fb)
}
