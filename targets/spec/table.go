package spec

import (
	"slices"
	"sort"
	"strings"

	"github.com/fencecheck/fencecheck/harness/nodes"
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
	default:
		nn.Process = &nodes.Process{Argv: n.Command, Dir: s.Dir, Env: env}
	}
	return nn
}

func (p *Probe) probe() nodes.Probe {
	return nodes.Probe{HTTP: p.HTTP, TCP: p.TCP, Command: p.Command, Port: p.Port}
}
