package nodes

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/fencecheck/fencecheck/fencing"
	"github.com/fencecheck/fencecheck/harness/docker"
	"github.com/fencecheck/fencecheck/nemesis/timewarp"
)

// containers is the driver of container nodes: the run's own network and
// containers (harness/docker), faults through the engine's API (freezer,
// kill, start) and in each container's own namespaces (partition rules,
// clock patches: from this machine, or by a helper container).
type containers struct {
	unreachable
	c    *Cluster
	rt   *docker.Runtime
	nw   *docker.Network
	tags map[string]string // Container.Build -> tag
	next int               // the next host index on the network
}

// AccountUID is the uid an Account runs as when the harness runs as root
// (otherwise the harness's own uid, so that it can remove what the node
// wrote).
const AccountUID = 999

// images builds (or finds) the images the container nodes name, then makes
// the run's runtime and network.
func (d *containers) images(ctx context.Context, ms []*member) error {
	var names []string
	any := false
	for _, m := range ms {
		if m.Container == nil {
			continue
		}
		any = true
		if b := m.Container.Build; b != "" && !contains(names, b) {
			names = append(names, b)
		}
	}
	if !any {
		return nil
	}
	env := d.c.Env()
	log := d.c.opts.Log
	if log == nil {
		log = env.Log
	}
	if len(names) > 0 {
		tags, err := docker.EnsureImages(ctx, log, names...)
		if err != nil {
			return err
		}
		d.tags = tags
	}
	rt, err := docker.New(ctx, env.RunID, docker.Options{Log: log})
	if err != nil {
		return err
	}
	d.c.mu.Lock()
	d.rt = rt
	d.c.mu.Unlock()
	d.nw, err = rt.Network(ctx)
	return err
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// prepare gives the node the next address on the run network; its ports
// are the container's own.
func (d *containers) prepare(_ context.Context, m *member) error {
	m.host = d.nw.HostIP(d.next)
	d.next++
	for _, p := range m.Ports {
		m.bound[p.Name] = p.Number
	}
	return nil
}

// own makes a container node's data folder writable by the account it runs
// as: any (the image's own user), or the named account's (0700).
func (d *containers) own(m *member, dir string) error {
	c := m.Container
	switch {
	case c == nil:
		return nil
	case c.ImageUser:
		return os.Chmod(dir, 0o777)
	case c.Account != "":
		if os.Getuid() == 0 {
			if err := os.Chown(dir, AccountUID, AccountUID); err != nil {
				return err
			}
		}
		return os.Chmod(dir, 0o700)
	}
	return nil
}

func (d *containers) view(m *member) (string, string) {
	if m.usesClockFile() {
		return m.Data.Path, ClockFileInContainer
	}
	return m.Data.Path, ""
}

// account is the uid:gid an Account runs as, and its passwd and group files.
func account(name, home string) (user string, files map[string]string) {
	uid, gid := os.Getuid(), os.Getgid()
	if uid == 0 {
		uid, gid = AccountUID, AccountUID
	}
	return fmt.Sprintf("%d:%d", uid, gid), map[string]string{
		"/etc/passwd": fmt.Sprintf("root:x:0:0:root:/:/bin/sh\n%s:x:%d:%d:%s:%s:/bin/sh\n", name, uid, gid, name, home),
		"/etc/group":  fmt.Sprintf("root:x:0:\n%s:x:%d:\n", name, gid),
	}
}

// spec is the node's container.
func (d *containers) spec(m *member) (docker.ContainerSpec, error) {
	c := m.Container
	image := c.Image
	if c.Build != "" {
		image = d.tags[c.Build]
	}
	s := docker.ContainerSpec{Node: m.Name, Image: image, IP: m.host, User: docker.HostUser(),
		Env: append(nodeEnv(m), substituteEnv(c.Env, m.vars)...), ClockPreload: m.Clock.Via == ClockProcesses && m.Clock.Preload}
	if c.Cmd != nil {
		s.Cmd = substituteAll(c.Cmd, m.vars)
	}
	for _, p := range m.Ports {
		s.Ports = append(s.Ports, p.Number)
	}
	files := map[string]string{}
	for path, content := range c.Files {
		files[path] = Substitute(content, m.vars)
	}
	switch {
	case c.ImageUser:
		s.User = ""
	case c.Account != "":
		user, acct := account(c.Account, m.Data.Path)
		s.User = user
		for k, v := range acct {
			files[k] = v
		}
	}
	for path, content := range files {
		host := filepath.Join(m.dir, "files", filepath.FromSlash(path))
		if err := os.MkdirAll(filepath.Dir(host), 0o755); err != nil {
			return s, err
		}
		if err := os.WriteFile(host, []byte(content), 0o644); err != nil {
			return s, err
		}
		s.Binds = append(s.Binds, docker.Bind{Host: host, Container: path, ReadOnly: true})
	}
	if m.hasData() {
		s.Binds = append(s.Binds, docker.Bind{Host: m.workDir(), Container: m.Data.Path})
	}
	switch m.Clock.Via {
	case ClockFile:
		s.Env = append(s.Env, fencing.ClockFileEnv+"="+ClockFileInContainer)
	case ClockSkewLibrary:
		s.Env = append(s.Env, "LD_PRELOAD="+docker.SkewLibrary, timewarp.PreloadFileEnv+"="+ClockFileInContainer,
			timewarp.PreloadRefreshEnv+"=5")
	}
	if m.usesClockFile() {
		s.Binds = append(s.Binds, docker.Bind{Host: m.clockDir(), Container: ClockDirInContainer, ReadOnly: true})
	}
	return s, nil
}

// nodeEnv tells a started node's program who and where it is.
func nodeEnv(m *member) []string {
	env := []string{"FENCECHECK_NODE=" + m.Name}
	if p, ok := m.vars["port"]; ok {
		env = append(env, "FENCECHECK_PORT="+p)
	}
	if v, ok := m.vars["data"]; ok {
		env = append(env, "FENCECHECK_DATA="+v)
	}
	return env
}

// start runs the node's container the first time, and starts it again
// after a kill.
func (d *containers) start(ctx context.Context, m *member) error {
	if _, err := d.rt.Container(m.Name); err == nil {
		return d.rt.Start(ctx, m.Name)
	}
	s, err := d.spec(m)
	if err != nil {
		return err
	}
	_, err = d.rt.Run(ctx, s)
	return err
}

func (d *containers) running(ctx context.Context, m *member) (bool, error) {
	st, err := d.rt.State(ctx, m.Name)
	if err != nil {
		return false, err
	}
	return st.Running, nil
}

// pause freezes every process of the container (freezer cgroup).
func (d *containers) pause(ctx context.Context, m *member) error { return d.rt.Pause(ctx, m.Name) }

// resume thaws it; a container no longer paused (a restart in between
// thaws it) needs nothing, so the final heal never fails on it.
func (d *containers) resume(ctx context.Context, m *member) error {
	if paused, err := d.rt.Paused(ctx, m.Name); err == nil && !paused {
		return nil
	}
	return d.rt.Unpause(ctx, m.Name)
}

// kill sends SIGKILL to every process of the container at once: no chance
// to flush.
func (d *containers) kill(ctx context.Context, m *member) error { return d.rt.Kill(ctx, m.Name) }

// hostAddr is the port's published address on 127.0.0.1: this machine
// never reaches containers through their network addresses.
func (d *containers) hostAddr(m *member, port string) (string, error) {
	p, ok := m.port(port)
	if !ok {
		return "", fmt.Errorf("node %s has no port %q", m.Name, port)
	}
	c, err := d.rt.Container(m.Name)
	if err != nil {
		return "", err
	}
	return c.Addr(p.Number), nil
}

// moveClock moves the container's processes' own wall clocks (a restarted
// container gets the offset in force).
func (d *containers) moveClock(ctx context.Context, m *member, offset time.Duration) error {
	return d.rt.SetClockOffset(ctx, m.Name, offset)
}

func (d *containers) clockReach(ctx context.Context, m *member) string {
	if err := d.rt.ClockReachable(ctx, m.Name); err != nil {
		return err.Error()
	}
	return ""
}

func (d *containers) cutWhy(*member) string { return "" }

// cut drops the node's traffic with its peers, with rules in its own
// network namespace (re-applied when it starts again).
func (d *containers) cut(ctx context.Context, m *member, both, to []*member) error {
	return d.rt.SetCut(ctx, m.Name, docker.Cut{Both: hostsOf(both), To: hostsOf(to)})
}

func (d *containers) healCuts(ctx context.Context) error {
	if d.rt == nil {
		return nil
	}
	return d.rt.HealAll(ctx)
}

// layerWhy: a FUSE mount made here reaches the containers only through an
// engine on this machine.
func (d *containers) layerWhy(*member) string {
	if err := d.rt.HostBinds(); err != nil {
		return err.Error()
	}
	return ""
}

func (d *containers) newLayer(m *member) (disk, error) { return d.c.layers.mount(m) }

func (d *containers) saveLogs(ctx context.Context, dir string) error {
	if d.rt == nil {
		return nil
	}
	if err := d.rt.SaveLogs(ctx, dir); err != nil {
		return fmt.Errorf("saving node logs: %w", err)
	}
	return nil
}

func (d *containers) close(ctx context.Context) error {
	if d.rt == nil {
		return nil
	}
	return d.rt.Close(ctx)
}

// Recreate replaces a container node's container with one running cmd (its
// placeholders filled), on the same address and host ports: a member
// replaced with another command line (etcd's, joining as an existing
// member). The old container's log is kept beside the others.
func (c *Cluster) Recreate(ctx context.Context, node string, cmd []string) error {
	m, err := c.startedNode(node)
	if err != nil {
		return err
	}
	if m.Kind() != KindContainer {
		return fmt.Errorf("node %s is not a container", node)
	}
	rt := c.ctr.rt
	old, err := rt.Container(node)
	if err != nil {
		return err
	}
	if dir := c.Env().Dir; dir != "" {
		path := filepath.Join(dir, "logs", node+".before-wipe-"+strconv.FormatInt(time.Now().UnixMilli(), 10)+".log")
		if err := rt.SaveLog(ctx, node, path); err != nil {
			c.logf("saving the log of %s before its replacement: %v", node, err)
		}
	}
	if err := rt.Remove(ctx, node); err != nil {
		return err
	}
	s, err := c.ctr.spec(m)
	if err != nil {
		return err
	}
	s.Cmd, s.HostPorts = substituteAll(cmd, m.vars), old.HostPorts
	_, err = rt.Run(ctx, s)
	return err
}
