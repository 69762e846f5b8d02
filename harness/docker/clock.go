package docker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/fencecheck/fencecheck/fencing"
	"github.com/fencecheck/fencecheck/nemesis/timewarp"
)

// Clock faults on containers. SetClockOffset moves a container's wall
// clock without touching this machine's: every process in the container's
// PID namespace gets package timewarp's vDSO patch (so Go programs such as
// etcd are reached too), and a container started with
// ContainerSpec.ClockPreload also has timewarp's preload library mounted at
// skewDirInContainer with LD_PRELOAD set, so that a dynamically linked
// program is shifted from its first instruction. The offset is held per
// node and given to the node's new processes when its container starts
// again, as partitions are re-applied.
//
// The patch is made from this machine by host PID where it can see the
// engine's processes and may ptrace them (a local engine, fencecheck as
// root), and otherwise by a timewarp helper in the container's PID
// namespace (faultpath.go, helper.go): ClockReachable says whether either
// way works.

// skewDirInContainer holds the preload library and its offset file.
const skewDirInContainer = "/fencecheck/skew"

// nodeClock is one node's clock state, kept across restarts and
// replacements of its container.
type nodeClock struct {
	// offset is what the node's clock is held at, on either path.
	offset time.Duration
	// group patches the processes from this machine (the host path).
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
			return timewarp.SetPreloadOffset(file, d)
		}
		nc.group = timewarp.NewGroup(scope, timewarp.GroupOptions{Also: also})
		r.clocks[node] = nc
	}
	return nc
}

// SetClockOffset moves node's wall clock to offset from real time (0 heals).
// The first change patches the container's processes (every thread stops
// for about a millisecond); later ones are a write into their memory. A
// node that is not running gets the offset when it starts.
func (r *Runtime) SetClockOffset(ctx context.Context, node string, offset time.Duration) error {
	c, err := r.Container(node)
	if err != nil {
		return err
	}
	nc := r.nodeClock(node)
	r.mu.Lock()
	nc.offset = offset
	r.mu.Unlock()
	// Once the path is known to be this machine, a change is a write into
	// the patched processes (a strobe changes every 50 ms): no inspect.
	if r.FaultPath(faultClock) != PathHost {
		st, err := r.State(ctx, node)
		if err != nil {
			return err
		}
		if st.Running && r.faultPath(faultClock, c, st.Pid) == PathAPI ||
			!st.Running && r.FaultPath(faultClock) == PathAPI {
			return r.helperClock(ctx, node, c, st, nc, offset)
		}
	}
	if err := r.refreshClockPID(ctx, node, nc); err != nil {
		return err
	}
	if _, err := nc.group.SetOffset(offset); err != nil {
		return fmt.Errorf("clock of %s: %w", node, err)
	}
	return nil
}

// helperClock hands the offset to the timewarp helper in node's PID
// namespace (a new one after a restart: the old one died with its
// namespace), then moves the preload's file. A heal needs no helper where
// none joined the namespace: its processes were never patched.
func (r *Runtime) helperClock(ctx context.Context, node string, c *Container, st *container.State, nc *nodeClock, offset time.Duration) error {
	if st.Running && (offset != 0 || r.joined(ImageTimewarp, node, c, st.StartedAt)) {
		h, err := r.helperFor(ctx, ImageTimewarp, node, c, st.StartedAt)
		if err != nil {
			return fmt.Errorf("clock of %s: %w", node, err)
		}
		ans, err := h.ask(ctx, fmt.Sprintf("offset %d", int64(offset)))
		if err != nil {
			return fmt.Errorf("clock of %s: %w", node, err)
		}
		var procs, injected, preloadOnly int
		if _, err := fmt.Sscanf(ans, "processes=%d injected=%d preload-only=%d", &procs, &injected, &preloadOnly); err != nil {
			return fmt.Errorf("clock of %s: the helper answered %q", node, ans)
		}
		if procs == 0 {
			return fmt.Errorf("clock of %s: the helper found no process to move in the container", node)
		}
	}
	r.mu.Lock()
	file := nc.skewFile
	r.mu.Unlock()
	if file != "" {
		return timewarp.SetPreloadOffset(file, offset)
	}
	return nil
}

