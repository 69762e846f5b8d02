package harness

import (
	"context"

	"github.com/fencecheck/fencecheck/history"
	"github.com/fencecheck/fencecheck/nemesis"
	"github.com/fencecheck/fencecheck/nemesis/proxy"
	"github.com/fencecheck/fencecheck/workloads"
)

// interpose puts a proxy between the clients and every node when a nemesis
// that acts on links (nemesis.LinkActor) may run, and returns the endpoints
// clients must use. Without such a nemesis clients talk to the nodes
// directly: a proxy hop is not free, and it is not the system under test.
func interpose(rec *history.Recorder, cfg Config, eps Endpoints, nemeses []string) (*proxy.Set, Endpoints, error) {
	if !nemesis.NeedLinks(nemeses) {
		return nil, eps, nil
	}
	set := proxy.NewSet(rec, cfg.Seed)
	byURL := map[string]string{}
	wrap := func(in []Endpoint) ([]Endpoint, error) {
		out := make([]Endpoint, 0, len(in))
		for _, e := range in {
			u, ok := byURL[e.URL]
			if !ok {
				var err error
				u, err = set.Link(nemesis.ClientGroup+"->"+e.Node, nemesis.ClientGroup, e.Node, e.URL)
				if err != nil {
					return nil, err
				}
				byURL[e.URL] = u
			}
			out = append(out, Endpoint{Node: e.Node, URL: u})
		}
		return out, nil
	}
	var err error
	var linked Endpoints
	if linked.Issuers, err = wrap(eps.Issuers); err != nil {
		set.Close()
		return nil, eps, err
	}
	if linked.Resources, err = wrap(eps.Resources); err != nil {
		set.Close()
		return nil, eps, err
	}
	return set, linked, nil
}

// runForge runs the forge workload beside the main one, sharing its process
// numbers.
func runForge(ctx context.Context, rec *history.Recorder, wl *workloads.Fenced, eps Endpoints, cfg Config) error {
	f, err := workloads.NewForge(workloads.ForgeConfig{Resources: conns(eps.Resources), Keys: 2, Namespace: wl.Namespace(),
		OpTimeout: cfg.OpTimeout, Seed: cfg.Seed, Processes: wl.Processes()})
	if err != nil {
		return err
	}
	return f.Run(ctx, rec)
}
