package nemesis

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// What the guided schedule aims at (guide.go): the situations below
// target, the faults that create each (remedies), and the nodes they must
// hit.

// half says which state a fault must hit for a situation.
type half int

const (
	anyNode half = iota
	issuerState
	resourceState
	// writePath: the nodes writes go through, where there is more than
	// one (stateless adapters in front of a store): a write held in one
	// can be overtaken by a newer one through another.
	writePath
)

// remedy is what creates a situation: a fault of nemesis on a node keeping
// state, or (nemesis "") a calm phase long enough for idle.
type remedy struct {
	situation string
	nemesis   string
	state     half
	idle      time.Duration
	// edge: the fault creates the situation at its start or its end (a
	// node back from a restart or a power loss, a clock stepped back), so
	// a short fault does it as well as a long one, and leaves the phase
	// room for the next.
	edge bool
	// hits says whether a plan creates it on the nodes keeping its state;
	// nil: a plan that acts on one of them does.
	hits func(p Plan, nodes map[string]bool) bool
	// plan, when set, makes the plan instead of the nemesis's own draw (a
	// fault its draw gives rarely: a node frozen on a write).
	plan planMaker
	// also is the situation the same fault creates too (a power cut timed
	// by an acknowledgement is a power loss as well).
	also string
	// between: the situation is made between two or more nodes keeping
	// the state, while the fault lasts (issuer replicas cut apart, each
	// granting): it needs them all up and serving at once, as they are
	// at a fault phase's start, before the first turns of the faults that
	// take one down (a crash, a restart, a freeze) or hold it. Its first
	// turn goes first among the node faults' (firstTurns).
	between bool
	// keepsUp: the fault leaves its node serving (a clock step), so its
	// first turn goes before those of the faults that take a node down
	// (firstTurns).
	keepsUp bool
}

// planMaker makes a remedy's plan on one of nodes; errOwnDraw leaves it to
// the nemesis's draw.
type planMaker func(ctx context.Context, env *Env, rng *rand.Rand, nodes map[string]bool) (Plan, error)

// errOwnDraw: a plan maker has no plan of its own for this target (a
// leader-aware cut where no leader is named): the nemesis draws as usual.
var errOwnDraw = errors.New("no aimed plan here: the nemesis draws its own")

// actsOn is a plan that acts on one of nodes.
func actsOn(p Plan, nodes map[string]bool) bool {
	return slices.ContainsFunc(p.Nodes, func(n string) bool { return nodes[n] })
}

