package spec

import (
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/fencecheck/fencecheck/harness/nodes"
	"github.com/fencecheck/fencecheck/harness/remote"
)

// HasRole reports whether the node serves role.
func (n Node) HasRole(role string) bool { return slices.Contains(n.Roles, role) }

// IsStateless is the node's Stateless, its default filled in.
func (s *Spec) IsStateless(n Node) bool {
	if n.Stateless != nil {
		return *n.Stateless
	}
	return !n.HasRole(RoleData) && slices.ContainsFunc(s.Nodes, func(o Node) bool { return o.HasRole(RoleData) })
}

// Table is the spec as a table of nodes (package harness/nodes): every
// fault on them is the node model's.
func (s *Spec) Table() []nodes.Node {
	out := make([]nodes.Node, len(s.Nodes))
	for i, n := range s.Nodes {
		out[i] = s.node(n)
	}
	return out
}

func (s *Spec) node(n Node) nodes.Node {
	nn := nodes.Node{Name: n.Name, Role: strings.Join(n.Roles, "+"),
		Issuer: n.HasRole(RoleIssuer), Resource: n.HasRole(RoleResource), Stateless: s.IsStateless(n),
		Data:   nodes.Data{Path: n.Data},
		Health: nodes.Health{Timeout: s.Timeout()}}
	if n.Health != nil {
		nn.Health.Probe = n.Health.probe()
	} else if n.HasRole(RoleData) {
		nn.Health.TCP = true
	}
	if n.Leader != nil {
		p := n.Leader.probe()
		nn.Leads = &p
	}
	switch n.Clock {
	case ClockOffsetFile:
		nn.Clock = nodes.Clock{Via: nodes.ClockFile}
	case ClockNone:
		nn.Clock = nodes.Clock{Via: nodes.ClockNone, Why: `opted out ("clock": "none")`}
	default:
		nn.Clock = nodes.Clock{Via: nodes.ClockProcesses, Preload: true}
	}
	if hasMainPort(n) {
		nn.Ports = append(nn.Ports, nodes.Port{Number: n.Port})
	}
	names := make([]string, 0, len(n.Ports))
	for name := range n.Ports {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		nn.Ports = append(nn.Ports, nodes.Port{Name: name, Number: n.Ports[name]})
	}
	env := make([]string, 0, len(n.Env))
	for k, v := range n.Env {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	switch n.Kind() {
	case KindURL:
		nn.URL = n.URL
	case KindImage:
		nn.Container = &nodes.Container{Image: n.Image, Cmd: n.Command, Env: env, ImageUser: true}
	case KindSSH:
		nn.SSH = s.sshNode(n, env)
		if nn.Clock.Via == nodes.ClockProcesses {
			nn.Clock.Preload = false // no preload library on a remote host: the vDSO patch
		}
	default:
		nn.Process = &nodes.Process{Argv: n.Command, Dir: s.Dir, Env: env}
	}
	return nn
}

// sshNode is an ssh node's host and program; its files are named
// relative to the spec's folder.
func (s *Spec) sshNode(n Node, env []string) *nodes.SSH {
	h := n.SSH
	t := remote.Target{Host: h.Host, Port: h.Port, User: h.User, Key: s.localPath(h.Key), InsecureIgnoreHostKey: h.InsecureIgnoreHostKey}
	if h.KnownHosts != "" {
		t.KnownHosts = []string{s.localPath(h.KnownHosts)}
	}
	return &nodes.SSH{Target: t, Address: h.Address, Argv: n.Command, Env: env, Dir: h.Dir, Workdir: h.Workdir}
}

// localPath is a file of this machine named in the spec: ~ is the home
// folder, a relative name is relative to the spec's folder.
func (s *Spec) localPath(p string) string {
	switch {
	case p == "":
		return ""
	case p == "~" || strings.HasPrefix(p, "~/"):
		if home, err := os.UserHomeDir(); err == nil {
			return filepath.Join(home, strings.TrimPrefix(p, "~"))
		}
	case !filepath.IsAbs(p):
		return filepath.Join(s.Dir, p)
	}
	return p
}

func (p *Probe) probe() nodes.Probe {
	return nodes.Probe{HTTP: p.HTTP, TCP: p.TCP, Command: p.Command, Port: p.Port}
}
