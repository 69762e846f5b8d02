package docker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fencecheck/fencecheck/fencing"
	"github.com/fencecheck/fencecheck/nemesis/timewarp"
)

// Clock faults on containers. SetClockOffset moves a container's wall
// clock without touching this machine's: every process in the container's
// PID namespace, found by its host PID, gets package timewarp's vDSO patch
// (so Go programs such as etcd are reached too), and a container started
// with ContainerSpec.ClockPreload also has timewarp's preload library
// mounted at skewDirInContainer with LD_PRELOAD set, so that a dynamically
// linked program is shifted from its first instruction. The offset is held
// per node and given to the node's new processes when its container starts
// again, as partitions are re-applied.
//
// The host must see the engine's processes (a local engine, fencecheck run
// as root or as a user allowed to ptrace them): ClockReachable says whether
// it does. Behind Docker Desktop or a remote DOCKER_HOST the same injector
// runs in a helper container instead (cmd/timewarp).

// skewDirInContainer holds the preload library and its offset file.
const skewDirInContainer = "/fencecheck/skew"

// nodeClock is one node's clock state, kept across restarts and
// replacements of its container.
type nodeClock struct {
	group    *timewarp.Group
	pid      int    // host pid of the container's first process, 0 if unknown
	skewFile string // the preload's offset file on the host, "" without it
}

// nodeClock returns node's clock state, creating it.
func (r *Runtime) nodeClock(node string) *nodeClock {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.clocks == nil {
		r.clocks = map[string]*nodeClock{}
	}
	nc := r.clocks[node]
	if nc == nil {
		nc = &nodeClock{}
		scope := func() ([]int, error) {
			r.mu.Lock()
			pid := nc.pid
			r.mu.Unlock()
			if pid == 0 {
				return nil, nil // not running: the start hook applies it
			}
			return timewarp.PIDNamespace(pid)()
		}
		also := func(d time.Duration) error {
			r.mu.Lock()
			file := nc.skewFile
			r.mu.Unlock()
			if file == "" {
				return nil
			}
			return fencing.WriteClockOffset(file, d)
		}
		nc.group = timewarp.NewGroup(scope, timewarp.GroupOptions{Also: also})
		r.clocks[node] = nc
	}
	return nc
}

// SetClockOffset moves node's wall clock to offset from real time (0 heals).
// The first change patches the container's processes (every thread stops
// for about a millisecond); later ones are a write into their memory.
func (r *Runtime) SetClockOffset(ctx context.Context, node string, offset time.Duration) error {
	if _, err := r.Container(node); err != nil {
		return err
	}
	nc := r.nodeClock(node)
	if err := r.refreshClockPID(ctx, node, nc); err != nil {
		return err
	}
	if _, err := nc.group.SetOffset(offset); err != nil {
		return fmt.Errorf("clock of %s: %w", node, err)
	}
	return nil
}

// ClockOffset is the offset node's clock is held at.
func (r *Runtime) ClockOffset(node string) time.Duration {
	return r.nodeClock(node).group.Offset()
}

// ClockReachable says why this machine cannot move node's clock, or nil
// when it can: the engine's processes must be visible here (not behind
// Docker Desktop's VM or a remote DOCKER_HOST), and ptrace must be allowed.
func (r *Runtime) ClockReachable(ctx context.Context, node string) error {
	c, err := r.Container(node)
	if err != nil {
		return err
	}
	pid, err := r.PID(ctx, node)
	if err != nil {
		return err
	}
	if err := visibleHere(pid, c.ID); err != nil {
		return err
	}
	if err := timewarp.Reachable(pid); err != nil {
		return fmt.Errorf("cannot move the clock of %s's processes: %w", node, err)
	}
	return nil
}

