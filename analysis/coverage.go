package analysis

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/history"
	"github.com/fencecheck/fencecheck/nemesis"
)

// Coverage says what a run provoked: for each way fencing breaks (a failure
// class), the situations that would expose it on a system fencecheck did
// not write, and how many times the history shows each was created. A
// valid verdict is only worth what the run tried: a server that forgets an
// idle key's mark passes every run that never left a key idle and then
// wrote to it late. It is counted here, once, from the history alone
// (operations, fault periods with their nodes, strip events, the run
// events); the summary, results.json, the report and JUnit render it. It
// counts only what the system itself was put through: a write refused
// while its node restarted, or an idle time the node spent restarting,
// never exposed anything.
type Coverage struct {
	Classes []CoverageClass `json:"classes"`
	// MainPhase is the length of the main phase the time scales were
	// judged against (ns).
	MainPhase time.Duration `json:"main_phase_ns"`
	// Lease is the longest lease the analysis assumed a grant held a lock
	// for (the TTL, or the longest a system said it granted), ns.
	Lease time.Duration `json:"lease_ns"`
}

// CoverageClass is one failure class and its situations.
type CoverageClass struct {
	// Class names it ("counter-reset"); Title says it in words.
	Class string `json:"class"`
	Title string `json:"title"`
	// Status is one of the Coverage* statuses.
	Status     string      `json:"status"`
	Situations []Situation `json:"situations"`
}

// Statuses of a class.
const (
	// CoverageCovered: every situation that applies was created.
	CoverageCovered = "covered"
	// CoveragePartial: some situations that apply were, others never.
	CoveragePartial = "partly covered"
	// CoverageNone: none of the situations that apply was created.
	CoverageNone = "not covered"
	// CoverageNotApplicable: no situation of the class can occur on this
	// target (why is each situation's NotApplicable).
	CoverageNotApplicable = "not applicable"
)

// Situation is one concrete situation that exposes its class's flaw.
type Situation struct {
	ID   string `json:"id"`
	Text string `json:"text"`
	// Count is how many times the run created it (0 when not applicable):
	// only by an operation that reached the system (ok, or a definite
	// rejection; an info one may never have arrived) and, for an idle
	// situation, only with no fault on the state's nodes meanwhile.
	Count int `json:"count"`
	// NotApplicable says why it cannot occur on this target ("": it can).
	NotApplicable string `json:"not_applicable,omitempty"`
	// Missing says, when it applies and was never created, why in words.
	Missing string `json:"missing,omitempty"`
	// Examples are invoke indices of operations that completed it (the
	// first few).
	Examples []int64 `json:"examples,omitempty"`
	// During, for the idle situations, counts the idle periods that would
	// have made it but that a fault touched: a restart, pause, power loss,
	// clock step, partition or disk fault of a node keeping the state
	// meanwhile. That node may never have seen the idle time (a system
	// that rebuilds its timers at start cannot show an idle-time flaw
	// then), so these are never counted in Count. DuringByNemesis says by
	// which nemeses (a period two touched counts under both). (Named apart
	// from the "during" map of schema 3, which counted every idle period.)
	During          int            `json:"during_faults,omitempty"`
	DuringByNemesis map[string]int `json:"during_by_nemesis,omitempty"`
}

// clientNode is the node name faults on the workload's clients carry
// (nemesis's holder pause; clock steps of the clients' clock).
const clientNode = "client"

// clientSideFault: the fault acts on the clients or their traffic, not on
// a node: the strip and delay proxies change or hold writes in flight, a
// holder pause stalls a client; every node runs on, timers and all, and
// sees the idle time. (A partition counts as a node's fault even when the
// proxies make it: it can move leadership, and a new leader rebuilds its
// leases.)
func clientSideFault(f Fault) bool {
	switch f.Nemesis {
	case nemesis.Strip, nemesis.Delay:
		return true
	case nemesis.Pause:
		return f.Mode() == nemesis.PauseHolders
	}
	return false
}

// touches reports whether fault period f acted on a node of nodes (nil:
// the history lists no nodes, so any node but the clients; a fault that
// names none may have touched any).
func touches(f Fault, nodes map[string]bool) bool {
	if f.Instant() || f.Nemesis == history.FaultHeal || clientSideFault(f) {
		return false
	}
	if strings.TrimSpace(f.Node) == "" {
		return true
	}
	for _, n := range strings.Split(f.Node, ",") {
		n = strings.TrimSpace(n)
		if nodes != nil && nodes[n] || nodes == nil && n != clientNode && n != nemesis.ClientGroup {
			return true
		}
	}
	return false
}

