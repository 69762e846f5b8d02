package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/pkg/stdcopy"
	"github.com/docker/go-connections/nat"

	"github.com/fencecheck/fencecheck/harness/ports"
)

// ContainerSpec is one node's container.
type ContainerSpec struct {
	// Node names the node; it is unique within the run.
	Node  string
	Image string
	// Cmd is the full command line (scratch images have no shell and the
	// images here set no entrypoint).
	Cmd []string
	Env []string
	// User runs the command as "uid:gid" (default: the image's, root for
	// ours). A container writing into a host directory should run as the
	// harness's own user, or the harness cannot delete what it wrote.
	User string
	// IP is the static address on the run network (Network.HostIP).
	IP string
	// Ports are container TCP ports to publish on 127.0.0.1, each on a free
	// host port that stays the same across restarts (ports.Stable: Docker's
	// own random allocation would pick a new port at every start). Host-side clients reach
	// containers only through these, never through container IPs.
	Ports []int
	// HostPorts pins the host side of published ports (a container that
	// replaces an earlier one keeps its endpoints); others get free ports.
	HostPorts map[int]int
	// Binds are host directories mounted into the container.
	Binds []Bind
	// ClockPreload mounts the clock-skew preload library and sets
	// LD_PRELOAD, for a program that may be dynamically linked (see
	// SetClockOffset, which reaches every container's processes anyway).
	ClockPreload bool
	// CapAdd, Devices and SecurityOpt are for containers that play whole
	// machines (the SSH lab's hosts, harness/docker/sshlab), where
	// fencecheck's faults act from inside as on a real host: nftables
	// (NET_ADMIN), ptrace (SYS_PTRACE), FUSE mounts (SYS_ADMIN and
	// /dev/fuse). A node's own container needs none of them: its faults
	// come from this machine or from helper containers. There is no
	// privileged mode on purpose.
	//
	// CapAdd are capabilities added to the engine's default set, without
	// the CAP_ prefix ("NET_ADMIN").
	CapAdd []string
	// Devices are host device nodes given to the container at the same
	// path, for reading, writing and mknod ("/dev/fuse").
	Devices []string
	// SecurityOpt are the engine's security options
	// ("apparmor=unconfined": AppArmor's docker-default profile denies
	// mount(2) even with SYS_ADMIN; an engine without AppArmor ignores it).
	SecurityOpt []string
}

// Bind mounts host path Host at Container.
type Bind struct {
	Host, Container string
	ReadOnly        bool
}

// Container is a running (or stopped, or paused) node.
type Container struct {
	Node string
	ID   string
	Name string
	IP   string
	// HostPorts maps each published container port to its 127.0.0.1 port.
	HostPorts map[int]int
}

// Addr is "127.0.0.1:<host port>" for a published container port.
func (c *Container) Addr(port int) string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(c.HostPorts[port]))
}

// HostUser is "uid:gid" of this process, for ContainerSpec.User.
func HostUser() string { return fmt.Sprintf("%d:%d", os.Getuid(), os.Getgid()) }

// containerName is unique per run and node; Docker allows [a-zA-Z0-9_.-].
func (r *Runtime) containerName(node string) string {
	return "fencecheck-" + sanitize(r.runID) + "-" + sanitize(node)
}

func sanitize(s string) string {
	b := []byte(s)
	for i, c := range b {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-'
		if !ok {
			b[i] = '-'
		}
	}
	return string(b)
}

