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
// majority, or issuer replicas from each other, or leaves a bridge node
// that reaches two halves; where it can also cut one way (Grudger), one
// node, the leader or issuer replicas lose one direction, and in a
// majorities ring every node sees a majority, each a different one. Where
// the harness put proxies between clients and nodes it black-holes clients
// from a node, from the resource, or from the issuer, or loses a node's
// answers (one way). A black-holed request is never answered: the client
// times out and records info, since the request may have arrived.
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
	// oneWay: the first group cannot reach the second, which reaches it.
	oneWay bool
	// grudge: each node's nodes it cannot reach (mode ring).
	grudge map[string][]string
	// weight makes some plans likelier (splitting issuer replicas is the
	// cut that split-brain bugs need).
	weight int
	// leader is the node the target named as its leader as the plan was
	// drawn ("" when it names none).
	leader string
}

// partitionParams: Groups are cut apart by the target's Partitioner, or
// each node is cut from the nodes its Grudge names; otherwise the clients'
// Links are black-holed.
type partitionParams struct {
	Mode   string     `json:"mode"`
	Groups [][]string `json:"groups,omitempty"`
	// OneWay: the first group cannot reach the second (the connections it
	// opens to them are dropped), while the second's connections to the
	// first carry on. For TCP a one-way cut is by connection: Grudger says
	// why. With Links: the nodes' answers are lost, the clients' requests
	// still act.
	OneWay bool `json:"one_way,omitempty"`
	// Bridge (mode bridge) is in no group: it keeps reaching both sides.
	Bridge string `json:"bridge,omitempty"`
	// Grudge (mode ring) names, for each node, the nodes it cannot reach:
	// a grudge each way is a cut both ways.
	Grudge map[string][]string `json:"grudge,omitempty"`
	Links  []string            `json:"links,omitempty"`
	// Leader is the node the target named as its leader when the cut
	// was drawn (a Leaderer's answer; it may have moved since): the
	// analysis reads a one-way cut's direction by it.
	Leader string `json:"leader,omitempty"`
}

// grudge is the cut pp makes between the target's nodes, as a Grudger
// takes it.
func (pp *partitionParams) grudge() map[string][]string {
	if pp.Grudge != nil {
		return pp.Grudge
	}
	g := map[string][]string{}
	for i, a := range pp.Groups {
		for j, b := range pp.Groups {
			if i == j || (pp.OneWay && i != 0) {
				continue
			}
			for _, n := range a {
				g[n] = append(g[n], b...)
			}
		}
	}
	return g
}

// needsGrudger: a cut a plain Partitioner cannot make.
func (pp *partitionParams) needsGrudger() bool {
	return (pp.OneWay && len(pp.Groups) > 0) || pp.Grudge != nil
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
	if p.groups != nil || p.grudge != nil {
		var nodes []string
		for _, g := range p.groups {
			nodes = append(nodes, g...)
		}
		for n := range p.grudge {
			nodes = append(nodes, n)
		}
		sort.Strings(nodes)
		return Plan{Nodes: slices.Compact(nodes), Outage: true,
			Params: &partitionParams{Mode: p.mode, Groups: p.groups, OneWay: p.oneWay, Bridge: p.bridge, Grudge: p.grudge, Leader: p.leader}}, nil
	}
	return Plan{Nodes: linkTargets(env, p.links), Outage: true, Params: &partitionParams{Mode: p.mode, Links: p.links, OneWay: p.oneWay}}, nil
}