// idleSplit is an idle situation's periods parted by the faults: the quiet
// ones (no fault touched the nodes keeping the state) make the situation;
// the others are only reported, as During.
type idleSplit struct {
	quiet        []int64 // the operations that ended the quiet ones
	during       int
	duringFaults map[string]int
}

// splitQuiet parts the idle periods by whether a fault of faults touched
// nodes while they lasted.
func splitQuiet(periods []idlePeriod, faults []Fault, nodes map[string]bool) idleSplit {
	var out idleSplit
	for _, p := range periods {
		seen := map[string]bool{}
		for _, f := range faults {
			if f.Start < p.to && f.Stop > p.from && touches(f, nodes) && !seen[f.Nemesis] {
				seen[f.Nemesis] = true
			}
		}
		if len(seen) == 0 {
			out.quiet = append(out.quiet, p.id)
			continue
		}
		out.during++
		if out.duringFaults == nil {
			out.duringFaults = map[string]int{}
		}
		for n := range seen {
			out.duringFaults[n]++
		}
	}
	slices.Sort(out.quiet)
	return out
}

// idle makes an idle situation from its periods: the quiet ones counted,
// the others as During.
func (in coverageInput) idle(id, text, na string, periods []idlePeriod, nodes map[string]bool, missing string) Situation {
	sp := splitQuiet(periods, in.faults, nodes)
	if sp.during > 0 {
		missing += fmt.Sprintf("; %d idle periods that would have made it overlapped a fault on a node keeping the state, and are not counted (during)", sp.during)
	}
	s := newSituation(id, text, na, len(sp.quiet), sp.quiet, missing)
	if s.Applies() {
		s.During, s.DuringByNemesis = sp.during, sp.duringFaults
	}
	return s
}

// newSituation is a situation that applies unless na says why not, with
// its count, first examples and, when never created, why.
func newSituation(id, text, na string, count int, ex []int64, missing string) Situation {
	s := Situation{ID: id, Text: text, NotApplicable: na}
	if na != "" {
		return s
	}
	s.Count = count
	if len(ex) > maxCoverageExamples {
		ex = ex[:maxCoverageExamples]
	}
	s.Examples = ex
	if count == 0 {
		s.Missing = missing
	}
	return s
}

// Applies reports whether the situation can occur on the target.
func (s Situation) Applies() bool { return s.NotApplicable == "" }

// Uncovered lists the classes that apply but of which the run created no
// situation.
func (c *Coverage) Uncovered() []CoverageClass {
	if c == nil {
		return nil
	}
	var out []CoverageClass
	for _, cl := range c.Classes {
		if cl.Status == CoverageNone {
			out = append(out, cl)
		}
	}
	return out
}

// gateReasons are the gate's reasons under RequireCoverage: one per class
// that applies and of which the run created no situation, named, with
// what it never created.
func (c *Coverage) gateReasons() []string {
	var out []string
	for _, cl := range c.Uncovered() {
		var never []string
		for _, s := range cl.Situations {
			if s.Applies() {
				never = append(never, s.Text+" ("+s.Missing+")")
			}
		}
		out = append(out, fmt.Sprintf("coverage is required (--require-coverage) and the run never provoked failure class %s (%s): never created: %s",
			cl.Class, cl.Title, strings.Join(never, "; ")))
	}
	return out
}

// Never lists, in words, the situations that apply and were never created.
func (c *Coverage) Never() []string {
	if c == nil {
		return nil
	}
	var out []string
	for _, cl := range c.Classes {
		for _, s := range cl.Situations {
			if s.Applies() && s.Count == 0 {
				out = append(out, s.Text+": "+s.Missing)
			}
		}
	}
	return out
}

// IdleScales are the time scales of idleness coverage asks for: a flaw that
// forgets after a few seconds shows at one, after tens at another.
var IdleScales = []time.Duration{time.Second, 5 * time.Second, 20 * time.Second}

// scaleApplies says whether a main phase of length main can hold an idle
// period of d with activity before and after it: at least 1.5 d (a 30 s
// run reaches 20 s), less a second of slack for the phases' edges.
func scaleApplies(d, main time.Duration) bool { return main >= d+d/2-time.Second }

const maxCoverageExamples = 5

