package nemesis

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/fencecheck/fencecheck/history"
)

// strip makes the proxies between clients and the resource remove, empty or
// garble the Fencing-Token header of a share of writes, as a misconfigured
// proxy or a half-upgraded client would. Each tampering is recorded by the
// proxy, so the checker knows what the resource really received: a correct
// resource rejects every such write (428 or 400); one that reads a missing
// token as zero accepts it.
type strip struct{}

// Strip is the strip nemesis's name: the f of its start and stop events and
// of the proxy's event for each write it tampered with (history.Tamper).
const Strip = history.Tamper

func (strip) Name() string { return Strip }

// Effects: writes reach the resource with their token removed or garbled.
func (strip) Effects() []Effect { return []Effect{Tampers} }

// ActsOnLinks: the proxies strip the header.
func (strip) ActsOnLinks() bool { return true }

// Timing: stripping does not stop progress, so it may last longer than the
// default; that keeps tampered writes coming even when other faults make the
// resource unreachable part of the time.
// OnClientsOnly: the proxy changes the clients' requests; every node runs on.
func (strip) OnClientsOnly(Plan) bool { return true }

func (strip) Timing(*Env) Timing {
	return Timing{QuietMin: 1 * time.Second, QuietMax: 3 * time.Second, FaultMin: 2 * time.Second, FaultMax: 5 * time.Second}
}

func (strip) Applicable(env *Env) (bool, string) {
	if len(clientLinks(env)) == 0 {
		return false, noClientLinks
	}
	return true, ""
}

// stripParams: the share of writes tampered with on each of the links.
type stripParams struct {
	Share float64  `json:"share"`
	Links []string `json:"links"`
}

func (strip) Params() any { return &stripParams{} }

func (strip) Draw(_ context.Context, env *Env, rng *rand.Rand) (Plan, error) {
	links := linkNames(clientLinks(env))
	// A share, not every write: the run keeps making progress, and stripped
	// writes interleave with good ones on the same keys.
	share := round2(0.3 + 0.4*rng.Float64())
	return Plan{Nodes: linkTargets(env, links), Params: &stripParams{Share: share, Links: links}}, nil
}

func (strip) CheckPlan(env *Env, p Plan) error {
	sp, err := paramsOf[stripParams](p)
	if err != nil {
		return err
	}
	if sp.Share <= 0 || sp.Share > 1 {
		return fmt.Errorf("share must be in (0, 1], got %g", sp.Share)
	}
	return checkLinks(env, sp.Links)
}

func (strip) Start(ctx context.Context, env *Env, p Plan) (*Fault, error) {
	sp, err := paramsOf[stripParams](p)
	if err != nil {
		return nil, err
	}
	ls, ok := linkSet(env)
	if !ok {
		return nil, errors.New(noClientLinks)
	}
	if err := forEachLink(sp.Links, func(n string) error { return ls.SetStrip(n, sp.Share) }); err != nil {
		forEachLink(sp.Links, func(n string) error { return ls.SetStrip(n, 0) })
		return nil, err
	}
	return &Fault{Nodes: p.Nodes, Details: map[string]any{"share": sp.Share, "links": sp.Links},
		Stop: func(context.Context) error {
			return forEachLink(sp.Links, func(n string) error { return ls.SetStrip(n, 0) })
		}}, nil
}

// Heal turns stripping off on every link.
func (strip) Heal(ctx context.Context, env *Env) error {
	ls, ok := linkSet(env)
	if !ok {
		return nil
	}
	return forEachLink(linkNames(ls.Links()), func(n string) error { return ls.SetStrip(n, 0) })
}

// linkTargets lists the distinct nodes the named links lead to.
func linkTargets(env *Env, names []string) []string {
	ls, ok := linkSet(env)
	if !ok {
		return nil
	}
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	seen := map[string]bool{}
	var out []string
	for _, l := range ls.Links() {
		if want[l.Name] && !seen[l.To] {
			seen[l.To] = true
			out = append(out, l.To)
		}
	}
	return out
}

func round2(f float64) float64 { return float64(int(f*100+0.5)) / 100 }
