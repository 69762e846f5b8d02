package docker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"
	"github.com/docker/docker/errdefs"

	"github.com/fencecheck/fencecheck/harness/reaper"
)

// Removed names one object a sweep removed.
type Removed struct {
	Kind  string // "container", "network", "directory" or "image"
	Name  string
	RunID string
}

func (r Removed) String() string {
	if r.RunID == "" {
		return r.Kind + " " + r.Name
	}
	return fmt.Sprintf("%s %s (run %s)", r.Kind, r.Name, r.RunID)
}

// labelFilter selects our objects, of one run when runID is not empty.
func labelFilter(runID string) filters.Args {
	f := filters.NewArgs(filters.Arg("label", LabelProject+"=1"))
	if runID != "" {
		f.Add("label", LabelRun+"="+runID)
	}
	return f
}

// Sweep removes every container and network labelled fencecheck=1 (of run
// runID only, when it is not empty), containers first since a network with
// endpoints cannot go, then the runs' host directories (RunDir). Images are
// kept: they are a cache shared by runs.
func Sweep(ctx context.Context, cli *client.Client, runID string) ([]Removed, error) {
	var removed []Removed
	var errs []error
	cs, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: labelFilter(runID)})
	if err != nil {
		return nil, wrapUnavailable(err)
	}
	for _, c := range cs {
		// A container frozen from this machine (a run killed while it
		// paused a node) would take the engine's kill only as it thaws.
		if f, ok := freezerOf(c.ID); ok && f.is(true) {
			_ = f.set(ctx, false)
		}
		err := cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true, RemoveVolumes: true})
		if err != nil && !errdefs.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("removing container %s: %w", c.ID[:12], err))
			continue
		}
		name := c.ID[:12]
		if len(c.Names) > 0 {
			name = c.Names[0][1:]
		}
		removed = append(removed, Removed{Kind: "container", Name: name, RunID: c.Labels[LabelRun]})
	}
	nets, err := cli.NetworkList(ctx, network.ListOptions{Filters: labelFilter(runID)})
	if err != nil {
		return removed, wrapUnavailable(err)
	}
	for _, n := range nets {
		if err := cli.NetworkRemove(ctx, n.ID); err != nil && !errdefs.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("removing network %s: %w", n.Name, err))
			continue
		}
		removed = append(removed, Removed{Kind: "network", Name: n.Name, RunID: n.Labels[LabelRun]})
	}
	dirs, err := sweepRunDirs(runID, false)
	removed = append(removed, dirs...)
	if err != nil {
		errs = append(errs, err)
	}
	return removed, errors.Join(errs...)
}

// SweepOrphans sweeps the runs whose owner (label fencecheck.pid) is no
// longer alive: what a harness killed with SIGKILL left behind when its
// watchdog could not clean up either. Runs whose harness is alive are left
// alone (LiveRuns lists them).
func SweepOrphans(ctx context.Context, cli *client.Client) ([]Removed, error) {
	owners, err := runOwners(ctx, cli)
	if err != nil {
		return nil, err
	}
	var removed []Removed
	var errs []error
	for _, run := range sortedRuns(owners) {
		if run == "" || processAlive(owners[run]) {
			continue
		}
		rm, err := Sweep(ctx, cli, run)
		removed = append(removed, rm...)
		if err != nil {
			errs = append(errs, err)
		}
	}
	// Directories of dead runs whose containers were already gone.
	dirs, err := sweepRunDirs("", true)
	removed = append(removed, dirs...)
	if err != nil {
		errs = append(errs, err)
	}
	return removed, errors.Join(errs...)
}

// LiveRuns lists the runs with objects in Docker whose harness is alive,
// each with its owner's pid.
func LiveRuns(ctx context.Context, cli *client.Client) (map[string]string, error) {
	owners, err := runOwners(ctx, cli)
	if err != nil {
		return nil, err
	}
	live := map[string]string{}
	for run, mark := range owners {
		if run != "" && processAlive(mark) {
			pid, _, _ := strings.Cut(mark, ":")
			live[run] = pid
		}
	}
	return live, nil
}