func (*partition) CheckPlan(env *Env, p Plan) error {
	pp, err := paramsOf[partitionParams](p)
	if err != nil {
		return err
	}
	switch {
	case (len(pp.Groups) > 0 || pp.Grudge != nil) && len(pp.Links) > 0:
		return errors.New("a partition cuts groups of nodes or black-holes links, not both")
	case len(pp.Groups) > 0 && pp.Grudge != nil:
		return errors.New("a partition cuts groups of nodes or follows a grudge, not both")
	case pp.OneWay && len(pp.Groups) != 2 && len(pp.Links) == 0:
		return errors.New("a one-way cut needs two groups: the first cannot reach the second")
	case len(pp.Groups) > 0 || pp.Grudge != nil:
		if _, ok := env.Target.(Partitioner); !ok {
			return errors.New("the target cannot cut links between its nodes (groups); black-hole clients' links instead")
		}
		if _, ok := env.Target.(Grudger); !ok && pp.needsGrudger() {
			return errors.New("the target cannot cut links between its nodes one way (one_way, grudge)")
		}
		if pp.Grudge == nil && len(pp.Groups) < 2 {
			return errors.New("a cut needs at least two groups")
		}
		named := slices.Clone(pp.Groups)
		for n, ns := range pp.Grudge {
			named = append(named, append([]string{n}, ns...))
		}
		for _, g := range named {
			for _, n := range g {
				if !hasNode(nodesOf(env), n) {
					return fmt.Errorf("group names %s, which is not a node of the target", n)
				}
			}
		}
		for _, g := range named {
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
	if pp.needsGrudger() {
		cutter, ok := env.Target.(Grudger)
		if !ok {
			return nil, errors.New("the target cannot cut links between its nodes one way")
		}
		if err := cutter.Grudge(ctx, pp.grudge()); err != nil {
			return nil, applyFailed(pp.Mode, p.Nodes, errors.Join(err, cutter.HealPartition(context.WithoutCancel(ctx))))
		}
		if len(pp.Groups) > 0 {
			details["groups"] = pp.Groups
			details["one_way"] = pp.OneWay
		}
		if pp.Grudge != nil {
			details["grudge"] = pp.Grudge
		}
		if pp.Leader != "" {
			details["leader"] = pp.Leader
		}
		return &Fault{Nodes: p.Nodes, Details: details,
			Stop: func(ctx context.Context) error { return cutter.HealPartition(ctx) }}, nil
	}
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
		if pp.Leader != "" {
			details["leader"] = pp.Leader
		}
		return &Fault{Nodes: p.Nodes, Details: details,
			Stop: func(ctx context.Context) error { return cutter.HealPartition(ctx) }}, nil
	}
	ls, ok := linkSet(env)
	if !ok || len(pp.Links) == 0 {
		return nil, errors.New("nothing to partition")
	}
	set, groups := ls.SetBlackhole, [][]string{{ClientGroup}, linkTargets(env, pp.Links)}
	if pp.OneWay {
		set, groups = ls.SetAnswersLost, [][]string{groups[1], groups[0]}
		details["one_way"] = true
	}
	on := func(v bool) error {
		return forEachLink(pp.Links, func(n string) error { return set(n, v) })
	}
	if err := on(true); err != nil {
		return nil, applyFailed(pp.Mode, p.Nodes, errors.Join(err, on(false)))
	}
	details["groups"] = groups
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
		errs = append(errs, forEachLink(linkNames(ls.Links()), func(n string) error {
			return errors.Join(ls.SetBlackhole(n, false), ls.SetAnswersLost(n, false))
		}))
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
		plans = append(plans, partitionPlan{mode: mode, groups: [][]string{{node}, without(names, node)}, weight: weight})
	}
	_, oneWay := env.Target.(Grudger)
	coin := func() bool { return rng != nil && rng.IntN(2) == 0 }
	// oneWayOf: node loses one direction, drawn: it cannot reach the rest
	// (it hears but cannot speak), or the rest cannot reach it (it speaks
	// but does not hear: "a member that can send but not receive keeps
	// granting").
	oneWayOf := func(mode, node string, weight int) {
		if !oneWay {
			return
		}
		p := partitionPlan{mode: mode, groups: [][]string{{node}, without(names, node)}, oneWay: true, weight: weight}
		if coin() {
			p.groups[0], p.groups[1] = p.groups[1], p.groups[0]
		}
		plans = append(plans, p)
	}
	one := names[perm(len(names))[0]]
	isolate("one", one, 2)
	oneWayOf("one-way", one, 2)
	leader := ""
	if rng != nil {
		leader = leaderAmong(ctx, env, names)
	}
	if leader != "" {
		// A leader the target cannot cut (a node that shares its host with
		// another that stands for it) gets no cut of its own.
		isolate("leader", leader, 2)
		oneWayOf("leader-one-way", leader, 2)
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
		if oneWay {
			plans = append(plans, partitionPlan{mode: "ring", grudge: majoritiesRing(names, perm(len(names))), weight: 2})
		}
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
		if oneWay {
			// One side of the replicas cannot reach the other, which
			// still reaches it: a failover that trusts one direction. As
			// likely as the split itself: each is a cut real replicas meet.
			// Where the target names its leader among them, the side that
			// cannot reach is the one without it: a follower that fails
			// over while its leader still reaches it (the leader's own
			// loss of either direction is leader-one-way's).
			g := [][]string{a, b}
			if slices.Contains(a, leader) {
				g = [][]string{b, a}
			}
			plans = append(plans, partitionPlan{mode: "issuers-one-way", groups: g, oneWay: true, weight: 12})
		}
	}
	for i := range plans {
		plans[i].leader = leader
	}
	return plans
}

