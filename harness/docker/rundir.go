package docker

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/fencecheck/fencecheck/nemesis/lazyfs"
)

// A run's host directory holds what its containers bind-mount (data dirs,
// clock files). It is swept with the run's containers, so a killed harness
// leaks no disk either (an etcd member alone preallocates 64 MB of WAL).
// The owner's pid is kept inside, for the orphan sweep.
const (
	runDirPrefix = "fencecheck-run-"
	runDirOwner  = ".owner-pid"
	runDirStart  = ".owner-start" // the owner's start time (ownerStart)
)

func runDirPath(runID string) string {
	return filepath.Join(os.TempDir(), runDirPrefix+sanitize(runID))
}

// RunDir returns the run's host directory, creating it on first use.
func (r *Runtime) RunDir() (string, error) {
	dir := runDirPath(r.runID)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, runDirStart), []byte(ownerStart()), 0o644); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, runDirOwner), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return "", err
	}
	return dir, nil
}

// orphanedRunDir: the owner is dead. A directory without an owner file is
// left alone for an hour: its owner may be between creating it and writing
// the file.
func orphanedRunDir(dir string) bool {
	pid, err := os.ReadFile(filepath.Join(dir, runDirOwner))
	if err != nil {
		st, serr := os.Stat(dir)
		return serr == nil && time.Since(st.ModTime()) > time.Hour
	}
	start, _ := os.ReadFile(filepath.Join(dir, runDirStart))
	return !processAlive(ownerMark(strings.TrimSpace(string(pid)), strings.TrimSpace(string(start))))
}

// sweepRunDirs removes the run directory of runID, or every run directory
// when runID is empty, or (orphansOnly) those whose owner is dead.
func sweepRunDirs(runID string, orphansOnly bool) ([]Removed, error) {
	var dirs []string
	if runID != "" {
		dirs = []string{runDirPath(runID)}
	} else {
		dirs, _ = filepath.Glob(filepath.Join(os.TempDir(), runDirPrefix+"*"))
	}
	var removed []Removed
	var errs []error
	for _, dir := range dirs {
		if _, err := os.Stat(dir); err != nil {
			continue
		}
		if orphansOnly && !orphanedRunDir(dir) {
			continue
		}
		// A killed harness's power-loss layers (FUSE mounts it served) are
		// dead mounts in its folder: every access to them fails, the
		// removal with it, and the folder would stay. Detached first.
		if _, err := lazyfs.SweepDeadUnder(dir); err != nil {
			errs = append(errs, fmt.Errorf("detaching dead power-loss layers in %s: %w", dir, err))
		}
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, fmt.Errorf("removing %s: %w", dir, err))
			continue
		}
		removed = append(removed, Removed{Kind: "directory", Name: dir, RunID: strings.TrimPrefix(filepath.Base(dir), runDirPrefix)})
	}
	return removed, errors.Join(errs...)
}

// SweepRunDirsHolding removes the run directories that hold any of the
// mount points given (dead power-loss layers `fencecheck clean` detached):
// a dead layer's server was its harness, so the run is over, even when an
// earlier removal took its owner file with it.
func SweepRunDirsHolding(points []string) ([]Removed, error) {
	prefix := filepath.Join(os.TempDir(), runDirPrefix)
	seen := map[string]bool{}
	var removed []Removed
	var errs []error
	for _, p := range points {
		rest, ok := strings.CutPrefix(p, prefix)
		if !ok {
			continue
		}
		run, _, _ := strings.Cut(rest, string(filepath.Separator))
		dir := prefix + run
		if seen[dir] {
			continue
		}
		seen[dir] = true
		if _, err := os.ReadFile(filepath.Join(dir, runDirOwner)); err == nil && !orphanedRunDir(dir) {
			continue // its harness is alive after all
		}
		rm, err := sweepRunDirs(run, false)
		removed = append(removed, rm...)
		if err != nil {
			errs = append(errs, err)
		}
	}
	return removed, errors.Join(errs...)
}

// SweepOrphanRunDirs removes the run directories whose harness is gone,
// without the engine (a run's start sweeps what dead runs left: their
// dead layers detached first, never accessed).
func SweepOrphanRunDirs() ([]Removed, error) { return sweepRunDirs("", true) }
