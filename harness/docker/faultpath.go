package docker

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/fencecheck/fencecheck/nemesis/timewarp"
)

// Container faults reach a container's namespaces one of two ways, chosen
// once per run and per kind of fault; everything above the injection step
// (the peers a node drops, the offset its clock is held at, their re-apply
// after a restart, the heal) is the same code for both:
//
//   - host: from this machine, by the container's host PID (nsenter and
//     iptables into its network namespace; the vDSO patch through ptrace).
//     It needs the engine's processes on this machine and the right to
//     enter them: a local engine, fencecheck as root.
//   - api: through the engine's API alone, with fault helpers (helper.go)
//     that join the container's namespaces. It works wherever containers
//     can be created: Docker Desktop, rootless engines, a DOCKER_HOST
//     elsewhere.
//
// Restarts (kill and start) always go through the API: they need nothing
// else. Pauses take the container's freezer file where this machine has
// it, the API otherwise (freeze.go).
const (
	PathHost = "host"
	PathAPI  = "api"
)

// FaultPathEnv forces the path: "host", "api", or "auto" (the default:
// host where this machine can see and enter the engine's processes, the
// API otherwise).
const FaultPathEnv = "FENCECHECK_FAULT_PATH"

// Kinds of fault that have a path.
const (
	faultPartition = "partition"
	faultClock     = "clock"
)

// forcedPath reads FaultPathEnv ("" for auto).
func forcedPath() (string, error) {
	switch v := os.Getenv(FaultPathEnv); v {
	case "", "auto":
		return "", nil
	case PathHost, PathAPI:
		return v, nil
	default:
		return "", fmt.Errorf("%s=%q: want host, api or auto", FaultPathEnv, v)
	}
}

// faultPath is the path faults of kind take, decided at the first fault of
// that kind from the container it hits (c, running as host pid pid) and
// logged with the reason.
func (r *Runtime) faultPath(kind string, c *Container, pid int) string {
	r.mu.Lock()
	p, ok := r.paths[kind]
	r.mu.Unlock()
	if ok {
		return p
	}
	p, why := PathHost, ""
	if forced, _ := forcedPath(); forced != "" {
		p, why = forced, FaultPathEnv+"="+forced
	} else if err := hostReach(kind, pid, c.ID); err != nil {
		p, why = PathAPI, err.Error()
	}
	r.mu.Lock()
	if r.paths == nil {
		r.paths = map[string]string{}
	}
	if prev, ok := r.paths[kind]; ok {
		p = prev // another fault decided meanwhile
	} else {
		r.paths[kind] = p
		if p == PathAPI {
			fmt.Fprintf(r.log, "docker: %s faults through helper containers (the engine's API): %s\n", kind, why)
		} else {
			fmt.Fprintf(r.log, "docker: %s faults from this machine (host PIDs)\n", kind)
		}
	}
	r.mu.Unlock()
	return p
}

// FaultPath says which path faults of kind ("partition", "clock") took in
// this run: PathHost, PathAPI, or "" before the first such fault.
func (r *Runtime) FaultPath(kind string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.paths[kind]
}

// hostReach says why this machine cannot inject faults of kind into the
// container running as host pid pid itself, or nil when it can.
func hostReach(kind string, pid int, containerID string) error {
	if err := visibleHere(pid, containerID); err != nil {
		return err
	}
	switch kind {
	case faultPartition:
		// nsenter needs CAP_SYS_ADMIN over the namespace: root, for a
		// rootful engine; a rootless engine's namespaces belong to its own
		// user namespace, which this process is not in either way.
		if os.Geteuid() != 0 {
			return errors.New("entering the containers' network namespaces from this machine needs root")
		}
		if err := PartitionTools(); err != nil {
			return err
		}
		f, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", pid))
		if err != nil {
			return fmt.Errorf("this machine may not enter the containers' network namespaces: %w", err)
		}
		f.Close()
	case faultClock:
		if err := timewarp.Reachable(pid); err != nil {
			return fmt.Errorf("this machine may not ptrace the containers' processes: %w", err)
		}
	}
	return nil
}

// apiClockReach says why a clock helper cannot work on this engine, or nil:
// the vDSO patch is implemented for amd64 only, and the helper runs on the
// engine's machine.
func (r *Runtime) apiClockReach(ctx context.Context) error {
	r.mu.Lock()
	arch := r.engineArch
	r.mu.Unlock()
	if arch == "" {
		info, err := r.cli.Info(ctx)
		if err != nil {
			return fmt.Errorf("asking the engine for its architecture: %w", wrapUnavailable(err))
		}
		arch = info.Architecture
		r.mu.Lock()
		r.engineArch = arch
		r.mu.Unlock()
	}
	if arch != "x86_64" && arch != "amd64" {
		return fmt.Errorf("the engine runs on %s, and the clock helper's vDSO patch is implemented for amd64 only", arch)
	}
	return nil
}
