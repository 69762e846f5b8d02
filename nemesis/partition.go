package nemesis

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/fencecheck/fencecheck/history"
	"github.com/fencecheck/fencecheck/nemesis/proxy"
)

// partition cuts the network. Where the target can cut links between its
// nodes (Partitioner) it isolates one node, the leader, a minority from a
// majority, or issuer replicas from each other; where the harness put proxies
// between clients and nodes it black-holes clients from a node, from the
// resource, or from the issuer. A black-holed request is never answered: the
// client times out and records info, since the request may have arrived.
//
// Cuts between nodes and client black-holes alternate, node cuts first, so
// that every run exercises both kinds whatever its seed; within a kind the
// seed picks the plan.
type partition struct {
	// started counts this run's drawn faults (one scheduler loop draws).
	started int
}

// Partition is the partition nemesis's name.
const Partition = "partition"

func (partition) Name() string { return Partition }

// Effects: nodes, or clients and nodes, cannot reach each other.
func (partition) Effects() []Effect { return []Effect{Separates} }

// ActsOnLinks: besides the target's own cuts, the proxies black-hole
// clients, the only cut a single node or a host process allows.
func (partition) ActsOnLinks() bool { return true }

// Timing: where the target can cut between its own nodes, the default. Where
// only client black-holes are possible (a single node), cuts are shorter and
// rarer: such a cut stops every client, and beside restart and pause it would
// leave the system unreachable most of the run, hiding what the other faults
// expose.
func (partition) Timing(env *Env) Timing {
	if len(nodePlans(context.Background(), env, nil)) > 0 {
		return DefaultTiming
	}
	return Timing{QuietMin: 2 * time.Second, QuietMax: 5 * time.Second, FaultMin: 500 * time.Millisecond, FaultMax: 2500 * time.Millisecond}
}

func (partition) Applicable(env *Env) (bool, string) {
	if len(nodePlans(context.Background(), env, nil)) > 0 || len(clientLinks(env)) > 0 {
		return true, ""
	}
	if _, ok := env.Target.(Partitioner); ok {
		return false, "the target can partition its nodes but has fewer than two, and no proxies sit between clients and nodes"
	}
	return false, "the target cannot partition its nodes, and " + noClientLinks
}

// partitionPlan is one way to cut the network.
type partitionPlan struct {
	mode string
	// groups for the target's Partitioner; links to black-hole.
	groups [][]string
	links  []string
	// bridge is the node in no group that reaches both (mode bridge).
	bridge string
	// weight makes some plans likelier (splitting issuer replicas is the
	// cut that split-brain bugs need).
	weight int
}

// partitionParams: Groups are cut apart by the target's Partitioner;
// otherwise the clients' Links are black-holed.
type partitionParams struct {
	Mode   string     `json:"mode"`
	Groups [][]string `json:"groups,omitempty"`
	// Bridge (mode bridge) is in no group: it keeps reaching both sides.
	Bridge string   `json:"bridge,omitempty"`
	Links  []string `json:"links,omitempty"`
}

func (*partition) Params() any { return &partitionParams{} }

func (pt *partition) Draw(ctx context.Context, env *Env, rng *rand.Rand) (Plan, error) {
	cuts, blackholes := nodePlans(ctx, env, rng), linkPlans(env)
	plans := cuts
	if len(cuts) == 0 || (len(blackholes) > 0 && pt.started%2 == 1) {
		plans = blackholes
	}
	if len(plans) == 0 {
		return Plan{}, errors.New("nothing to partition")
	}
	pt.started++
	p := pickPlan(plans, rng)
	if p.groups != nil {
		var nodes []string
		for _, g := range p.groups {
			nodes = append(nodes, g...)
		}
		return Plan{Nodes: nodes, Outage: true, Params: &partitionParams{Mode: p.mode, Groups: p.groups, Bridge: p.bridge}}, nil
	}
	return Plan{Nodes: linkTargets(env, p.links), Outage: true, Params: &partitionParams{Mode: p.mode, Links: p.links}}, nil
}

