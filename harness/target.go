package harness

import (
	"context"
	"io"

	"github.com/fencecheck/fencecheck/models"
	"github.com/fencecheck/fencecheck/nemesis"
)

// Target is a fencing system under test: it brings its nodes up, tells
// clients where to connect, lists its nodes (what faults act on), and tears
// everything down. Fault capabilities (pause, restart, partition, clock) are
// optional interfaces from package nemesis, discovered by type assertion.
type Target interface {
	Name() string
	nemesis.Cluster
	Semantics() models.Semantics
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

// ContractReporter is a target whose start checked the contract and went on
// past deviations that cannot let a bad token through; the run reports them
// (results.json and the report's notes).
type ContractReporter interface {
	ContractDeviations() []string
}
