// Package adapted is the shape of a container target built around one
// stateful server that keeps all fencing state (a database) behind
// stateless fenced adapters that speak the Fencing API to the harness (the
// adapters are also the other targets' front: Adapters). The server's data
// folder is on the host (kept across kill -9, removed with the run), its
// clock is skewed through the image's skew library, and every fault is the
// node model's (harness/nodes). The postgres and mysql targets are this
// shape with their own server; each keeps every check inside its server.
package adapted

import (
	"cmp"
	"context"
	"time"

	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/harness/docker"
	"github.com/fencecheck/fencecheck/harness/nodes"
)

// Paths inside the server's container.
const (
	// DataDir is where the server's host data folder is mounted.
	DataDir = "/data"
	// ServerUser is the account the server runs as (databases refuse to run
	// as root); nodes.AccountUID is its uid when the harness runs as root.
	ServerUser = "fencecheck"
)

// Server is the stateful server's container.
type Server struct {
	// Node and Role name it, e.g. "postgres-1" and "postgres".
	Node, Role string
	// Port is the port it serves its clients (the adapters) on.
	Port int
	// Image names the image the project builds for it (registered with
	// docker.RegisterImage).
	Image string
	// Cmd is its command line; it runs as ServerUser, with its data folder
	// at DataDir (empty on first start) and /etc/passwd naming its uid.
	Cmd []string
	Env []string
	// Skew preloads the image's skew library (docker.SkewLibrary, which the
	// image must carry) so that the clock nemesis moves the server's wall
	// clock.
	Skew bool
	// Ready probes the server once through its published address on
	// 127.0.0.1; Start and StartNode poll it until it succeeds.
	Ready func(ctx context.Context, addr string) error
	// NoLayer says why its data never goes on the lazyfs layer.
	NoLayer string
	// Product and HostFile name the system for the run (Target.System):
	// the Debian package that installed HostFile on the host, which the
	// image is assembled from, is the release that ran.
	Product, HostFile string
}

// Options configure New.
type Options struct {
	// Name and Semantics are the target's.
	Name      string
	Semantics checkers.Semantics
	Server    Server
	// AdapterArgs are fenced's backend arguments; {addr:NODE} is the
	// server's host:port on the run network.
	AdapterArgs []string
	// Adapters is the number of adapter containers (default 2).
	Adapters int
	// ReadyTimeout bounds how long Start and StartNode wait for nodes
	// (default 90 s: a first start initialises the server's data folder).
	ReadyTimeout time.Duration
	_            struct{}
}

// Target is the server plus adapters.
type Target struct {
	*nodes.Cluster
	server string
	srv    Server
}

// New returns the target; nothing runs until Start.
func New(opts Options) *Target {
	ready, srv := cmp.Or(opts.ReadyTimeout, 90*time.Second), opts.Server
	clock := nodes.Clock{Via: nodes.ClockNone, Why: "the server runs without the skew library"}
	if srv.Skew {
		clock = nodes.Clock{Via: nodes.ClockSkewLibrary}
	}
	server := nodes.Node{Name: srv.Node, Role: srv.Role, Ports: []nodes.Port{{Number: srv.Port}},
		Data:      nodes.Data{Path: DataDir, NoLayer: srv.NoLayer},
		Clock:     clock,
		Health:    nodes.Health{Probe: nodes.Probe{Func: srv.Ready}, Timeout: ready},
		Container: &nodes.Container{Build: srv.Image, Cmd: srv.Cmd, Env: srv.Env, Account: ServerUser}}
	// The adapters read their clock from the offset file; the SQL stores
	// read none (leases run on the database's clock), so the clock nemesis
	// aims at the server alone.
	adapters := Adapters{Count: opts.Adapters, Args: opts.AdapterArgs,
		Clock:   nodes.Clock{Via: nodes.ClockFile, Aside: "the store reads no adapter clock: leases run on the server's"},
		Health:  nodes.Health{Timeout: ready},
		WaitFor: []string{srv.Node}}.Nodes()
	table := append([]nodes.Node{server}, adapters...)
	return &Target{Cluster: nodes.Must(nodes.New(opts.Name, opts.Semantics, table, nodes.Options{})), server: srv.Node, srv: srv}
}

// System names the server's release, from the Debian package its image is
// assembled from ("" when the target names none).
func (t *Target) System(ctx context.Context) (string, error) {
	if t.srv.HostFile == "" {
		return "", nil
	}
	return docker.DebianSystem(ctx, t.srv.Product, t.srv.HostFile)
}

// ServerAddr is the server's published address on 127.0.0.1, for checks
// from the host.
func (t *Target) ServerAddr() (string, error) { return t.HostAddr(t.server, "") }
