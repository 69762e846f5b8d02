// Package sweep removes what dead fencecheck runs left on this machine, at
// the start of every command that runs a system (test, shrink, conform), in
// the test suite, and in CI before and after the tests: a run killed at any
// moment (kill -9, the OOM killer, a CI timeout) must leave nothing that
// trips or hangs the next one, without a human. Live runs are never
// touched: a run is dead when the process that owned it (pid and start
// time) is gone.
//
// It never accesses a mount: a dead layer is found in the mount table, its
// FUSE connection aborted and the mount detached (lazyfs.SweepDead) before
// any folder that held it is read or removed.
package sweep

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/fencecheck/fencecheck/harness/docker"
	"github.com/fencecheck/fencecheck/nemesis/hostagent"
	"github.com/fencecheck/fencecheck/nemesis/lazyfs"
)

// LayerAgentDir is the local layer agent's folder in a run's store folder
// (harness/nodes): it holds the agent's pid file while the agent lives.
const LayerAgentDir = "layer-agent"

// Swept is what one sweep removed.
type Swept struct {
	// Mounts are the dead power-loss layers detached.
	Mounts []string
	// Removed are the folders removed: dead runs' folders in the temporary
	// folder, and dead layer agents' folders and mount points in the store.
	Removed []string
}

// Empty says the sweep found nothing.
func (s Swept) Empty() bool { return len(s.Mounts) == 0 && len(s.Removed) == 0 }

// Lines says what was swept, one line each.
func (s Swept) Lines() []string {
	var out []string
	for _, m := range s.Mounts {
		out = append(out, "detached dead power-loss layer "+m)
	}
	for _, r := range s.Removed {
		out = append(out, "removed "+r)
	}
	return out
}

// Leftovers sweeps this machine's dead layers and the temporary folder's
// dead run folders, and, under each of stores (run store folders, "" for
// none), the layer folders of runs whose layer agent is gone.
func Leftovers(stores ...string) (Swept, error) {
	var s Swept
	var errs []error
	mounts, err := lazyfs.SweepDead()
	s.Mounts = mounts
	errs = append(errs, err)
	dirs, err := docker.SweepOrphanRunDirs()
	for _, d := range dirs {
		s.Removed = append(s.Removed, d.Name)
	}
	errs = append(errs, err)
	for _, store := range stores {
		if store == "" {
			continue
		}
		removed, err := storeLayers(store)
		s.Removed = append(s.Removed, removed...)
		errs = append(errs, err)
	}
	return s, errors.Join(errs...)
}

// storeLayers removes, in each run folder of store (STORE/TARGET/RUN), the
// layer agent's folder and the nodes' mount points when that agent is
// gone. The run's evidence (history, data, logs) stays.
func storeLayers(store string) ([]string, error) {
	agents, err := filepath.Glob(filepath.Join(store, "*", "*", LayerAgentDir))
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	for _, a := range agents {
		if !hostagent.AgentGone(a) {
			continue
		}
		run := filepath.Dir(a)
		// Its mounts were detached above (their server, the agent, is
		// gone): the mount points are plain empty folders now.
		points, _ := filepath.Glob(filepath.Join(run, "nodes", "*", "mnt"))
		for _, p := range points {
			if err := os.Remove(p); err == nil {
				removed = append(removed, p)
			} else if !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, fmt.Errorf("removing the mount point %s: %w", p, err))
			}
		}
		if err := os.RemoveAll(a); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, a)
	}
	return removed, errors.Join(errs...)
}