// ClockOffset is the offset node's clock is held at.
func (r *Runtime) ClockOffset(node string) time.Duration {
	nc := r.nodeClock(node)
	r.mu.Lock()
	defer r.mu.Unlock()
	return nc.offset
}

// ClockReachable says why node's clock cannot be moved, or nil when it
// can: from this machine (the engine's processes visible here, not behind
// Docker Desktop's VM or a remote DOCKER_HOST, and ptrace allowed), or else
// through a helper container (an amd64 engine).
func (r *Runtime) ClockReachable(ctx context.Context, node string) error {
	c, err := r.Container(node)
	if err != nil {
		return err
	}
	pid, err := r.PID(ctx, node)
	if err != nil {
		return err
	}
	forced, _ := forcedPath()
	var hostErr error
	if forced != PathAPI {
		if hostErr = hostReach(faultClock, pid, c.ID); hostErr == nil || forced == PathHost {
			return hostErr
		}
	}
	apiErr := r.apiClockReach(ctx)
	if apiErr == nil || hostErr == nil {
		return apiErr
	}
	return fmt.Errorf("%v; through the engine's API: %v", hostErr, apiErr)
}

// visibleHere checks that host pid pid is the container's process on this
// machine: its cgroup names the container, and it is not in this
// process's own PID namespace (a container that shares the host's would
// put every process of the machine in scope).
func visibleHere(pid int, containerID string) error {
	cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil || !strings.Contains(string(cg), containerID) {
		return errors.New("the engine's processes are not visible on this machine (Docker Desktop, a rootless or remote engine)")
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
	var offset time.Duration
	if nc != nil {
		nc.pid = 0
		offset = nc.offset
	}
	r.mu.Unlock()
	if nc == nil || offset == 0 {
		return nil // at real time: the next change patches them
	}
	c, st, err := r.inspect(ctx, node)
	if err != nil {
		return err
	}
	if st.Running && r.faultPath(faultClock, c, st.Pid) == PathAPI {
		if err := r.helperClock(ctx, node, c, st, nc, offset); err != nil {
			return fmt.Errorf("node %s started, but its clock offset could not be re-applied: %w", node, err)
		}
		return nil
	}
	if err := r.refreshClockPID(ctx, node, nc); err != nil {
		return err
	}
	if _, err := nc.group.Sync(); err != nil {
		return fmt.Errorf("node %s started, but its clock offset could not be re-applied: %w", node, err)
	}
	r.mu.Lock()
	pid := nc.pid
	r.mu.Unlock()
	go resyncClock(r, nc, pid)
	return nil
}

// clockResyncs are when, after a container's start, its clock offset is
// given again: its first process may not be its program yet when the
// start returns (runc's init execs it a moment later, later on a loaded
// machine), and the patch made before the exec is lost with it (etcd, at
// a load of 5: a member restarted during a clock fault ran at real time).
// Sync patches only what is not patched, and patches again an image exec'd
// since.
var clockResyncs = []time.Duration{100 * time.Millisecond, 300 * time.Millisecond, time.Second, 3 * time.Second}

// resyncClock gives nc's offset again at clockResyncs, while the node's
// first process is still pid (not restarted since) and an offset is held.
func resyncClock(r *Runtime, nc *nodeClock, pid int) {
	var waited time.Duration
	for _, at := range clockResyncs {
		time.Sleep(at - waited)
		waited = at
		r.mu.Lock()
		same := nc.pid == pid && pid != 0
		r.mu.Unlock()
		if !same {
			return
		}
		nc.group.Sync() // a process gone meanwhile is the next start's
	}
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
	r.mu.Lock()
	held := nc.offset
	r.mu.Unlock()
	if err := fencing.WriteClockOffset(file, held); err != nil {
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
