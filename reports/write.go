package reports

import (
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/fencecheck/fencecheck/models"
)

// Write writes results.json, report.html and junit.xml into the run
// directory dir, from the history in dir/history.jsonl (streamed, so a large
// history is never held as events) and the checkers' answer.
func Write(dir string, info RunInfo, check Check) (*Results, error) {
	return WriteFrom(dir, filepath.Join(dir, HistoryFile), info, check)
}

// WriteFrom is Write for a history stored elsewhere (`fencecheck check
// --report DIR` on a bare history file): the history is copied into dir
// first, so the report folder is complete on its own and its links work.
func WriteFrom(dir, historyPath string, info RunInfo, check Check) (*Results, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	dst := filepath.Join(dir, HistoryFile)
	if !sameFile(historyPath, dst) {
		if err := copyFile(historyPath, dst); err != nil {
			return nil, fmt.Errorf("copy history into report folder: %w", err)
		}
	}
	a, err := analyzeFile(dst)
	if err != nil {
		return nil, fmt.Errorf("read history: %w", err)
	}
	return write(dir, info, check, a, time.Now())
}

func write(dir string, info RunInfo, check Check, a *analysis, now time.Time) (*Results, error) {
	files := Files{Report: ReportFile, History: HistoryFile, JUnit: JUnitFile, Visualizations: check.Visualizations}
	if _, err := os.Stat(filepath.Join(dir, ConfigFile)); err == nil {
		files.Config = ConfigFile
	}
	files.Logs = listFiles(dir, LogsDir, 200)
	res := buildResults(info, check, a, files, now)

	rj, err := marshalResults(res)
	if err != nil {
		return nil, fmt.Errorf("results.json: %w", err)
	}
	ju, err := marshalJUnit(res)
	if err != nil {
		return nil, fmt.Errorf("junit.xml: %w", err)
	}
	page, err := renderReport(dir, info, res, a)
	if err != nil {
		return nil, fmt.Errorf("report.html: %w", err)
	}
	for _, f := range []struct {
		name string
		data []byte
	}{{ResultsFile, rj}, {JUnitFile, ju}, {ReportFile, page}} {
		if err := writeFileAtomic(filepath.Join(dir, f.name), f.data); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// Regenerate re-renders a stored run's report from its history.jsonl,
// results.json and config.json. With recheck nil the stored checker results
// are reused; otherwise recheck runs the models again (after a checker fix,
// or for a run that crashed before its check).
func Regenerate(runDir string, recheck CheckFunc) (*Results, error) {
	hist := filepath.Join(runDir, HistoryFile)
	if _, err := os.Stat(hist); err != nil {
		return nil, fmt.Errorf("%s is not a run folder: %w", runDir, err)
	}
	info, check, haveResults := loadRun(runDir)
	if recheck != nil {
		c, err := recheck(hist, info)
		if err != nil {
			return nil, fmt.Errorf("recheck: %w", err)
		}
		if c.Visualizations == nil {
			c.Visualizations = check.Visualizations
		}
		check = c
	} else if !haveResults {
		return nil, fmt.Errorf("%s has no %s to re-render; re-check the history instead", runDir, ResultsFile)
	}
	a, err := analyzeFile(hist)
	if err != nil {
		return nil, fmt.Errorf("read history: %w", err)
	}
	return write(runDir, info, check, a, time.Now())
}

// loadRun recovers RunInfo and the last Check from a run folder. results.json
// is this package's own file and is read exactly; config.json belongs to the
// harness, so only a few well-known fields are looked for in it.
func loadRun(dir string) (RunInfo, Check, bool) {
	var info RunInfo
	var check Check
	cfg, cfgErr := os.ReadFile(filepath.Join(dir, ConfigFile))
	if cfgErr == nil && json.Valid(cfg) {
		info.Config = json.RawMessage(cfg)
	}
	var res Results
	b, err := os.ReadFile(filepath.Join(dir, ResultsFile))
	have := err == nil && json.Unmarshal(b, &res) == nil && res.SchemaVersion > 0
	if have {
		cfg := info.Config
		info = res.Run
		info.Config = cfg
		// res.Notes also holds the history analysis's notes, which are
		// recomputed; res.Run.Notes are the run's own.
		check = Check{Verdict: res.Verdict, Results: res.Checks, Metrics: res.Metrics,
			Visualizations: res.Files.Visualizations}
		if res.FirstInvalidAt != nil {
			check.FirstInvalidAt = *res.FirstInvalidAt
		}
		return info, check, true
	}
	var loose struct {
		RunID      string            `json:"run_id"`
		Target     string            `json:"target"`
		TargetName string            `json:"target_name"`
		Seed       json.Number       `json:"seed"`
		Command    json.RawMessage   `json:"command"` // a string, or argv
		Start      time.Time         `json:"start"`
		End        time.Time         `json:"end"`
		Nemesis    json.RawMessage   `json:"nemesis"`
		Nemeses    []string          `json:"nemeses"`
		Semantics  *models.Semantics `json:"semantics"`
	}
	if cfgErr == nil {
		_ = json.Unmarshal(cfg, &loose) // best effort: any field may be missing
	}
	info.RunID, info.Target = loose.RunID, loose.Target
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
	return info, check, false
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

func writeFileAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return nil
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

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	tmp, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".tmp-*")
	if err != nil {
		return err
	}
	if _, err := io.Copy(tmp, in); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return nil
}
