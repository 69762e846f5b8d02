package harness

import (
	"context"
	"io"

	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/history"
	"github.com/fencecheck/fencecheck/nemesis"
)

// Target is a fencing system under test: it brings its nodes up, tells
// clients where to connect, lists its nodes (what faults act on), and tears
// everything down. Fault capabilities (pause, restart, partition, clock) are
// optional interfaces from package nemesis, discovered by type assertion.
type Target interface {
	Name() string
	nemesis.Cluster
	Semantics() checkers.Semantics
	// Start brings the system up and returns once every node answers
	// GET /v1/health.
	Start(ctx context.Context, env Env) (Endpoints, error)
	// Stop tears down everything Start created (idempotent), saving node
	// logs into env.Dir/logs first.
	Stop(ctx context.Context) error
}

// Env is what a run gives its target.
type Env struct {
	// RunID labels everything the run creates (containers, networks).
	RunID string
	// Dir is the run's store folder; node logs go to Dir/logs.
	Dir string
	// Namespace scopes the names the run sends (Run.Namespace): a target
	// that sends requests of its own (the preflight) uses it too.
	Namespace string
	// Log receives human-readable progress lines.
	Log io.Writer
	// DiskLayer asks the target to keep its nodes' data on the lazyfs layer
	// (package nemesis/lazyfs), for the power-loss nemesis: set only when a
	// nemesis that needs it was named. A target that cannot says why through
	// nemesis.PowerExplainer, and the nemesis is then not applicable.
	DiskLayer bool
}

// Endpoint is one node's Fencing API base URL, e.g. http://127.0.0.1:7001.
type Endpoint struct {
	Node string `json:"node"`
	URL  string `json:"url"`
}

// Endpoints says where clients send lock requests and resource requests.
type Endpoints struct {
	Issuers   []Endpoint `json:"issuers"`
	Resources []Endpoint `json:"resources"`
}

// All lists every endpoint once (a node that serves both roles is one).
func (e Endpoints) All() []Endpoint {
	seen := map[string]bool{}
	var all []Endpoint
	for _, ep := range append(append([]Endpoint{}, e.Issuers...), e.Resources...) {
		if !seen[ep.URL] {
			seen[ep.URL] = true
			all = append(all, ep)
		}
	}
	return all
}

// OpRecorder records one client operation: it takes the invoke event (no
// index, time or process) and returns the function that records its
// completion.
type OpRecorder = func(invoke history.Event) (complete func(history.Event))

// Preflighter is a target that checks the contract once the history is
// open, in its own phase before the main one, recording each request it
// sends as a client operation: the same checkers judge them. It returns the
// deviations the run goes on past, in words (for the report), or an error
// when the system cannot be driven or its answers classified.
type Preflighter interface {
	Preflight(ctx context.Context, record OpRecorder) (reported []string, err error)
}

// Systemer is a target that says which system it ran, once it is up: the
// release and the cluster's size ("etcd v3.6.17, 3 members", "Redis 7.0.15
// (Debian package redis-server 5:7.0.15-1~deb12u1)"). The run records it in
// config.json, results.json and the report.
type Systemer interface {
	System(ctx context.Context) (string, error)
}