// Situation ids, by class.
const (
	SitIssuerRestart    = "issuer-restart-regrant"
	SitIssuerPowerLoss  = "issuer-power-loss-regrant"
	SitIssuerAckCut     = "issuer-power-cut-on-ack"
	SitResourceAckCut   = "resource-power-cut-on-ack"
	SitIssuerClockBack  = "issuer-clock-back-regrant"
	SitIssuersSeparated = "issuer-replicas-separated"
	SitIssuersOneWay    = "issuer-replicas-one-way"
	SitResourceRestart  = "resource-restart-stale"
	SitResourcePower    = "resource-power-loss-stale"
	SitReplay           = "replay"
	SitStripped         = "token-stripped"
	SitGarbled          = "token-garbled"
	SitForged           = "token-forged"
	SitLateWrite        = "late-write-after-newer"
	SitWriteOvertaken   = "write-overtaken"
)

// SitKeyIdle and SitLockFree name the idle situations of scale d
// ("key-idle-5s-stale", "lock-free-5s-regrant").
func SitKeyIdle(d time.Duration) string  { return fmt.Sprintf("key-idle-%s-stale", scaleName(d)) }
func SitLockFree(d time.Duration) string { return fmt.Sprintf("lock-free-%s-regrant", scaleName(d)) }

func scaleName(d time.Duration) string { return d.String() }

// coverageInput is what coverage reads besides the operations.
type coverageInput struct {
	ops    *history.Ops
	faults []Fault
	run    *RunRecord
	nodes  []history.RunNode
	sem    checkers.Semantics
	// lateReached are the late writes after a newer write that reached
	// the resource (lateWrites).
	lateReached []int64
	main        time.Duration
	lease       time.Duration
}