// remedies are the situations the guide aims at, one line each; their ids
// are the analysis's (a harness test holds them to it). The replays and
// late writes come from the clients' faults and the workload, which run
// throughout; the 20 s scales need more than a calm phase of a short run.
var remedies = []remedy{
	{situation: "issuer-restart-regrant", nemesis: Restart, state: issuerState, edge: true},
	{situation: "issuer-power-loss-regrant", nemesis: PowerLoss, state: issuerState, edge: true},
	// A step back timed by a grant, outages held off until the next
	// (stepBackOnGrant): drawn, most clock faults were strobes, which a
	// crash of the one node they shared it with left without two grants.
	{situation: "issuer-clock-back-regrant", nemesis: Clock, state: issuerState, edge: true, hits: stepsBackAtOnce, plan: stepBackOnGrant, keepsUp: true},
	{situation: "issuer-replicas-separated", nemesis: Partition, state: issuerState, hits: separates, plan: cutOffFollower, between: true},
	{situation: "issuer-replicas-one-way", nemesis: Partition, state: issuerState, hits: separatesOneWay, plan: cutFromLeader, between: true},
	{situation: "resource-restart-stale", nemesis: Restart, state: resourceState, edge: true},
	{situation: "resource-power-loss-stale", nemesis: PowerLoss, state: resourceState, edge: true},
	// A crash on an acknowledgement is the same crash, timed where
	// durability is at stake (the analysis counts it by its mode).
	{situation: "issuer-restart-regrant", nemesis: CrashOnAck, state: issuerState, edge: true, hits: crashesAs(CrashKill)},
	{situation: "issuer-power-loss-regrant", nemesis: CrashOnAck, state: issuerState, edge: true, hits: crashesAs(CrashPower), also: "issuer-power-cut-on-ack"},
	{situation: "resource-restart-stale", nemesis: CrashOnAck, state: resourceState, edge: true, hits: crashesAs(CrashKill)},
	{situation: "resource-power-loss-stale", nemesis: CrashOnAck, state: resourceState, edge: true, hits: crashesAs(CrashPower), also: "resource-power-cut-on-ack"},
	// A power cut on an acknowledgement while unsynced writes are on the
	// node's layer: a durability flaw's window needs many (each a few
	// milliseconds wide), beyond the power-loss situations' three.
	{situation: "issuer-power-cut-on-ack", nemesis: CrashOnAck, state: issuerState, edge: true, hits: crashesAs(CrashPower), also: "issuer-power-loss-regrant"},
	{situation: "resource-power-cut-on-ack", nemesis: CrashOnAck, state: resourceState, edge: true, hits: crashesAs(CrashPower), also: "resource-power-loss-stale"},
	// The proxies strip tokens from a share of the writes: many a fault,
	// so one early turn makes the situation (it keeps its own draws too).
	{situation: "token-stripped", nemesis: Strip, edge: true},
	// A node the writes go through frozen, long enough for the lease to
	// run out and the next holder to write through another: the held
	// write reaches the resource when the node thaws.
	{situation: "write-overtaken", nemesis: Pause, state: writePath, hits: freezes, plan: freezeOnWrite},
	{situation: "key-idle-1s-stale", idle: time.Second},
	{situation: "key-idle-5s-stale", idle: 5 * time.Second},
	{situation: "lock-free-1s-regrant", idle: time.Second},
	{situation: "lock-free-5s-regrant", idle: 5 * time.Second},
}

// crashesAs: a crash on an acknowledgement in mode, on one of nodes.
func crashesAs(mode string) func(p Plan, nodes map[string]bool) bool {
	return func(p Plan, nodes map[string]bool) bool {
		c, ok := p.Params.(*ackCrash)
		return ok && c.Crash == mode && actsOn(p, nodes)
	}
}

// freezes: a node pause of one of nodes (not a holder pause).
func freezes(p Plan, nodes map[string]bool) bool {
	pp, ok := p.Params.(*pauseParams)
	return ok && pp.Mode == PauseNode && actsOn(p, nodes)
}

// freezeOnWrite freezes one of nodes as it serves a write: 0.3 to 4 ms
// after the write is sent, when a resource that reads the mark and then
// writes has most often sent its read (its answer then waits in the
// frozen node, already old when it thaws).
func freezeOnWrite(ctx context.Context, env *Env, rng *rand.Rand, nodes map[string]bool) (Plan, error) {
	var at []Node
	for _, n := range nodesOf(env) {
		if nodes[n.Name] {
			at = append(at, n)
		}
	}
	node, err := pickFree(ctx, env, rng, at)
	if err != nil {
		return Plan{}, err
	}
	// The next holder writes through another node: with every other one
	// held (a pause of the nemesis's own draw froze the other redis
	// adapter 70 ms before), nothing could overtake the frozen write, and
	// no write at all went through for 2 s. Start checks it again once
	// its write came.
	if !otherWritePathFree(env, node) {
		return Plan{}, ErrBusy
	}
	return Plan{Nodes: []string{node}, TakesOver: true, Outage: true,
		Params: &pauseParams{Mode: PauseNode, OnWrite: true, AfterWriteUS: 300 + rng.Int64N(3700)}}, nil
}

// Situations lists the situation ids the guide aims at.
func Situations() []string {
	var out []string
	for _, r := range remedies {
		if !slices.Contains(out, r.situation) {
			out = append(out, r.situation)
		}
	}
	return out
}