// visibleHere checks that host pid pid is the container's process on this
// machine: its cgroup names the container, and it is not in this
// process's own PID namespace (a container that shares the host's would
// put every process of the machine in scope).
func visibleHere(pid int, containerID string) error {
	cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil || !strings.Contains(string(cg), containerID) {
		return errors.New("the engine's processes are not visible on this machine (Docker Desktop or a remote DOCKER_HOST): container clocks need a helper container there")
	}
	theirs, err1 := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid))
	ours, err2 := os.Readlink("/proc/self/ns/pid")
	if err1 != nil || err2 != nil {
		return fmt.Errorf("reading PID namespaces: %w", errors.Join(err1, err2))
	}
	if theirs == ours {
		return errors.New("the container shares this machine's PID namespace: its clock cannot be moved alone")
	}
	return nil
}

// refreshClockPID learns the host pid of node's first process when it is
// not known or no longer runs.
func (r *Runtime) refreshClockPID(ctx context.Context, node string, nc *nodeClock) error {
	r.mu.Lock()
	pid := nc.pid
	r.mu.Unlock()
	if pid != 0 {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
			return nil
		}
	}
	st, err := r.State(ctx, node)
	if err != nil {
		return err
	}
	pid = 0
	if st.Running {
		c, _ := r.Container(node)
		if err := visibleHere(st.Pid, c.ID); err != nil {
			return fmt.Errorf("clock of %s: %w", node, err)
		}
		pid = st.Pid
	}
	r.mu.Lock()
	nc.pid = pid
	r.mu.Unlock()
	return nil
}

// syncClock is the start hook: a node whose clock is off real time gets the
// offset on its new processes, before it serves anyone.
func (r *Runtime) syncClock(ctx context.Context, node string) error {
	r.mu.Lock()
	nc := r.clocks[node]
	if nc != nil {
		nc.pid = 0
	}
	r.mu.Unlock()
	if nc == nil || nc.group.Offset() == 0 {
		return nil // at real time: the next change patches them
	}
	if err := r.refreshClockPID(ctx, node, nc); err != nil {
		return err
	}
	if _, err := nc.group.Sync(); err != nil {
		return fmt.Errorf("node %s started, but its clock offset could not be re-applied: %w", node, err)
	}
	return nil
}

// preloadBinds prepares node's preload folder (the library and an offset
// file at the node's current offset) and returns the bind and environment
// that load it. imageEnv is the image's own environment: an LD_PRELOAD it
// sets is kept after ours.
func (r *Runtime) preloadBinds(ctx context.Context, node string, env, imageEnv []string) (Bind, []string, error) {
	lib, err := timewarp.Preload(ctx)
	if err != nil {
		return Bind{}, nil, err
	}
	root, err := r.RunDir()
	if err != nil {
		return Bind{}, nil, err
	}
	dir := filepath.Join(root, sanitize(node)+"-skew")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Bind{}, nil, err
	}
	data, err := os.ReadFile(lib)
	if err != nil {
		return Bind{}, nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, timewarp.PreloadName), data, 0o755); err != nil {
		return Bind{}, nil, err
	}
	nc := r.nodeClock(node)
	file := filepath.Join(dir, "offset")
	if err := fencing.WriteClockOffset(file, nc.group.Offset()); err != nil {
		return Bind{}, nil, err
	}
	r.mu.Lock()
	nc.skewFile = file
	r.mu.Unlock()
	base := append([]string(nil), env...)
	if !hasVar(base, "LD_PRELOAD") {
		for _, kv := range imageEnv {
			if strings.HasPrefix(kv, "LD_PRELOAD=") {
				base = append(base, kv)
			}
		}
	}
	out := timewarp.PreloadEnv(base, skewDirInContainer+"/"+timewarp.PreloadName, skewDirInContainer+"/offset")
	return Bind{Host: dir, Container: skewDirInContainer, ReadOnly: true}, out, nil
}

func hasVar(env []string, name string) bool {
	for _, kv := range env {
		if strings.HasPrefix(kv, name+"=") {
			return true
		}
	}
	return false
}