func (*partition) CheckPlan(env *Env, p Plan) error {
	pp, err := paramsOf[partitionParams](p)
	if err != nil {
		return err
	}
	switch {
	case len(pp.Groups) > 0 && len(pp.Links) > 0:
		return errors.New("a partition cuts groups of nodes or black-holes links, not both")
	case len(pp.Groups) > 0:
		if _, ok := env.Target.(Partitioner); !ok {
			return errors.New("the target cannot cut links between its nodes (groups); black-hole clients' links instead")
		}
		if len(pp.Groups) < 2 {
			return errors.New("a cut needs at least two groups")
		}
		for _, g := range pp.Groups {
			for _, n := range g {
				if !hasNode(nodesOf(env), n) {
					return fmt.Errorf("group names %s, which is not a node of the target", n)
				}
			}
		}
		for _, g := range pp.Groups {
			for _, n := range g {
				if !hasNode(partitionNodes(env), n) {
					return fmt.Errorf("group names %s, a node whose links the target cannot cut (a host process, or a single node)", n)
				}
			}
		}
	case len(pp.Links) > 0:
		return checkLinks(env, pp.Links)
	default:
		return errors.New("a partition needs groups or links")
	}
	return nil
}

func (*partition) Start(ctx context.Context, env *Env, p Plan) (*Fault, error) {
	pp, err := paramsOf[partitionParams](p)
	if err != nil {
		return nil, err
	}
	details := map[string]any{history.ExtraMode: pp.Mode}
	if len(pp.Groups) > 0 {
		cutter, ok := env.Target.(Partitioner)
		if !ok {
			return nil, errors.New("the target cannot cut links between its nodes")
		}
		if err := cutter.Partition(ctx, pp.Groups); err != nil {
			// Half a cut is not the fault recorded: take it all back.
			return nil, applyFailed(pp.Mode, p.Nodes, errors.Join(err, cutter.HealPartition(context.WithoutCancel(ctx))))
		}
		details["groups"] = pp.Groups
		if pp.Bridge != "" {
			details["bridge"] = pp.Bridge
		}
		return &Fault{Nodes: p.Nodes, Details: details,
			Stop: func(ctx context.Context) error { return cutter.HealPartition(ctx) }}, nil
	}
	ls, ok := linkSet(env)
	if !ok || len(pp.Links) == 0 {
		return nil, errors.New("nothing to partition")
	}
	on := func(v bool) error {
		return forEachLink(pp.Links, func(n string) error { return ls.SetBlackhole(n, v) })
	}
	if err := on(true); err != nil {
		return nil, applyFailed(pp.Mode, p.Nodes, errors.Join(err, on(false)))
	}
	details["groups"] = [][]string{{ClientGroup}, linkTargets(env, pp.Links)}
	details["links"] = pp.Links
	return &Fault{Nodes: p.Nodes, Details: details, Stop: func(context.Context) error { return on(false) }}, nil
}

// Heal removes every cut: the target's and every black-hole.
func (partition) Heal(ctx context.Context, env *Env) error {
	var errs []error
	if pt, ok := env.Target.(Partitioner); ok {
		errs = append(errs, pt.HealPartition(ctx))
	}
	if ls, ok := linkSet(env); ok {
		errs = append(errs, forEachLink(linkNames(ls.Links()), func(n string) error { return ls.SetBlackhole(n, false) }))
	}
	return errors.Join(errs...)
}

func pickPlan(plans []partitionPlan, rng *rand.Rand) partitionPlan {
	total := 0
	for _, p := range plans {
		total += p.weight
	}
	x := rng.IntN(total)
	for _, p := range plans {
		if x < p.weight {
			return p
		}
		x -= p.weight
	}
	return plans[len(plans)-1]
}