// leaderAmong is the node the target names as its leader, when it is one
// of names ("" otherwise, or when it names none).
func leaderAmong(ctx context.Context, env *Env, names []string) string {
	l, ok := env.Target.(Leaderer)
	if !ok {
		return ""
	}
	if leader, err := l.Leader(ctx); err == nil && slices.Contains(names, leader) {
		return leader
	}
	return ""
}

// followerOneWay is the mode of cutFromLeader's cut.
const followerOneWay = "follower-one-way"

// cutFromLeader is the one-way cut a failover needs, on the replicas among
// nodes: one of them that does not lead cannot reach the leader, which
// still reaches it. The leader "can send but not receive": it keeps
// granting, sure of its followers, while the follower it no longer answers
// may take over (a follower that tells a dead leader by a failed connect).
// The cut the other way, or between two followers, leaves the leader
// hearing everyone. Where the target names no leader among nodes, or
// cannot cut one way, the partition draws its own (errOwnDraw).
//
// The cut takes the two nodes over: a kill, a power loss, a freeze or a
// disk fault of either while it lasts breaks the connection the leader
// keeps to the follower (a leader back from a restart reconnects and
// catches up; a new leader is another cut), which is the situation the cut
// is for. Without it, under "all" the replicas of the memory target were
// hit by one of those in most such cuts of a 30 s run.
func cutFromLeader(ctx context.Context, env *Env, rng *rand.Rand, nodes map[string]bool) (Plan, error) {
	if _, ok := env.Target.(Grudger); !ok {
		return Plan{}, errOwnDraw
	}
	names := cuttableAmong(env, nodes)
	leader := leaderAmong(ctx, env, names)
	followers := without(names, leader)
	if leader == "" || len(followers) == 0 {
		return Plan{}, errOwnDraw
	}
	followers = slices.DeleteFunc(followers, func(n string) bool { return !env.free(n) })
	if !env.free(leader) || len(followers) == 0 {
		return Plan{}, ErrBusy
	}
	f := followers[rng.IntN(len(followers))]
	held := []string{f, leader}
	if len(names) >= 3 {
		// The leader no longer hears the follower's acknowledgements: with
		// three or more it needs the others for a majority, and a crash of
		// one meanwhile leaves it none (etcd, 3 members, six 60 s guided
		// runs: 0, 0, 1, 1, 5 and 7 grants in the cuts beside a crash of
		// the third member, a median of 3 in the 14 others). Every
		// replica is taken over.
		if !allFree(env, names) {
			return Plan{}, ErrBusy
		}
		held = names
	}
	return Plan{Nodes: slices.Sorted(slices.Values(held)), TakesOver: true, Outage: true,
		Params: &partitionParams{Mode: followerOneWay, Groups: [][]string{{f}, {leader}}, OneWay: true, Leader: leader}}, nil
}

// followerOff is the mode of cutOffFollower's cut.
const followerOff = "follower"

