package adapted

import (
	"strconv"

	"github.com/fencecheck/fencecheck/harness/docker"
	"github.com/fencecheck/fencecheck/harness/nodes"
)

// AdapterPort is the adapters' Fencing API port inside their containers.
const AdapterPort = 7000

// Adapters are the project's own stateless Fencing API servers (fenced, in
// containers) in front of a system that keeps every piece of fencing state:
// any of them can serve any client.
type Adapters struct {
	// Count is how many (default 2): adapter-1, adapter-2, ...
	Count int
	// Args are fenced's backend arguments; {addr:NODE} reaches the store.
	Args []string
	// Clock is how the clock nemesis reaches them.
	Clock nodes.Clock
	// Health is their health's timeout and quorum (the check is GET
	// /v1/health).
	Health nodes.Health
	// WaitFor names the nodes that must answer before they start.
	WaitFor []string
}

// Nodes are the adapters' rows of a target's table.
func (a Adapters) Nodes() []nodes.Node {
	n := a.Count
	if n <= 0 {
		n = 2
	}
	cmd := append([]string{"/usr/local/bin/fenced", "--addr", "0.0.0.0:{port}"}, a.Args...)
	out := make([]nodes.Node, n)
	for i := range out {
		out[i] = nodes.Node{Name: "adapter-" + strconv.Itoa(i+1), Role: "adapter", Issuer: true, Resource: true,
			Stateless: true, Ports: []nodes.Port{{Number: AdapterPort}}, Clock: a.Clock, Health: a.Health,
			WaitFor: a.WaitFor, Container: &nodes.Container{Build: docker.ImageFenced, Cmd: cmd}}
	}
	return out
}