// nodePlans are the cuts between the target's own nodes. With a nil rng it
// only says which plans exist (for Applicable).
func nodePlans(ctx context.Context, env *Env, rng *rand.Rand) []partitionPlan {
	nodes := partitionNodes(env)
	if len(nodes) < 2 {
		return nil
	}
	perm := func(n int) []int {
		if rng == nil {
			out := make([]int, n)
			for i := range out {
				out[i] = i
			}
			return out
		}
		return rng.Perm(n)
	}
	names := make([]string, len(nodes))
	for i, n := range nodes {
		names[i] = n.Name
	}
	var plans []partitionPlan
	isolate := func(mode, node string, weight int) {
		var rest []string
		for _, n := range names {
			if n != node {
				rest = append(rest, n)
			}
		}
		plans = append(plans, partitionPlan{mode: mode, groups: [][]string{{node}, rest}, weight: weight})
	}
	isolate("one", names[perm(len(names))[0]], 2)
	if l, ok := env.Target.(Leaderer); ok && rng != nil {
		// A leader the target cannot cut (a node that shares its host with
		// another that stands for it) gets no cut of its own.
		if leader, err := l.Leader(ctx); err == nil && slices.Contains(names, leader) {
			isolate("leader", leader, 2)
		}
	}
	if len(names) >= 3 {
		p := perm(len(names))
		k := (len(names) - 1) / 2
		var minority, majority []string
		for i, j := range p {
			if i < k {
				minority = append(minority, names[j])
			} else {
				majority = append(majority, names[j])
			}
		}
		sort.Strings(minority)
		sort.Strings(majority)
		plans = append(plans, partitionPlan{mode: "minority", groups: [][]string{minority, majority}, weight: 2})
		// Jepsen's bridge: two halves that cannot reach each other, and one
		// node in no group that reaches both. Each half may count the
		// bridge toward a majority: a system that takes two majorities
		// from one bridge elects two leaders.
		p = perm(len(names))
		var left, right []string
		for i, j := range p[1:] {
			if i%2 == 0 {
				left = append(left, names[j])
			} else {
				right = append(right, names[j])
			}
		}
		sort.Strings(left)
		sort.Strings(right)
		plans = append(plans, partitionPlan{mode: "bridge", groups: [][]string{left, right}, bridge: names[p[0]], weight: 2})
	}
	// Issuer replicas: nodes that keep issuer state of their own. Adapters
	// and the reference also serve the issuer API, but cutting two stateless
	// adapters apart changes nothing.
	var issuers []string
	for _, n := range nodes {
		if strings.Contains(n.Role, "issuer") && !n.Stateless {
			issuers = append(issuers, n.Name)
		}
	}
	if len(issuers) >= 2 {
		// Issuer replicas from each other; every other node keeps reaching
		// both sides (nodes in no group are not cut).
		p := perm(len(issuers))
		var a, b []string
		for i, j := range p {
			if i%2 == 0 {
				a = append(a, issuers[j])
			} else {
				b = append(b, issuers[j])
			}
		}
		sort.Strings(a)
		sort.Strings(b)
		plans = append(plans, partitionPlan{mode: "issuers", groups: [][]string{a, b}, weight: 12})
	}
	return plans
}

// partitionNodes are the target's nodes that a group may name, in the
// order of Nodes (none when it cannot cut links between its nodes).
func partitionNodes(env *Env) []Node {
	if pt, ok := env.Target.(Partitioner); ok {
		return nodesNamed(env, pt.PartitionNodes())
	}
	return nil
}

// linkPlans black-hole clients' links: from one node, from every resource
// node, from every issuer node (deduplicated: on a single reference node they
// are one cut).
func linkPlans(env *Env) []partitionPlan {
	links := clientLinks(env)
	if len(links) == 0 {
		return nil
	}
	roles := map[string]string{}
	for _, n := range nodesOf(env) {
		roles[n.Name] = n.Role
	}
	var plans []partitionPlan
	seen := map[string]bool{}
	add := func(mode string, keep func(proxy.Info) bool) {
		var names []string
		for _, l := range links {
			if keep(l) {
				names = append(names, l.Name)
			}
		}
		id := strings.Join(names, "\x00")
		if len(names) == 0 || seen[id] {
			return
		}
		seen[id] = true
		plans = append(plans, partitionPlan{mode: mode, links: names, weight: 1})
	}
	byNode := map[string]bool{}
	var tos []string
	for _, l := range links {
		if !byNode[l.To] {
			byNode[l.To] = true
			tos = append(tos, l.To)
		}
	}
	sort.Strings(tos)
	for _, to := range tos {
		add("clients-from-node", func(l proxy.Info) bool { return l.To == to })
	}
	add("clients-from-resource", func(l proxy.Info) bool { r, ok := roles[l.To]; return ok && servesResource(r) })
	add("clients-from-issuer", func(l proxy.Info) bool { r, ok := roles[l.To]; return ok && servesIssuer(r) })
	return plans
}

// servesIssuer and servesResource read a node's role: the reference and the
// adapters serve both halves of the API.
func servesIssuer(role string) bool {
	return strings.Contains(role, "issuer") || role == "reference" || role == "adapter"
}

func servesResource(role string) bool {
	return strings.Contains(role, "resource") || role == "reference" || role == "adapter"
}