// Run creates and starts a container on the run network.
func (r *Runtime) Run(ctx context.Context, spec ContainerSpec) (*Container, error) {
	nw, err := r.Network(ctx)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	_, dup := r.containers[spec.Node]
	r.mu.Unlock()
	if dup {
		return nil, fmt.Errorf("node %s already exists in run %s", spec.Node, r.runID)
	}
	c := &Container{Node: spec.Node, Name: r.containerName(spec.Node), IP: spec.IP, HostPorts: map[int]int{}}
	exposed := nat.PortSet{}
	bindings := nat.PortMap{}
	for _, p := range spec.Ports {
		hp, pinned := spec.HostPorts[p]
		if !pinned {
			var err error
			if hp, err = ports.Stable(); err != nil {
				return nil, fmt.Errorf("finding a host port for %s: %w", spec.Node, err)
			}
		}
		port := nat.Port(fmt.Sprintf("%d/tcp", p))
		exposed[port] = struct{}{}
		bindings[port] = []nat.PortBinding{{HostIP: "127.0.0.1", HostPort: strconv.Itoa(hp)}}
		c.HostPorts[p] = hp
	}
	env := spec.Env
	if spec.ClockPreload {
		img, err := r.cli.ImageInspect(ctx, spec.Image)
		if err != nil {
			return nil, fmt.Errorf("inspecting image %s: %w", spec.Image, wrapUnavailable(err))
		}
		var imageEnv []string
		if img.Config != nil {
			imageEnv = img.Config.Env
		}
		bind, penv, err := r.preloadBinds(ctx, spec.Node, spec.Env, imageEnv)
		if err != nil {
			return nil, fmt.Errorf("preparing the clock of %s: %w", spec.Node, err)
		}
		spec.Binds = append(append([]Bind(nil), spec.Binds...), bind)
		env = penv
	}
	var binds []string
	for _, b := range spec.Binds {
		s := b.Host + ":" + b.Container
		if b.ReadOnly {
			s += ":ro"
		}
		binds = append(binds, s)
	}
	var devices []container.DeviceMapping
	for _, d := range spec.Devices {
		devices = append(devices, container.DeviceMapping{PathOnHost: d, PathInContainer: d, CgroupPermissions: "rwm"})
	}
	resp, err := r.cli.ContainerCreate(ctx,
		&container.Config{
			Image:        spec.Image,
			Cmd:          spec.Cmd,
			Env:          env,
			User:         spec.User,
			Hostname:     spec.Node,
			ExposedPorts: exposed,
			Labels:       r.labels(map[string]string{LabelNode: spec.Node}),
		},
		&container.HostConfig{
			Binds:        binds,
			PortBindings: bindings,
			// Partitions and clock steps are made from the host or by
			// helper containers (faultpath.go): the node's own container
			// needs no extra capability.
			NetworkMode: container.NetworkMode(nw.Name),
			CapAdd:      spec.CapAdd,
			SecurityOpt: spec.SecurityOpt,
			Resources:   container.Resources{Devices: devices},
		},
		&network.NetworkingConfig{EndpointsConfig: map[string]*network.EndpointSettings{
			nw.Name: {IPAMConfig: &network.EndpointIPAMConfig{IPv4Address: spec.IP}},
		}},
		nil, c.Name)
	if err != nil {
		return nil, fmt.Errorf("creating container %s: %w", c.Name, wrapUnavailable(err))
	}
	c.ID = resp.ID
	r.mu.Lock()
	r.containers[spec.Node] = c
	r.mu.Unlock()
	if err := r.Start(ctx, spec.Node); err != nil {
		return nil, err
	}
	return c, nil
}

// Remove deletes a node's container (stopping it if needed), e.g. to run a
// replacement with another command line. Its partition rules are kept and
// apply to the replacement.
func (r *Runtime) Remove(ctx context.Context, node string) error {
	c, err := r.Container(node)
	if err != nil {
		return err
	}
	r.retireHelpers(ctx, node)
	if err := r.cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true, RemoveVolumes: true}); err != nil {
		return fmt.Errorf("removing %s: %w", c.Name, wrapUnavailable(err))
	}
	r.mu.Lock()
	delete(r.containers, node)
	r.mu.Unlock()
	return nil
}

// Container returns the node's container, or an error naming the node.
func (r *Runtime) Container(node string) (*Container, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.containers[node]
	if !ok {
		return nil, fmt.Errorf("no container for node %q in run %s", node, r.runID)
	}
	return c, nil
}

// Containers lists the run's containers (in no particular order).
func (r *Runtime) Containers() []*Container {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*Container, 0, len(r.containers))
	for _, c := range r.containers {
		out = append(out, c)
	}
	return out
}

// Start starts a created or stopped container and re-applies its partition
// and link loss, duplication and delay rules (they live in the container's network namespace, which a stop
// destroys) and its clock offset (its processes are new).
func (r *Runtime) Start(ctx context.Context, node string) error {
	c, err := r.Container(node)
	if err != nil {
		return err
	}
	if err := r.cli.ContainerStart(ctx, c.ID, container.StartOptions{}); err != nil {
		return fmt.Errorf("starting %s: %w", c.Name, wrapUnavailable(err))
	}
	clockErr := r.syncClock(ctx, node)
	return errors.Join(clockErr, r.reapplyPartition(ctx, node), r.reapplyShares(ctx, node), r.reapplyDelay(ctx, node))
}

// Stop stops a container gracefully (SIGTERM, then SIGKILL after timeout).
func (r *Runtime) Stop(ctx context.Context, node string, timeout time.Duration) error {
	secs := int(timeout.Seconds())
	return r.onContainer(node, "stopping", func(id string) error {
		return r.cli.ContainerStop(ctx, id, container.StopOptions{Timeout: &secs})
	})
}

// onContainer asks the engine to act on node's container; an error says
// what it was doing.
func (r *Runtime) onContainer(node, doing string, call func(id string) error) error {
	c, err := r.Container(node)
	if err != nil {
		return err
	}
	if err := call(c.ID); err != nil {
		return fmt.Errorf("%s %s: %w", doing, c.Name, wrapUnavailable(err))
	}
	return nil
}