// coverage counts every situation of every class.
func coverage(in coverageInput) *Coverage {
	h := indexOps(in.ops)
	c := &Coverage{MainPhase: in.main, Lease: in.lease}
	issuerNodes := in.stateNodes(true)
	resourceNodes := in.stateNodes(false)

	// counter reset, or a counter not durable.
	rn, rex := h.regrantsAfter(in.crashesOf(nemesis.Restart, issuerNodes, nemesis.RestartWipe))
	pn, pex := h.regrantsAfter(in.crashesOf(nemesis.PowerLoss, issuerNodes))
	c.add("counter-reset", "counter reset or not durable (issuer)",
		newSituation(SitIssuerRestart, "the issuer restarted (kill -9) after granting, then granted again on the same lock",
			in.faultNA(nemesis.Restart, issuerNodes, "issuer"), rn, rex, in.faultMissing(nemesis.Restart, "no restart of a node holding issuer state was followed by a new grant on a lock granted before it")),
		newSituation(SitIssuerPowerLoss, "the issuer lost power after granting, then granted again on the same lock",
			in.faultNA(nemesis.PowerLoss, issuerNodes, "issuer"), pn, pex, in.faultMissing(nemesis.PowerLoss, "no power loss of a node holding issuer state was followed by a new grant on a lock granted before it")),
		in.ackCut(SitIssuerAckCut, issuerNodes, "issuer"))

	// wall-clock tokens.
	cn, cex := h.clockBackRegrants(in.faultsOf(nemesis.Clock, in.clockIssuers(issuerNodes)))
	c.add("wall-clock", "wall-clock tokens",
		newSituation(SitIssuerClockBack, "the issuer's clock stepped back between two grants on a lock",
			in.clockNA(issuerNodes), cn, cex, in.faultMissing(nemesis.Clock, "no clock fault moved an issuer's clock back between two grants on one lock")))

	// split brain.
	sn, sex := h.separatedGrants(in.faults, issuerNodes, false)
	on, oex := h.separatedGrants(in.faults, issuerNodes, true)
	c.add("split-brain", "split brain (two issuers)",
		newSituation(SitIssuersSeparated, "issuer replicas were partitioned apart while locks were granted",
			in.replicasNA(issuerNodes, false), sn, sex, in.faultMissing(nemesis.Partition, "no partition separated the issuer's replicas while a lock was granted")),
		newSituation(SitIssuersOneWay, "an issuer replica could not reach another that still reached it (the leader, where the cut named one), while locks were granted",
			in.replicasNA(issuerNodes, true), on, oex, in.faultMissing(nemesis.Partition, "no one-way cut kept an issuer replica from reaching another (the leader, where the cut named one) that still reached it while a lock was granted")))

	// a token lost, a high-water mark forgotten.
	var forgot []Situation
	for _, d := range IdleScales {
		na := ""
		if !scaleApplies(d, in.main) {
			na = fmt.Sprintf("the main phase (%s) is too short for an idle time of %s with activity around it (it needs %s)", in.main.Round(time.Second/10), d, (d + d/2 - time.Second))
		}
		forgot = append(forgot, in.idle(SitKeyIdle(d), fmt.Sprintf("a key had no write for %s or more, its node untouched by faults, then was written with a token older than its mark", d),
			na, h.idleStale(d), resourceNodes, fmt.Sprintf("no key was left without writes (and its node without faults) for %s and then written with an older token", d)))
	}
	for _, d := range IdleScales {
		na := ""
		if !scaleApplies(d, in.main) {
			na = fmt.Sprintf("the main phase (%s) is too short for a lock free %s with grants around it", in.main.Round(time.Second/10), d)
		}
		forgot = append(forgot, in.idle(SitLockFree(d), fmt.Sprintf("a lock was free for %s or more, its issuer untouched by faults, then granted again", d),
			na, h.freeRegrants(d, in.lease), issuerNodes, fmt.Sprintf("no lock sat free (released or expired, no grant; its issuer without faults) for %s and was then granted again", d)))
	}
	an, aex := h.staleAfter(in.crashesOf(nemesis.Restart, resourceNodes, nemesis.RestartWipe))
	bn, bex := h.staleAfter(in.crashesOf(nemesis.PowerLoss, resourceNodes))
	forgot = append(forgot,
		newSituation(SitResourceRestart, "a resource restarted (kill -9), then was sent a token older than a key's mark from before",
			in.faultNA(nemesis.Restart, resourceNodes, "resource"), an, aex, in.faultMissing(nemesis.Restart, "no restart of a node holding resource state was followed by a write older than a key's mark")),
		newSituation(SitResourcePower, "a resource lost power, then was sent a token older than a key's mark from before",
			in.faultNA(nemesis.PowerLoss, resourceNodes, "resource"), bn, bex, in.faultMissing(nemesis.PowerLoss, "no power loss of a node holding resource state was followed by a write older than a key's mark")),
		in.ackCut(SitResourceAckCut, resourceNodes, "resource"))
	c.add("high-water-forgotten", "token lost or high-water mark forgotten", forgot...)

	// replay.
	replayNA := ""
	if in.sem.Equal == checkers.EqualAccept {
		replayNA = "the target declares equal: accept (a holder may write again with its token)"
	}
	qn, qex := h.replays()
	c.add("replay", "replay accepted",
		newSituation(SitReplay, "a write was sent with the token already accepted on its key (a replay)", replayNA, qn, qex,
			"no write resent a key's accepted token"))

	// missing or malformed token.
	stripNA := in.nemesisNA(nemesis.Strip)
	c.add("missing-token", "missing or malformed token",
		newSituation(SitStripped, "a write reached the resource with its token removed or empty", stripNA,
			len(h.tampered["remove"])+len(h.tampered["empty"]), append(h.tampered["remove"], h.tampered["empty"]...), in.faultMissing(nemesis.Strip, "the strip proxy removed no write's token")),
		newSituation(SitGarbled, "a write reached the resource with its token garbled", stripNA,
			len(h.tampered["garble"]), h.tampered["garble"], in.faultMissing(nemesis.Strip, "the strip proxy garbled no write's token")))

	// forgery.
	forgeNA := ""
	if !in.sem.Authenticated {
		forgeNA = "the target does not authenticate tokens (authenticated: false): a number no issuer signed cannot be told from one it did"
	}
	c.add("forgery", "forged token",
		newSituation(SitForged, "a write was sent with a token no issuer returned", forgeNA, len(h.forged), h.forged,
			"no write carried a token no issuer returned (the forger runs with --forge, always for authenticated targets)"))

	// the seeds' scenario.
	wn, wex := h.overtaken(in.heldInPausedNode(h))
	c.add("late-write", "late write by an expired holder",
		newSituation(SitLateWrite, "a holder whose lease had expired wrote after a newer holder's write was accepted", "",
			len(in.lateReached), in.lateReached, "no holder wrote with its old token after a newer holder's write was accepted (holder pauses: --nemesis pause)"),
		newSituation(SitWriteOvertaken, "a write was still in flight at the resource when a newer token's write on its key was accepted (where a resource checks the mark, then writes, in two steps)",
			in.overtakenNA(h), wn, wex, "no write was overtaken in flight by a newer token's accepted write on its key (a pause of a node the writes go through: --nemesis pause)"))
	return c
}