// deficits is how far each remedy's situation is below GuideTarget, by
// index of remedies: only those that apply (in cov), or, for an idle scale
// not yet reached by the run so far, those whose other scales apply. A nil
// cov (no live coverage) has every situation short.
func deficits(cov map[string]int) map[int]int {
	idleApplies := false
	for _, r := range remedies {
		if _, ok := cov[r.situation]; ok && r.nemesis == "" {
			idleApplies = true
		}
	}
	out := map[int]int{}
	for i, r := range remedies {
		n, ok := cov[r.situation]
		if cov != nil && !ok && !(r.nemesis == "" && idleApplies) {
			continue
		}
		if d := GuideTarget - n; d > 0 {
			out[i] = d
		}
	}
	return out
}

// aim is the next fault a guided fault phase draws: a nemesis, the nodes it
// should hit (nil: any) and why.
type aim struct {
	nemesis Nemesis
	nodes   map[string]bool
	why     string
	// situation is the one aimed at ("" for an unaimed turn).
	situation string
	// short: the fault's length is drawn from the shortest quarter of the
	// nemesis's range (remedy.edge); long: from the longer half (a
	// situation made while the fault lasts: a grant during a partition).
	short, long bool
	// hits, plan: as the remedy's (hits never nil when nodes is set).
	hits func(p Plan, nodes map[string]bool) bool
	plan planMaker
	// twoShort: the fault also creates another situation below target
	// (remedy.also).
	twoShort bool
	// between, keepsUp: as the remedy's.
	between, keepsUp bool
	// applied, when set, is closed once the fault is applied (or will
	// not be): the conductor waits for it before the next node fault.
	applied chan struct{}
}

// nextFault chooses the next fault among free (the conducted nemeses with
// no fault live; tried counts each one's faults so far): first a turn for
// each that never had one (aimed first: the remedies of the situations
// furthest below target go before the nemeses no situation asks for, so
// a run's first seconds go to the faults that create something), then one
// draw in exploreOneIn for one of the least tried, otherwise the remedy of
// the situation furthest below target that a free nemesis can create on a
// node keeping its state (ties drawn), or one of the least tried when none
// is short.
//
// aimOnly are nemeses that draw on their own (the clients' faults) but
// whose node faults a remedy asks for: the guide aims them at what it
// needs, and gives them no other turn.
func nextFault(env *Env, cov map[string]int, free, aimOnly []Nemesis, tried map[string]int, rng *rand.Rand) (aim, bool) {
	if len(free) == 0 && len(aimOnly) == 0 {
		return aim{}, false
	}
	leastTried := func(why string) (aim, bool) {
		fewest := slices.MinFunc(free, func(a, b Nemesis) int { return tried[a.Name()] - tried[b.Name()] })
		ties := slices.DeleteFunc(slices.Clone(free), func(n Nemesis) bool { return tried[n.Name()] > tried[fewest.Name()] })
		return aim{nemesis: ties[rng.IntN(len(ties))], why: why}, true
	}
	nemeses := append(slices.Clone(free), aimOnly...)
	best := remedyAims(env, ownFirst(env, deficits(cov), nemeses, tried), nemeses)
	if len(free) == 0 {
		if len(best) == 0 {
			return aim{}, false
		}
		return best[rng.IntN(len(best))], true
	}
	if slices.ContainsFunc(free, func(n Nemesis) bool { return tried[n.Name()] == 0 }) {
		// A clients' nemesis aimed at a node (a freeze of an adapter on a
		// write) has no first turn: among the first turns of every node
		// fault at once, the store it needs serving for the newer write
		// was crashed, stopped or stepped back, and no such freeze made
		// its situation (redis seeds 1-5 and zookeeper seeds 1-2: one of
		// seven, each holding an adapter 5 s). Its aim comes after them.
		untried := slices.DeleteFunc(slices.Clone(best), func(a aim) bool {
			return tried[a.nemesis.Name()] > 0 || slices.Contains(aimOnly, a.nemesis) && a.nodes != nil
		})
		untried = firstTurns(rarest(untried, append(slices.Clone(free), aimOnly...)), aimOnly)
		if len(untried) > 0 {
			a := untried[rng.IntN(len(untried))]
			a.why = "first turn, aimed: " + a.why
			return a, true
		}
		return leastTried("first turn")
	}
	if rng.IntN(exploreOneIn) == 0 {
		return leastTried("explore")
	}
	if len(best) > 0 {
		best = twoAtOnce(best)
		return best[rng.IntN(len(best))], true
	}
	return leastTried("no situation it can create is short")
}