// runOwners maps each run with containers or networks to its owner mark.
func runOwners(ctx context.Context, cli *client.Client) (map[string]string, error) {
	owners := map[string]string{}
	cs, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: labelFilter("")})
	if err != nil {
		return nil, wrapUnavailable(err)
	}
	for _, c := range cs {
		owners[c.Labels[LabelRun]] = ownerMark(c.Labels[LabelPID], c.Labels[LabelPIDStart])
	}
	nets, err := cli.NetworkList(ctx, network.ListOptions{Filters: labelFilter("")})
	if err != nil {
		return nil, wrapUnavailable(err)
	}
	for _, n := range nets {
		owners[n.Labels[LabelRun]] = ownerMark(n.Labels[LabelPID], n.Labels[LabelPIDStart])
	}
	return owners, nil
}

func sortedRuns(m map[string]string) []string {
	runs := make([]string, 0, len(m))
	for run := range m {
		runs = append(runs, run)
	}
	sort.Strings(runs)
	return runs
}

// ownerStart is this process's start time in clock ticks since boot
// (/proc/PID/stat), recorded beside its pid as the owner of a run's objects
// (label fencecheck.pid-start, a run directory's owner-start file), so that
// a pid reused by another process after the harness died does not keep its
// run alive. The pid itself stays alone in fencecheck.pid, as older
// versions read it (one that did not parse would count as dead to them).
var ownerStart = sync.OnceValue(func() string {
	st, _ := reaper.StartTime(os.Getpid())
	return st
})

// ownerMark is "pid" or "pid:start", as processAlive reads it.
func ownerMark(pid, start string) string {
	if start == "" {
		return pid
	}
	return pid + ":" + start
}

// processAlive reports whether the owner named by mark ("pid" or
// "pid:start") is alive: the pid exists (EPERM: under another
// user) and, when the mark has a start time, is the same process. A mark
// that does not parse counts as dead (nobody can own the object).
func processAlive(mark string) bool {
	pidPart, start, hasStart := strings.Cut(mark, ":")
	pid, err := strconv.Atoi(pidPart)
	if err != nil || pid <= 0 {
		return false
	}
	if pid == os.Getpid() {
		return true
	}
	err = syscall.Kill(pid, 0)
	if err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	if hasStart {
		if st, ok := reaper.StartTime(pid); ok && st != start {
			return false // the pid was reused
		}
	}
	return true
}

// RemoveImages removes every image labelled fencecheck=1 (the build cache:
// the next run builds what it needs again). Images in use by a container
// are left alone and reported in the error.
func RemoveImages(ctx context.Context, cli *client.Client) ([]Removed, error) {
	imgs, err := cli.ImageList(ctx, image.ListOptions{Filters: labelFilter("")})
	if err != nil {
		return nil, wrapUnavailable(err)
	}
	var removed []Removed
	var errs []error
	for _, img := range imgs {
		name := img.ID
		if len(img.RepoTags) > 0 {
			name = img.RepoTags[0]
		}
		if _, err := cli.ImageRemove(ctx, img.ID, image.RemoveOptions{Force: true, PruneChildren: true}); err != nil && !errdefs.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("removing image %s: %w", name, err))
			continue
		}
		removed = append(removed, Removed{Kind: "image", Name: name})
	}
	return removed, errors.Join(errs...)
}

// TestsRequired reports whether tests must fail, not skip, when what they
// need (Docker, a program CI installs) is missing: in CI (CI=true) and
// when FENCECHECK_REQUIRE_DOCKER=1 (dockertest.Required).
func TestsRequired() bool {
	return os.Getenv("CI") == "true" || os.Getenv("FENCECHECK_REQUIRE_DOCKER") == "1"
}