// heldInPausedNode: a write whose client gave up on it (timed out) while a
// pause froze the node it was sent to, from when that pause ended (the
// request waits in the frozen node and is served as it thaws).
func (in coverageInput) heldInPausedNode(h *opsIndex) func(w timedOp) (int64, bool) {
	return func(w timedOp) (int64, bool) {
		if !w.timedOut {
			return 0, false
		}
		node := map[string]bool{h.nodes[w.node]: true}
		for _, f := range in.faults {
			if f.Nemesis == nemesis.Pause && f.Mode() == nemesis.PauseNode && !f.Open && f.Start < w.completed && f.Stop > w.call && f.on(node) {
				return f.Stop, true
			}
		}
		return 0, false
	}
}

// overtakenNA: a write is overtaken in flight only where writes go
// through more than one node (a pause of the only one holds every writer
// alike).
func (in coverageInput) overtakenNA(h *opsIndex) string {
	if len(h.nodes) < 2 && in.run != nil {
		return "every write went through one node: while it is held, so is every newer writer"
	}
	return ""
}

// add appends a class, its status read from its situations.
func (c *Coverage) add(class, title string, sits ...Situation) {
	applies, created := 0, 0
	for _, s := range sits {
		if s.Applies() {
			applies++
			if s.Count > 0 {
				created++
			}
		}
	}
	status := CoverageNotApplicable
	switch {
	case applies == 0:
	case created == applies:
		status = CoverageCovered
	case created > 0:
		status = CoveragePartial
	default:
		status = CoverageNone
	}
	c.Classes = append(c.Classes, CoverageClass{Class: class, Title: title, Status: status, Situations: sits})
}

// stateNodes are the nodes that keep issuer state (issuer true) or resource
// state: stateful nodes whose role does not say they keep only the other
// half. Nil when the history does not list the nodes (then every fault's
// nodes count).
func (in coverageInput) stateNodes(issuer bool) map[string]bool {
	if in.nodes == nil {
		return nil
	}
	out, stateful := map[string]bool{}, map[string]bool{}
	for _, n := range in.nodes {
		if n.Stateless {
			continue
		}
		stateful[n.Name] = true
		is, res := strings.Contains(n.Role, "issuer"), strings.Contains(n.Role, "resource")
		if (issuer && res && !is) || (!issuer && is && !res) {
			continue
		}
		out[n.Name] = true
	}
	if len(out) == 0 {
		// No role names this half (the reference's split issuers serve
		// the resource too, labelled "issuer"): the state is on the
		// stateful nodes, whichever they are.
		return stateful
	}
	return out
}

// clockIssuers are the issuer-state nodes whose clock can be moved.
func (in coverageInput) clockIssuers(issuers map[string]bool) map[string]bool {
	if issuers == nil {
		return nil
	}
	out := map[string]bool{}
	for _, n := range in.nodes {
		if n.Clock && issuers[n.Name] {
			out[n.Name] = true
		}
	}
	return out
}

// faultsOf are the fault periods of the named nemeses that acted on one of
// nodes (nil: any node) and ended (an open one never gave its node back).
func (in coverageInput) faultsOf(name string, nodes map[string]bool, more ...string) []Fault {
	var out []Fault
	for _, f := range in.faults {
		if (f.Nemesis == name || slices.Contains(more, f.Nemesis)) && !f.Instant() && !f.Open && (nodes == nil || f.on(nodes)) {
			out = append(out, f)
		}
	}
	return out
}

// crashesOf are the faults of the nemesis name (restart: a kill -9,
// power-loss: a power cut; more: others of its kind) on a node of nodes,
// with the crashes on an acknowledgement of the same mode: what a
// situation asks for is the crash, whatever timed it.
func (in coverageInput) crashesOf(name string, nodes map[string]bool, more ...string) []Fault {
	out := in.faultsOf(name, nodes, more...)
	mode := nemesis.CrashKill
	if name == nemesis.PowerLoss {
		mode = nemesis.CrashPower
	}
	for _, f := range in.faultsOf(nemesis.CrashOnAck, nodes) {
		if f.Mode() == mode {
			out = append(out, f)
		}
	}
	slices.SortStableFunc(out, func(a, b Fault) int { return cmp.Compare(a.Start, b.Start) })
	return out
}