// firstTurns orders the aimed first turns: the clients' nemeses (aimOnly)
// first, their faults hold no node, so the node faults after them wait
// 20 ms, not a gap (clientsGap), and what only they create (a stripped
// token) comes in the phase's first second instead of after the node
// faults' first turns. Then, among the node faults, a situation made
// between nodes (remedy.between: issuer replicas cut apart) while every
// one of them is up and granting: drawn among six or seven first turns
// 0.3-0.9 s apart, the partition came 1.1-3.7 s into a split-issuers run,
// after crashes of the replicas it needs serving; first, a lock granted
// on both sides (a contended key, a paused holder's lock taken over
// through the other replica) gets one token twice in the cut's first
// tenth of a second. Then a fault that leaves its node serving
// (remedy.keepsUp: a clock stepped back on a grant): it waits for no
// outage, while behind a crash's it came 0.7-1.4 s later (memory, a clock
// after a power cut on an acknowledgement: 2.4 s into the run), and a
// node fault after it waits only the gap. It keeps the aims of the first
// kind there is, all of them where there is none.
func firstTurns(aims []aim, aimOnly []Nemesis) []aim {
	for _, first := range []func(a aim) bool{
		func(a aim) bool { return slices.Contains(aimOnly, a.nemesis) },
		func(a aim) bool { return a.between },
		func(a aim) bool { return a.keepsUp },
	} {
		if kept := slices.DeleteFunc(slices.Clone(aims), func(a aim) bool { return !first(a) }); len(kept) > 0 {
			return kept
		}
	}
	return aims
}

// rarest keeps the aims whose situation the fewest of nemeses can create:
// a nemesis's first turn goes to what only it creates (a crash timed by an
// acknowledgement to the power cut on one, not to the restart that restart
// creates too), and the nemeses with such a situation go first. Without
// it, a first turn was drawn among all the aims, so the nemesis with the
// most remedy lines (crash-on-ack, six) most often went first, as a kill.
func rarest(aims []aim, nemeses []Nemesis) []aim {
	makers := makersOf(namesOf(nemeses))
	fewest := -1
	for _, a := range aims {
		if m := makers(a.situation); fewest < 0 || m < fewest {
			fewest = m
		}
	}
	return slices.DeleteFunc(aims, func(a aim) bool { return makers(a.situation) > fewest })
}

// makersOf counts, for a situation, the nemeses among names with a
// remedy for it.
func makersOf(names map[string]bool) func(situation string) int {
	return func(situation string) int {
		var makers []string
		for _, r := range remedies {
			if r.situation == situation && !slices.Contains(makers, r.nemesis) && names[r.nemesis] {
				makers = append(makers, r.nemesis)
			}
		}
		return len(makers)
	}
}

func namesOf(nemeses []Nemesis) map[string]bool {
	out := map[string]bool{}
	for _, n := range nemeses {
		out[n.Name()] = true
	}
	return out
}

