package harness

import (
	"context"
	"errors"

	"github.com/fencecheck/fencecheck/harness/history"
	"github.com/fencecheck/fencecheck/workloads"
)

// linkSet is the set of proxies between clients and nodes.
type linkSet interface{ Close() error }

// interpose puts proxies between the clients and every endpoint when a
// nemesis that acts on links (strip, delay, partition) may run. Without
// them, clients talk to the nodes directly.
func interpose(rec *history.Recorder, cfg Config, eps Endpoints, nemeses []string) (linkSet, Endpoints, error) {
	return nil, eps, nil
}

func runForge(ctx context.Context, rec *history.Recorder, wl *workloads.Fenced, eps Endpoints, cfg Config) error {
	return errors.New("forge workload not wired yet")
}