// Kill sends SIGKILL and waits until the container has stopped, so a
// following Start does not race the old process.
func (r *Runtime) Kill(ctx context.Context, node string) error {
	c, err := r.Container(node)
	if err != nil {
		return err
	}
	waitC, errC := r.cli.ContainerWait(ctx, c.ID, container.WaitConditionNotRunning)
	if err := r.cli.ContainerKill(ctx, c.ID, "SIGKILL"); err != nil {
		return fmt.Errorf("killing %s: %w", c.Name, wrapUnavailable(err))
	}
	// A process frozen from this machine takes the signal as it thaws
	// (cgroup v1), before it runs another instruction of its own.
	r.thawHost(ctx, node)
	r.retireHelpers(ctx, node)
	select {
	case <-waitC:
		return nil
	case err := <-errC:
		return fmt.Errorf("waiting for %s to die: %w", c.Name, err)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Restart is Kill followed by Start (the process gets no chance to flush).
func (r *Runtime) Restart(ctx context.Context, node string) error {
	if err := r.Kill(ctx, node); err != nil {
		return err
	}
	return r.Start(ctx, node)
}

// Pause freezes every process of the container with the freezer cgroup:
// its file on this machine where there is one (freeze.go), or the API.
// (SIGSTOP through the API would mark the container as stopped by hand.)
func (r *Runtime) Pause(ctx context.Context, node string) error {
	return r.onContainer(node, "pausing", func(id string) error {
		if f, ok := hostFreezer(id); ok {
			if err := f.set(ctx, true); err != nil {
				_ = f.set(context.WithoutCancel(ctx), false)
				return err
			}
			r.mu.Lock()
			if r.frozen == nil {
				r.frozen = map[string]freezer{}
			}
			r.frozen[node] = f
			r.mu.Unlock()
			return nil
		}
		return r.cli.ContainerPause(ctx, id)
	})
}

// Unpause thaws a paused container.
func (r *Runtime) Unpause(ctx context.Context, node string) error {
	return r.onContainer(node, "unpausing", func(id string) error {
		if r.thawHost(ctx, node) {
			return nil
		}
		return r.cli.ContainerUnpause(ctx, id)
	})
}

// Paused says whether the node's container is frozen, from this machine
// or through the engine.
func (r *Runtime) Paused(ctx context.Context, node string) (bool, error) {
	r.mu.Lock()
	_, host := r.frozen[node]
	r.mu.Unlock()
	if host {
		return true, nil
	}
	st, err := r.State(ctx, node)
	if err != nil {
		return false, err
	}
	return st.Paused, nil
}

// thawHost thaws a container frozen through its freezer file (the engine
// does not know it is paused); false when it was not.
func (r *Runtime) thawHost(ctx context.Context, node string) bool {
	r.mu.Lock()
	f, ok := r.frozen[node]
	delete(r.frozen, node)
	r.mu.Unlock()
	if ok {
		_ = f.set(ctx, false)
	}
	return ok
}

// State is the container's state as Docker reports it.
func (r *Runtime) State(ctx context.Context, node string) (*container.State, error) {
	c, err := r.Container(node)
	if err != nil {
		return nil, err
	}
	info, err := r.cli.ContainerInspect(ctx, c.ID)
	if err != nil {
		return nil, fmt.Errorf("inspecting %s: %w", c.Name, wrapUnavailable(err))
	}
	return info.State, nil
}

// inspect is the node's container and its state.
func (r *Runtime) inspect(ctx context.Context, node string) (*Container, *container.State, error) {
	c, err := r.Container(node)
	if err != nil {
		return nil, nil, err
	}
	st, err := r.State(ctx, node)
	return c, st, err
}

// PID is the host pid of the container's main process (0 when not running).
func (r *Runtime) PID(ctx context.Context, node string) (int, error) {
	st, err := r.State(ctx, node)
	if err != nil {
		return 0, err
	}
	if !st.Running {
		return 0, fmt.Errorf("node %s is not running", node)
	}
	return st.Pid, nil
}

// SaveLogs writes each container's stdout and stderr to dir/<node>.log.
func (r *Runtime) SaveLogs(ctx context.Context, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var firstErr error
	for _, c := range r.Containers() {
		if err := r.saveLog(ctx, c, filepath.Join(dir, c.Node+".log")); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	return firstErr
}

// SaveLog writes one node's stdout and stderr to path (e.g. before its
// container is replaced, which would lose them).
func (r *Runtime) SaveLog(ctx context.Context, node, path string) error {
	c, err := r.Container(node)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return r.saveLog(ctx, c, path)
}

func (r *Runtime) saveLog(ctx context.Context, c *Container, path string) error {
	rc, err := r.cli.ContainerLogs(ctx, c.ID, container.LogsOptions{ShowStdout: true, ShowStderr: true, Timestamps: true})
	if err != nil {
		return fmt.Errorf("logs of %s: %w", c.Name, wrapUnavailable(err))
	}
	defer rc.Close()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	// Containers run without a TTY, so the stream is multiplexed.
	if _, err := stdcopy.StdCopy(f, f, rc); err != nil && err != io.EOF {
		f.Close()
		return fmt.Errorf("logs of %s: %w", c.Name, err)
	}
	return f.Close()
}