// cutOffFollower cuts one follower among the replicas in nodes off from
// the others, both ways, where the target names a leader among three or
// more: the situation (replicas apart while a lock is granted) needs a
// grant during the cut, and the majority with its leader goes on granting.
// A cut that takes the leader away (the partition's own "leader", "ring"
// and most "one" draws) holds the grants back past its end: the majority
// elects a leader first, and etcd renews every lease at an election, so a
// lock held then is taken over a lease's time later (etcd, 3 members, two
// 60 s guided runs: no grant during a ring cut of 3.1 s nor during the
// leader's cut of 2.8 s). It takes the replicas over: a crash of the other
// follower meanwhile leaves no majority. Elsewhere (fewer than three, no
// leader named) the partition draws its own (errOwnDraw).
func cutOffFollower(ctx context.Context, env *Env, rng *rand.Rand, nodes map[string]bool) (Plan, error) {
	if _, ok := env.Target.(Partitioner); !ok {
		return Plan{}, errOwnDraw
	}
	replicas := cuttableAmong(env, nodes)
	leader := leaderAmong(ctx, env, replicas)
	if len(replicas) < 3 || leader == "" {
		return Plan{}, errOwnDraw
	}
	if !allFree(env, replicas) {
		return Plan{}, ErrBusy
	}
	followers := without(replicas, leader)
	f := followers[rng.IntN(len(followers))]
	return Plan{Nodes: slices.Sorted(slices.Values(replicas)), TakesOver: true, Outage: true,
		Params: &partitionParams{Mode: followerOff, Groups: [][]string{{f}, without(replicas, f)}, Leader: leader}}, nil
}

// cuttableAmong are the nodes the target can cut that are among nodes.
func cuttableAmong(env *Env, nodes map[string]bool) []string {
	var out []string
	for _, n := range partitionNodes(env) {
		if nodes[n.Name] {
			out = append(out, n.Name)
		}
	}
	return out
}

// allFree says whether no fault holds any of names.
func allFree(env *Env, names []string) bool {
	return !slices.ContainsFunc(names, func(n string) bool { return !env.free(n) })
}

func without(names []string, node string) []string {
	var out []string
	for _, n := range names {
		if n != node {
			out = append(out, n)
		}
	}
	return out
}

// majoritiesRing is Jepsen's majorities ring: the nodes in a ring (the
// order perm draws), each reaching the majority of nodes around it and
// none beyond, so that every node sees a majority and no two see the same
// one. A system that trusts "I see a majority" elects a leader in each.
// With an odd count the grudges are mutual (cuts both ways); with three
// nodes or an even count some are one way (with three, each node reaches
// the one before it but not the one after: a one-way cycle).
func majoritiesRing(names []string, perm []int) map[string][]string {
	n := len(names)
	m := n/2 + 1
	ring := make([]string, n)
	for i, j := range perm {
		ring[i] = names[j]
	}
	grudge := map[string][]string{}
	for i := range ring {
		// The window of m nodes starting at i stands for its middle node.
		node := ring[(i+m/2)%n]
		sees := map[string]bool{}
		for k := range m {
			sees[ring[(i+k)%n]] = true
		}
		var cannot []string
		for _, o := range ring {
			if !sees[o] {
				cannot = append(cannot, o)
			}
		}
		sort.Strings(cannot)
		grudge[node] = cannot
	}
	return grudge
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
// are one cut); or lose one node's answers.
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
	// One way: a node's answers to the clients are lost while their
	// requests still act (the proxies' direction of a link; links between
	// nodes do not go through them). Keyed apart from the black-holes.
	for _, to := range tos {
		var names []string
		for _, l := range links {
			if l.To == to {
				names = append(names, l.Name)
			}
		}
		plans = append(plans, partitionPlan{mode: "answers-from-node", links: names, oneWay: true, weight: 1})
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

// separates says whether p cuts some of nodes off from others of them (a
// cut of the clients' links separates no node): what splitting issuer
// replicas needs, where a plan that merely names one of them (clients cut
// from it) does not.
func separates(p Plan, nodes map[string]bool) bool { return cutsOff(p, nodes, false) }

// separatesOneWay says whether p keeps one of nodes from reaching another
// of them that still reaches it: "a member that can send but not receive
// keeps granting".
func separatesOneWay(p Plan, nodes map[string]bool) bool { return cutsOff(p, nodes, true) }

func cutsOff(p Plan, nodes map[string]bool, oneWay bool) bool {
	pp, ok := p.Params.(*partitionParams)
	if !ok || len(pp.Links) > 0 {
		return false
	}
	g := pp.grudge()
	for a, cut := range g {
		for _, b := range cut {
			if nodes[a] && nodes[b] && (!oneWay || !slices.Contains(g[b], a)) {
				return true
			}
		}
	}
	return false
}