// ownFirst drops from short (by remedies' index) a nemesis's lines for
// situations another of nemeses can create too, while a situation only it
// creates is short, however short: its turns go to what no other fault
// makes, and the others make the rest. Drawn among them all, crash-on-ack
// spent one or two of a run's four to six turns as a kill aimed at a
// restart situation, which restart was making meanwhile, and the power
// cuts on an acknowledgement stayed at 2 (redis, seeds 1-5). The other
// makers are counted busy or free (tried: every nemesis that had a turn):
// with restart's fault still on, crash-on-ack's kills were aimed at
// restart situations all the same (two SSH hosts, seeds 2 and 3).
func ownFirst(env *Env, short map[int]int, nemeses []Nemesis, tried map[string]int) map[int]int {
	names := namesOf(nemeses)
	for n := range tried {
		names[n] = true
	}
	makers := makersOf(names)
	own := map[string]bool{}
	for i, r := range remedies {
		if short[i] > 0 && r.nemesis != "" && makers(r.situation) == 1 && len(remedyAims(env, map[int]int{i: 1}, nemeses)) > 0 {
			own[r.nemesis] = true
		}
	}
	out := maps.Clone(short)
	for i, r := range remedies {
		if own[r.nemesis] && makers(r.situation) > 1 {
			delete(out, i)
		}
	}
	return out
}

// twoAtOnce keeps, among aims equally short, those whose fault creates
// another short situation too: a power loss aimed at a power-loss
// situation went to power-loss as often as to a power cut on an
// acknowledgement, which makes both, and the cut, with one remedy line
// against two, fell behind (two SSH hosts: the issuer's 1-2 a run, while
// power-loss aimed at its power-loss situation 2-3 times).
func twoAtOnce(aims []aim) []aim {
	if two := slices.DeleteFunc(slices.Clone(aims), func(a aim) bool { return !a.twoShort }); len(two) > 0 {
		return two
	}
	return aims
}

// remedyAims are the aims at the situations furthest below target (short,
// by remedies' index) that a free nemesis can create on a node keeping
// their state.
func remedyAims(env *Env, short map[int]int, free []Nemesis) []aim {
	var best []aim
	most := 0
	for i, r := range remedies {
		k := slices.IndexFunc(free, func(n Nemesis) bool { return n.Name() == r.nemesis })
		if short[i] == 0 || r.nemesis == "" || k < 0 {
			continue
		}
		nodes := stateNodes(env, r.state)
		if r.state != anyNode && len(nodes) == 0 || r.between && len(nodes) < 2 {
			continue
		}
		if short[i] > most {
			best, most = nil, short[i]
		}
		if short[i] == most {
			hits := r.hits
			if hits == nil {
				hits = actsOn
			}
			twoShort := r.also != "" && slices.ContainsFunc(remedyIndices(r.also), func(j int) bool { return short[j] > 0 })
			best = append(best, aim{nemesis: free[k], situation: r.situation, nodes: nodes, short: r.edge, long: !r.edge, hits: hits, plan: r.plan,
				twoShort: twoShort, between: r.between, keepsUp: r.keepsUp, why: fmt.Sprintf("%s %d of %d", r.situation, GuideTarget-short[i], GuideTarget)})
		}
	}
	return best
}

// remedyIndices are the indices in remedies of situation's lines.
func remedyIndices(situation string) []int {
	var out []int
	for i, r := range remedies {
		if r.situation == situation {
			out = append(out, i)
		}
	}
	return out
}

// stateNodes are the target's nodes keeping the half's state, as the
// analysis judges them: stateful nodes whose role does not name only the
// other half; every stateful node when no role names this half. writePath:
// the stateless nodes, when there are two or more. anyNode: nil (any node).
func stateNodes(env *Env, h half) map[string]bool {
	if h == anyNode {
		return nil
	}
	out, stateful := map[string]bool{}, map[string]bool{}
	if h == writePath {
		for _, n := range nodesOf(env) {
			if n.Stateless {
				out[n.Name] = true
			}
		}
		if len(out) < 2 {
			return nil
		}
		return out
	}
	for _, n := range nodesOf(env) {
		if n.Stateless {
			continue
		}
		stateful[n.Name] = true
		is, res := strings.Contains(n.Role, "issuer"), strings.Contains(n.Role, "resource")
		if h == issuerState && res && !is || h == resourceState && is && !res {
			continue
		}
		out[n.Name] = true
	}
	if len(out) == 0 {
		return stateful
	}
	return out
}