// ackCut counts the power cuts that landed on an acknowledgement (a
// crash-on-ack timed by one, milliseconds after it) on a node keeping the
// kind's state: the moment a system that answers before its data is
// durable loses what it answered (LazyFS's crash on a matching operation,
// from outside). A system that syncs before it answers loses nothing
// then, so what the layer held unsynced is the finding's, not the
// situation's: it is in the fault's details.
func (in coverageInput) ackCut(id string, nodes map[string]bool, kind string) Situation {
	n := 0
	for _, f := range in.faultsOf(nemesis.CrashOnAck, nodes) {
		var timed bool
		_ = json.Unmarshal(f.Details["timed"], &timed)
		if f.Mode() == nemesis.CrashPower && timed {
			n++
		}
	}
	// A power cut needs the disk layer: where power-loss cannot act, a
	// crash on an acknowledgement is a kill -9 only.
	na := in.faultNA(nemesis.PowerLoss, nodes, kind)
	if na == "" {
		na = in.faultNA(nemesis.CrashOnAck, nodes, kind)
	}
	return newSituation(id, "the "+kind+" lost power within milliseconds of an acknowledgement",
		na, n, nil,
		in.faultMissing(nemesis.CrashOnAck, "no power cut of a node holding "+kind+" state landed on an acknowledgement"))
}

// nemesisNA is why the run events say the nemesis cannot act on the
// target ("" when they do not say so).
func (in coverageInput) nemesisNA(name string) string {
	if in.run == nil {
		return ""
	}
	if why, ok := in.run.NotApplicable[name]; ok {
		return "nemesis " + name + " cannot act on this target: " + why
	}
	return ""
}

// faultNA: a fault of the nemesis on a node of the kind (issuer or
// resource state) cannot happen.
func (in coverageInput) faultNA(name string, nodes map[string]bool, kind string) string {
	if na := in.nemesisNA(name); na != "" {
		return na
	}
	if nodes != nil && len(nodes) == 0 {
		return "no node of this target keeps " + kind + " state of its own"
	}
	return ""
}

func (in coverageInput) clockNA(issuers map[string]bool) string {
	if na := in.nemesisNA(nemesis.Clock); na != "" {
		return na
	}
	if c := in.clockIssuers(issuers); c != nil && len(c) == 0 {
		return "no node holding issuer state has a clock the clock nemesis can move"
	}
	return ""
}

func (in coverageInput) replicasNA(issuers map[string]bool, oneWay bool) string {
	if na := in.nemesisNA(nemesis.Partition); na != "" {
		return na
	}
	if in.nodes == nil {
		return ""
	}
	n, one := 0, 0
	for _, node := range in.nodes {
		if node.Partition && issuers[node.Name] {
			n++
			if node.OneWay {
				one++
			}
		}
	}
	if n < 2 {
		return "the issuer has no replicas a partition can separate (one node keeps its state)"
	}
	if oneWay && one < 2 {
		return "the target cannot cut its issuer replicas one way (only both ways)"
	}
	return ""
}

// faultMissing is why a situation that needs the nemesis was never
// created: the nemesis was not in the run, or what did not follow it.
func (in coverageInput) faultMissing(name, otherwise string) string {
	if in.run != nil && !slices.Contains(in.run.Nemeses, name) {
		return "nemesis " + name + " was not in the run (--nemesis " + in.run.Requested + ")"
	}
	return otherwise
}

// Lines says the coverage in a few lines, for the CLI summary: a head line,
// one line per class that applies, and each situation never created, in
// words.
func (c *Coverage) Lines() []string {
	if c == nil {
		return nil
	}
	applies, covered := 0, 0
	var na []string
	for _, cl := range c.Classes {
		switch cl.Status {
		case CoverageNotApplicable:
			na = append(na, cl.Title)
		case CoverageCovered, CoveragePartial:
			applies++
			covered++
		default:
			applies++
		}
	}
	head := fmt.Sprintf("coverage: %d of %d failure classes that apply were provoked", covered, applies)
	if len(na) > 0 {
		head += " (not applicable: " + strings.Join(na, "; ") + ")"
	}
	out := []string{head}
	for _, cl := range c.Classes {
		if cl.Status == CoverageNotApplicable {
			continue
		}
		var parts []string
		for _, s := range cl.Situations {
			if s.Applies() {
				part := fmt.Sprintf("%s %d", s.ID, s.Count)
				if s.During > 0 {
					part += fmt.Sprintf(" (+%d during faults, not covered)", s.During)
				}
				parts = append(parts, part)
			}
		}
		out = append(out, fmt.Sprintf("  %-14s %s: %s", cl.Status, cl.Title, strings.Join(parts, ", ")))
	}
	for _, n := range c.Never() {
		out = append(out, "  never created: "+n)
	}
	return out
}
