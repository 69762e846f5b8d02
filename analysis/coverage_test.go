package analysis

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/checkers/historytest"
	"github.com/fencecheck/fencecheck/history"
)

// covRun starts a history as the harness does: the run start event with
// the target's nodes and the nemeses, the main phase at 0 and the final
// phase at mainMS.
func covRun(nodes []history.RunNode, nemeses []string, notApplicable map[string]string, mainMS int64) *historytest.Builder {
	b := historytest.New()
	if notApplicable == nil {
		notApplicable = map[string]string{}
	}
	b.Run(history.RunStart, 0, map[string]any{history.RunExtraRequested: "all", history.RunExtraNemeses: nemeses,
		history.RunExtraNotApplicable: notApplicable, history.RunExtraNodes: nodes})
	b.Run(history.RunPhase, 0, map[string]any{history.RunExtraPhase: history.PhaseMain})
	b.Run(history.RunPhase, mainMS, map[string]any{history.RunExtraPhase: history.PhaseFinal})
	return b
}

var (
	reference = []history.RunNode{{Name: "reference", Role: "reference", Clock: true}}
	allNem    = []string{"clock", "delay", "partition", "pause", "power-loss", "restart", "strip"}
)

func covCheck(t *testing.T, b *historytest.Builder, sem checkers.Semantics) *Coverage {
	t.Helper()
	res, err := Check(context.Background(), b.Events(), Options{Semantics: sem, Checker: CheckerFast, MinOps: -1})
	require.NoError(t, err)
	require.NotNil(t, res.Coverage)
	return res.Coverage
}

func situation(t *testing.T, c *Coverage, id string) Situation {
	t.Helper()
	for _, cl := range c.Classes {
		for _, s := range cl.Situations {
			if s.ID == id {
				return s
			}
		}
	}
	t.Fatalf("no situation %s", id)
	return Situation{}
}

func class(c *Coverage, name string) CoverageClass {
	for _, cl := range c.Classes {
		if cl.Class == name {
			return cl
		}
	}
	return CoverageClass{}
}

// A restart of the issuer between two grants on one lock is counted once
// per restart; a restart with no grant before it, or of a node that keeps
// no state, is not.
func TestCoverageCountsRegrantsAfterAnIssuerRestart(t *testing.T) {
	nodes := []history.RunNode{{Name: "db", Role: "redis"}, {Name: "adapter-1", Role: "adapter", Stateless: true}}
	b := covRun(nodes, allNem, nil, 10000)
	b.OnProcess(1).Acquire("L", 0, 5, "1").Release("L", "1", 10, 15)
	b.Fault("restart", "db", 100, 200)
	b.OnProcess(1).Acquire("L", 300, 305, "2").Release("L", "2", 310, 315)
	b.OnProcess(1).Acquire("L", 400, 405, "3").Release("L", "3", 410, 415)
	b.Fault("restart", "adapter-1", 500, 600) // stateless: loses nothing
	b.OnProcess(1).Acquire("L", 700, 705, "4").Release("L", "4", 710, 715)
	b.Fault("restart", "db", 800, 900) // no grant after it
	b.Fault("power-loss", "db", 1000, 1100)
	c := covCheck(t, b, checkers.Semantics{})
	s := situation(t, c, SitIssuerRestart)
	assert.Equal(t, 1, s.Count)
	assert.Len(t, s.Examples, 1)
	assert.Zero(t, situation(t, c, SitIssuerPowerLoss).Count, "no grant after the power loss")
	assert.Contains(t, situation(t, c, SitIssuerPowerLoss).Missing, "power loss")
	assert.Equal(t, CoveragePartial, class(c, "counter-reset").Status)
}

// A crash on an acknowledgement is a crash as its mode says: a power cut
// counts where a power loss does, a kill -9 where a restart does.
func TestCoverageCountsCrashesOnAnAcknowledgementByTheirMode(t *testing.T) {
	nodes := []history.RunNode{{Name: "db", Role: "redis"}}
	b := covRun(nodes, append(slices.Clone(allNem), "crash-on-ack"), nil, 10000)
	b.OnProcess(1).Acquire("L", 0, 5, "1").Release("L", "1", 10, 15)
	b.FaultWith("crash-on-ack", "db", 100, 200, map[string]any{"mode": "power-loss", "after": "acquire"})
	b.OnProcess(1).Acquire("L", 300, 305, "2").Release("L", "2", 310, 315)
	b.FaultWith("crash-on-ack", "db", 400, 500, map[string]any{"mode": "kill", "after": "write"})
	b.OnProcess(1).Acquire("L", 600, 605, "3").Release("L", "3", 610, 615)
	b.FaultWith("crash-on-ack", "db", 700, 800, map[string]any{"mode": "power-loss", "after": "acquire"})
	b.OnProcess(1).Acquire("L", 900, 905, "4").Release("L", "4", 910, 915)
	c := covCheck(t, b, checkers.Semantics{})
	assert.Equal(t, 2, situation(t, c, SitIssuerPowerLoss).Count, "the two power cuts")
	assert.Equal(t, 1, situation(t, c, SitIssuerRestart).Count, "the kill")
}

// A write still in flight at the resource when a newer token's write on
// its key was accepted counts once it reached the resource: answered
// after the newer one, or held in its node by a pause of that node (its
// client gave up). One that timed out on a node nothing froze, one the
// newer write did not overtake, and one of a single-node target do not.
func TestCoverageCountsWritesOvertakenInFlight(t *testing.T) {
	adapters := []history.RunNode{{Name: "db", Role: "redis"}, {Name: "a1", Role: "adapter", Stateless: true}, {Name: "a2", Role: "adapter", Stateless: true}}
	b := covRun(adapters, allNem, nil, 10000)
	// Answered (refused) after a newer write was accepted: counts.
	b.OnNode("a1").WriteStale("k", "1", "v1", 100, 900, "2")
	b.OnNode("a2").Write("k", "2", "v2", 200, 300)
	// Timed out while a1 was frozen, overtaken meanwhile: counts.
	b.FaultWith("pause", "a1", 1000, 2500, map[string]any{"mode": "node"})
	b.OnNode("a1").WriteInfo("k", "3", "v3", 1100, 2100)
	b.OnNode("a2").Write("k", "4", "v4", 1500, 1600)
	// Timed out with no pause of its node: it may never have arrived.
	b.OnNode("a1").WriteInfo("k", "5", "v5", 3000, 4000)
	b.OnNode("a2").Write("k", "6", "v6", 3200, 3300)
	// Answered before the newer write was: not overtaken.
	b.OnNode("a1").Write("k", "7", "v7", 5000, 5100)
	b.OnNode("a2").Write("k", "8", "v8", 5050, 5200)
	c := covCheck(t, b, checkers.Semantics{})
	s := situation(t, c, SitWriteOvertaken)
	assert.Equal(t, 2, s.Count)
	assert.Len(t, s.Examples, 2)

	one := covRun(reference, allNem, nil, 10000)
	one.OnNode("reference").WriteStale("k", "1", "v1", 100, 900, "2")
	one.OnNode("reference").Write("k", "2", "v2", 200, 300)
	s = situation(t, covCheck(t, one, checkers.Semantics{}), SitWriteOvertaken)
	assert.Contains(t, s.NotApplicable, "one node")
}

// A power cut on an acknowledgement counts where it was timed by one,
// whatever the layer held then (a system that syncs before it answers has
// nothing unsynced); untimed, or a kill, it does not.
func TestCoverageCountsPowerCutsOnAcknowledgements(t *testing.T) {
	b := covRun(reference, append(slices.Clone(allNem), "crash-on-ack"), nil, 10000)
	b.OnProcess(1).Acquire("L", 0, 5, "1").Release("L", "1", 10, 15)
	cut := func(at int64, mode string, timed bool, unsynced int) {
		b.FaultWith("crash-on-ack", "reference", at, at+100, map[string]any{"mode": mode, "timed": timed, "unsynced_entries": unsynced})
	}
	cut(100, "power-loss", true, 3)
	cut(300, "power-loss", true, 0)
	cut(500, "power-loss", false, 4)
	cut(700, "kill", true, 2)
	cut(900, "power-loss", true, 1)
	c := covCheck(t, b, checkers.Semantics{})
	assert.Equal(t, 3, situation(t, c, SitIssuerAckCut).Count)
	assert.Equal(t, 3, situation(t, c, SitResourceAckCut).Count, "the reference keeps both halves")
	na := covRun(reference, allNem, map[string]string{"power-loss": "needs the disk layer"}, 10000)
	na.OnProcess(1).Acquire("L", 0, 5, "1")
	assert.NotEmpty(t, situation(t, covCheck(t, na, checkers.Semantics{}), SitIssuerAckCut).NotApplicable, "no power cut without the layer")
}

// A clock stepped back (a negative step at its start, a forward step at its
// end) between two grants on a lock counts; a forward step's start does
// not, nor a clock that only the clients' side moved.
func TestCoverageCountsClockStepsBackBetweenGrants(t *testing.T) {
	b := covRun(reference, allNem, nil, 10000)
	b.OnProcess(1).Acquire("L", 0, 5, "1").Release("L", "1", 10, 15)
	b.FaultWith("clock", "reference,client", 100, 2000, map[string]any{"mode": "step", "offset_ms": 5000})
	b.OnProcess(1).Acquire("L", 300, 305, "2").Release("L", "2", 310, 315) // forward: no step back yet
	b.FaultWith("clock", "client", 2100, 2200, map[string]any{"mode": "step", "offset_ms": -5000})
	b.OnProcess(1).Acquire("L", 2300, 2305, "3").Release("L", "3", 2310, 2315)
	c := covCheck(t, b, checkers.Semantics{})
	s := situation(t, c, SitIssuerClockBack)
	assert.Equal(t, 1, s.Count, "the forward step's end lies between grants 2 and 3; the client-only step is no issuer's")
	assert.Equal(t, CoverageCovered, class(c, "wall-clock").Status)

	// A strobe steps back every other period: two grants of a lock in it
	// two periods apart or more, consecutive or not, have one between them.
	b = covRun(reference, allNem, nil, 10000)
	b.FaultWith("clock", "reference", 3000, 5000, map[string]any{"mode": "strobe", "offsets_ms": []int{-5000, 5000}, "period_ms": 100})
	b.OnProcess(1).Acquire("L", 3100, 3105, "1").Release("L", "1", 3110, 3115)
	b.OnProcess(1).Acquire("L", 3150, 3155, "2").Release("L", "2", 3160, 3165)
	b.OnProcess(1).Acquire("L", 3400, 3405, "3").Release("L", "3", 3410, 3415)
	b.FaultWith("clock", "reference", 6000, 7000, map[string]any{"mode": "strobe", "offsets_ms": []int{-5000, 5000}, "period_ms": 100})
	b.OnProcess(1).Acquire("L", 6100, 6105, "4").Release("L", "4", 6110, 6115)
	b.OnProcess(1).Acquire("L", 6150, 6155, "5").Release("L", "5", 6160, 6165) // too close: no step back between
	c = covCheck(t, b, checkers.Semantics{})
	assert.Equal(t, 1, situation(t, c, SitIssuerClockBack).Count)

	// A target whose issuer clock cannot move: not applicable, never covered.
	c = covCheck(t, covRun([]history.RunNode{{Name: "reference", Role: "reference"}}, allNem, nil, 10000), checkers.Semantics{})
	s = situation(t, c, SitIssuerClockBack)
	assert.NotEmpty(t, s.NotApplicable)
	assert.Equal(t, CoverageNotApplicable, class(c, "wall-clock").Status)
	c = covCheck(t, covRun(reference, allNem, map[string]string{"clock": "no clock to move"}, 10000), checkers.Semantics{})
	assert.Contains(t, situation(t, c, SitIssuerClockBack).NotApplicable, "no clock to move")
}

// Split brain needs issuer replicas a partition can separate; a cut of the
// clients from the one reference node separates none.
func TestCoverageCountsIssuerReplicasSeparated(t *testing.T) {
	c := covCheck(t, covRun(reference, allNem, nil, 10000), checkers.Semantics{})
	assert.Contains(t, situation(t, c, SitIssuersSeparated).NotApplicable, "no replicas")

	nodes := []history.RunNode{{Name: "e1", Role: "etcd", Partition: true}, {Name: "e2", Role: "etcd", Partition: true},
		{Name: "e3", Role: "etcd", Partition: true}, {Name: "a1", Role: "adapter", Stateless: true}}
	b := covRun(nodes, allNem, nil, 10000)
	b.FaultWith("partition", "a1", 0, 500, map[string]any{"mode": "clients-from-node", "groups": [][]string{{"clients"}, {"a1"}}})
	b.OnProcess(1).Acquire("L", 100, 105, "1").Release("L", "1", 110, 115)
	b.FaultWith("partition", "e1,e2,e3", 1000, 2000, map[string]any{"mode": "minority", "groups": [][]string{{"e1"}, {"e2", "e3"}}})
	b.OnProcess(1).Acquire("L", 1100, 1105, "2").Release("L", "2", 1110, 1115)
	b.OnProcess(1).Acquire("L", 1200, 1205, "3").Release("L", "3", 1210, 1215)
	b.FaultWith("partition", "e1,e2,e3", 3000, 4000, map[string]any{"mode": "minority", "groups": [][]string{{"e3"}, {"e1", "e2"}}})
	c = covCheck(t, b, checkers.Semantics{})
	assert.Equal(t, 1, situation(t, c, SitIssuersSeparated).Count, "once per partition, only one granted while it lasted")

	// The majorities ring cuts by grudge, not groups: a replica that
	// cannot reach another is separated from it; a grudge of the adapter
	// alone separates none.
	b.FaultWith("partition", "e1,e2,e3", 5000, 6000, map[string]any{"mode": "ring", "grudge": map[string][]string{"e1": {"e2"}, "e2": {"e3"}, "e3": {"e1"}}})
	b.OnProcess(1).Acquire("L", 5100, 5105, "4").Release("L", "4", 5110, 5115)
	b.FaultWith("partition", "e1,a1", 7000, 8000, map[string]any{"mode": "ring", "grudge": map[string][]string{"a1": {"e1"}}})
	b.OnProcess(1).Acquire("L", 7100, 7105, "5").Release("L", "5", 7110, 7115)
	c = covCheck(t, b, checkers.Semantics{})
	assert.Equal(t, 2, situation(t, c, SitIssuersSeparated).Count, "the ring's grudge separated replicas; the adapter's did not")
	assert.Equal(t, 0, situation(t, c, SitIssuersOneWay).Count, "no node was recorded as cut one way")
	assert.Contains(t, situation(t, c, SitIssuersOneWay).NotApplicable, "one way", "these nodes cannot be cut one way")

	// One way: the ring on three replicas, and a one-way cut of groups;
	// a cut both ways is not.
	for i := range nodes {
		nodes[i].OneWay = nodes[i].Partition
	}
	b = covRun(nodes, allNem, nil, 10000)
	b.FaultWith("partition", "e1,e2,e3", 1000, 2000, map[string]any{"mode": "minority", "groups": [][]string{{"e1"}, {"e2", "e3"}}})
	b.OnProcess(1).Acquire("L", 1100, 1105, "1").Release("L", "1", 1110, 1115)
	b.FaultWith("partition", "e1,e2,e3", 3000, 4000, map[string]any{"mode": "leader-one-way", "groups": [][]string{{"e2", "e3"}, {"e1"}}, "one_way": true})
	b.OnProcess(1).Acquire("L", 3100, 3105, "2").Release("L", "2", 3110, 3115)
	b.FaultWith("partition", "e1,e2,e3", 5000, 6000, map[string]any{"mode": "ring", "grudge": map[string][]string{"e1": {"e2"}, "e2": {"e3"}, "e3": {"e1"}}})
	b.OnProcess(1).Acquire("L", 5100, 5105, "3").Release("L", "3", 5110, 5115)
	c = covCheck(t, b, checkers.Semantics{})
	assert.Empty(t, situation(t, c, SitIssuersOneWay).NotApplicable)
	assert.Equal(t, 2, situation(t, c, SitIssuersOneWay).Count, "the one-way cut and the ring, not the cut both ways")
	assert.Equal(t, 3, situation(t, c, SitIssuersSeparated).Count)
}

// Where a one-way cut records the leader the target named, it counts only
// when a replica could not reach the leader while the leader still reached
// it: the leader cut off from a replica, two followers cut one way, or a
// cut both ways are still separations, not this situation.
func TestCoverageCountsAOneWayCutTowardTheLeader(t *testing.T) {
	nodes := []history.RunNode{{Name: "e1", Role: "etcd", Partition: true, OneWay: true}, {Name: "e2", Role: "etcd", Partition: true, OneWay: true},
		{Name: "e3", Role: "etcd", Partition: true, OneWay: true}, {Name: "a1", Role: "adapter", Stateless: true}}
	b := covRun(nodes, allNem, nil, 20000)
	cut := func(at int64, details map[string]any) {
		b.FaultWith("partition", "e1,e2,e3", at, at+1000, details)
		b.OnProcess(1).Acquire("L", at+100, at+105, fmt.Sprint(at)).Release("L", fmt.Sprint(at), at+110, at+115)
	}
	cut(1000, map[string]any{"mode": "follower-one-way", "groups": [][]string{{"e1"}, {"e2"}}, "one_way": true, "leader": "e2"})
	cut(3000, map[string]any{"mode": "leader-one-way", "groups": [][]string{{"e2"}, {"e1", "e3"}}, "one_way": true, "leader": "e2"})
	cut(5000, map[string]any{"mode": "issuers-one-way", "groups": [][]string{{"e1"}, {"e3"}}, "one_way": true, "leader": "e2"})
	cut(7000, map[string]any{"mode": "ring", "grudge": map[string][]string{"e1": {"e2"}, "e2": {"e3"}, "e3": {"e1"}}, "leader": "e2"})
	cut(9000, map[string]any{"mode": "leader", "groups": [][]string{{"e1"}, {"e2", "e3"}}, "leader": "e1"})
	cut(11000, map[string]any{"mode": "issuers-one-way", "groups": [][]string{{"e2"}, {"e1", "e3"}}, "one_way": true})
	c := covCheck(t, b, checkers.Semantics{})
	assert.Equal(t, 3, situation(t, c, SitIssuersOneWay).Count,
		"e1 cut from the leader e2; the ring where e1 cannot reach e2, which reaches it; a cut with no leader recorded")
	assert.Equal(t, 6, situation(t, c, SitIssuersSeparated).Count, "each separated replicas")
}

// A key idle for a while and then written with a token older than its
// mark counts at each scale it reaches, once per idle period (its retries
// are not counted again); a write with a newer token after the idle time
// does not, and a rejected write does not end the idle time.
func TestCoverageCountsStaleWritesAfterIdleTimeAtEachScale(t *testing.T) {
	b := covRun(reference, allNem, nil, 40000)
	b.OnProcess(1).Write("k", "1", "a", 0, 5).Write("k", "2", "b", 10, 15)
	b.OnProcess(2).WriteStale("k", "1", "c", 6015, 6020, "2")   // idle 6 s: 1 s and 5 s
	b.OnProcess(2).WriteStale("k", "1", "d", 6030, 6035, "2")   // a retry in the same idle period: counted once
	b.OnProcess(3).Write("k", "3", "e", 8100, 8105)             // idle 2 s, but newer
	b.OnProcess(4).WriteStale("k", "2", "f", 30000, 30005, "3") // idle 21.9 s: every scale
	// A rejected write (its token stripped) changed nothing: j stays idle.
	b.OnProcess(5).Write("j", "1", "a", 0, 5).Write("j", "2", "b", 10, 15)
	b.OnProcess(6).WriteFail("j", "", "c", 3000, 3005, "missing-token")
	b.OnProcess(7).WriteStale("j", "1", "d", 6015, 6020, "2")
	c := covCheck(t, b, checkers.Semantics{})
	assert.Equal(t, 3, situation(t, c, SitKeyIdle(time.Second)).Count)
	assert.Equal(t, 3, situation(t, c, SitKeyIdle(5*time.Second)).Count)
	s := situation(t, c, SitKeyIdle(20*time.Second))
	assert.Equal(t, 1, s.Count)
	assert.Len(t, s.Examples, 1)

	// A 10 s main phase cannot hold a 20 s idle time: not applicable.
	c = covCheck(t, covRun(reference, allNem, nil, 10000), checkers.Semantics{})
	assert.NotEmpty(t, situation(t, c, SitKeyIdle(20*time.Second)).NotApplicable)
	assert.Empty(t, situation(t, c, SitKeyIdle(5*time.Second)).NotApplicable)
	assert.Contains(t, situation(t, c, SitKeyIdle(5*time.Second)).Missing, "5s")
}

// A lock free (released, or its lease run out) for a while and then
// granted again counts at each scale; a grant whose answer was lost keeps
// the lock possibly held until a lease after it, and a lease still running
// is no free time.
func TestCoverageCountsGrantsOfLocksFreeForAWhile(t *testing.T) {
	b := covRun(reference, allNem, nil, 40000)
	b.OnProcess(1).Acquire("L", 0, 5, "1").Release("L", "1", 10, 15)
	b.OnProcess(1).Acquire("L", 6015, 6020, "2") // free 6 s; never released: lease to 7020
	b.OnProcess(2).Acquire("L", 7900, 7905, "3") // free 0.88 s after the lease: no scale
	b.OnProcess(3).Acquire("M", 0, 5, "1")       // lease to 1005
	b.OnProcess(3).Acquire("M", 2100, 2105, "2") // free 1.095 s
	b.OnProcess(4).Acquire("N", 0, 5, "1").Release("N", "1", 10, 15)
	b.OnProcess(5).AcquireInfo("N", 100, 4000)   // may have granted as late as 4 s: held to 5 s
	b.OnProcess(6).Acquire("N", 9000, 9005, "3") // free 4 s: the 1 s scale only
	// An acquire whose answer was lost after 6 s free: it granted (the
	// grant after the free time) or the next one is; counted once.
	b.OnProcess(7).Acquire("P", 0, 5, "1").Release("P", "1", 10, 15)
	b.OnProcess(8).AcquireInfo("P", 6015, 7000)
	b.OnProcess(9).Acquire("P", 7500, 7505, "3")
	c := covCheck(t, b, checkers.Semantics{})
	assert.Equal(t, 4, situation(t, c, SitLockFree(time.Second)).Count)
	assert.Equal(t, 2, situation(t, c, SitLockFree(5*time.Second)).Count)
	assert.Zero(t, situation(t, c, SitLockFree(20*time.Second)).Count)
}

// After a resource's restart, the first write of a key with a token older
// than its mark from before counts, once per restart; a newer token, or an
// older one after a newer write re-raised the mark, does not.
func TestCoverageCountsStaleTokensAfterAResourceRestart(t *testing.T) {
	b := covRun(reference, allNem, nil, 10000)
	b.OnProcess(1).Write("k", "1", "a", 0, 5).Write("k", "2", "b", 10, 15)
	b.OnProcess(7).Write("j", "1", "a", 0, 5).Write("j", "2", "b", 10, 15)
	b.Fault("restart", "reference", 100, 200)
	b.OnProcess(2).WriteStale("k", "1", "c", 300, 305, "2")
	b.OnProcess(3).WriteStale("k", "1", "c2", 310, 315, "2") // a second one: the same restart
	b.OnProcess(4).Write("j", "3", "c", 300, 305)
	b.Fault("power-loss", "reference", 1000, 1100)
	b.OnProcess(5).Write("j", "4", "d", 1200, 1205)
	b.OnProcess(6).WriteStale("j", "3", "e", 1300, 1305, "4") // the mark was re-raised first
	c := covCheck(t, b, checkers.Semantics{})
	assert.Equal(t, 1, situation(t, c, SitResourceRestart).Count)
	assert.Zero(t, situation(t, c, SitResourcePower).Count)
}

// Replays, stripped and garbled tokens, forged tokens and late writes are
// counted from the operations and strip events; replays do not apply under
// equal: accept, forgery not without authenticated tokens.
func TestCoverageCountsTamperingReplaysForgeriesAndLateWrites(t *testing.T) {
	b := covRun(reference, allNem, nil, 10000)
	b.OnProcess(1).Acquire("k", 0, 5, "1").Write("k", "1", "a", 10, 15).WriteStale("k", "1", "b", 20, 25, "1")
	b.OnProcess(2).Acquire("k", 1100, 1105, "2").Write("k", "2", "c", 1110, 1115)
	b.OnProcess(1).WriteStale("k", "1", "d", 1200, 1205, "2") // the late write
	b.OnProcess(3).WriteFail("k", "", "e", 1300, 1310, "missing-token").Strip("k", "e", "", "remove", 1305)
	b.OnProcess(3).WriteFail("k", "x", "f", 1400, 1410, "malformed-token").Strip("k", "f", "x", "garble", 1405)
	b.OnProcess(4).WriteFail("k", "1000000000000000001", "g", 1500, 1505, "forged")
	c := covCheck(t, b, checkers.Semantics{Authenticated: true})
	assert.Equal(t, 1, situation(t, c, SitReplay).Count)
	assert.Equal(t, 1, situation(t, c, SitStripped).Count)
	assert.Equal(t, 1, situation(t, c, SitGarbled).Count)
	assert.Equal(t, 1, situation(t, c, SitForged).Count)
	assert.Equal(t, 1, situation(t, c, SitLateWrite).Count)

	c = covCheck(t, b, checkers.Semantics{Equal: checkers.EqualAccept})
	assert.NotEmpty(t, situation(t, c, SitReplay).NotApplicable)
	assert.Zero(t, situation(t, c, SitReplay).Count, "not applicable is never counted")
	assert.NotEmpty(t, situation(t, c, SitForged).NotApplicable)
	assert.Equal(t, CoverageNotApplicable, class(c, "forgery").Status)
}

// A run with no faults names each class it left uncovered, and says in
// words that the nemesis was not in it.
func TestCoverageSaysWhatTheRunNeverCreated(t *testing.T) {
	b := covRun(reference, nil, nil, 10000)
	b.OnProcess(1).Acquire("k", 0, 5, "1").Write("k", "1", "a", 10, 15).Release("k", "1", 20, 25)
	c := covCheck(t, b, checkers.Semantics{})
	var names []string
	for _, cl := range c.Uncovered() {
		names = append(names, cl.Class)
	}
	assert.Contains(t, names, "counter-reset")
	assert.Contains(t, names, "late-write")
	assert.NotContains(t, names, "split-brain", "not applicable: no replicas")
	assert.NotContains(t, names, "forgery", "not applicable: unauthenticated")
	assert.Contains(t, situation(t, c, SitIssuerRestart).Missing, "nemesis restart was not in the run")
	assert.NotEmpty(t, c.Never())
}

// Under RequireCoverage a valid history that left a class that applies
// uncovered is unknown, the class named; not applicable classes and
// partly covered ones do not hold it back, and without the option the
// verdict stands.
func TestRequireCoverageMakesAnUncoveredValidRunUnknown(t *testing.T) {
	b := covRun(reference, nil, nil, 10000)
	for i := range 12 {
		at := int64(i * 100)
		tok := string(rune('1' + i%9))
		key := "k" + string(rune('a'+i))
		b.OnProcess(1).Acquire(key, at, at+5, tok).Write(key, tok, "v"+key, at+10, at+15).Release(key, tok, at+20, at+25)
	}
	b.Run(history.RunEnd, 10100, map[string]any{history.RunExtraComplete: true})
	check := func(require bool) *Result {
		res, err := Check(context.Background(), b.Events(), Options{Checker: CheckerFast, RequireCoverage: require})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	res := check(false)
	assert.Equal(t, checkers.Valid, res.Verdict, res.Reason)
	res = check(true)
	assert.Equal(t, checkers.Unknown, res.Verdict)
	assert.Equal(t, ExitUnknown, res.ExitCode)
	assert.Contains(t, res.Reason, "failure class counter-reset")
	assert.Contains(t, res.Reason, "failure class late-write")
	assert.NotContains(t, res.Reason, "split-brain", "not applicable: the reference has no replicas")
	assert.True(t, res.Settings.RequireCoverage, "recorded, so a re-check judges the same")
}

// Nodes whose roles name only one half keep that half's state; when no
// node's role names the other half, its state is on the stateful nodes
// still (the reference's split issuers serve the resource too).
func TestCoverageReadsWhichNodesKeepWhichState(t *testing.T) {
	in := coverageInput{nodes: []history.RunNode{{Name: "i1", Role: "issuer"}, {Name: "r1", Role: "resource"}, {Name: "a", Role: "adapter", Stateless: true}}}
	assert.Equal(t, map[string]bool{"i1": true}, in.stateNodes(true))
	assert.Equal(t, map[string]bool{"r1": true}, in.stateNodes(false))
	in = coverageInput{nodes: []history.RunNode{{Name: "issuer-1", Role: "issuer"}, {Name: "issuer-2", Role: "issuer"}}}
	assert.Equal(t, map[string]bool{"issuer-1": true, "issuer-2": true}, in.stateNodes(false))
	in = coverageInput{nodes: []history.RunNode{{Name: "e1", Role: "etcd"}, {Name: "a", Role: "adapter", Stateless: true}}}
	assert.Equal(t, map[string]bool{"e1": true}, in.stateNodes(true))
	assert.Equal(t, map[string]bool{"e1": true}, in.stateNodes(false))
	assert.Nil(t, coverageInput{}.stateNodes(true), "no node list: every fault's nodes count")
}

// ender adds the write that completes a situation, ended one way.
type ender func(b *historytest.Builder, key, token, value string, call, ret int64, highWater string) *historytest.Builder

var (
	endOk ender = func(b *historytest.Builder, key, token, value string, call, ret int64, _ string) *historytest.Builder {
		return b.Write(key, token, value, call, ret)
	}
	endFail ender = func(b *historytest.Builder, key, token, value string, call, ret int64, highWater string) *historytest.Builder {
		return b.WriteStale(key, token, value, call, ret, highWater)
	}
	endInfo ender = func(b *historytest.Builder, key, token, value string, call, ret int64, _ string) *historytest.Builder {
		return b.WriteInfo(key, token, value, call, ret)
	}
)

// A situation counts only when the write that completes it reached the
// system, accepted or definitely rejected: the same history with that
// write ended info (connection refused while the node restarted) creates
// nothing.
func TestCoverageCountsOnlyWritesThatReachedTheSystem(t *testing.T) {
	situations := []struct {
		id    string
		build func(b *historytest.Builder, end ender)
	}{
		{SitKeyIdle(5 * time.Second), func(b *historytest.Builder, end ender) {
			b.OnProcess(1).Write("k", "1", "a", 0, 5).Write("k", "2", "b", 10, 15)
			end(b.OnProcess(2), "k", "1", "c", 6015, 6020, "2")
		}},
		{SitResourceRestart, func(b *historytest.Builder, end ender) {
			b.OnProcess(1).Write("k", "1", "a", 0, 5).Write("k", "2", "b", 10, 15)
			b.Fault("restart", "reference", 100, 200)
			end(b.OnProcess(2), "k", "1", "c", 300, 305, "2")
		}},
		{SitReplay, func(b *historytest.Builder, end ender) {
			b.OnProcess(1).Write("k", "1", "a", 0, 5)
			end(b.OnProcess(2), "k", "1", "b", 10, 15, "1")
		}},
		{SitStripped, func(b *historytest.Builder, end ender) {
			end(b.OnProcess(1), "k", "", "a", 0, 10, "").Strip("k", "a", "", "remove", 5)
		}},
		{SitForged, func(b *historytest.Builder, end ender) {
			b.OnProcess(1).Acquire("k", 0, 5, "1")
			end(b.OnProcess(2), "k", "1000000000000000001", "a", 10, 15, "")
		}},
		{SitLateWrite, func(b *historytest.Builder, end ender) {
			b.OnProcess(1).Acquire("k", 0, 5, "1").Write("k", "1", "a", 10, 15)
			b.OnProcess(2).Acquire("k", 1100, 1105, "2").Write("k", "2", "b", 1110, 1115)
			end(b.OnProcess(1), "k", "1", "c", 1200, 1205, "2")
		}},
	}
	for _, sit := range situations {
		for _, tc := range []struct {
			outcome string
			end     ender
			want    int
		}{{"ok", endOk, 1}, {"fail", endFail, 1}, {"info", endInfo, 0}} {
			t.Run(sit.id+"/"+tc.outcome, func(t *testing.T) {
				b := covRun(reference, allNem, nil, 10000)
				sit.build(b, tc.end)
				s := situation(t, covCheck(t, b, checkers.Semantics{Authenticated: true}), sit.id)
				assert.Equal(t, tc.want, s.Count)
				assert.Len(t, s.Examples, tc.want)
			})
		}
	}
}

// After a restart, writes that ended info while the node came back are
// passed over: the first that reached it counts, unless one of them may
// have raised the mark again.
func TestCoverageFindsTheFirstWriteThatReachedARestartedResource(t *testing.T) {
	b := covRun(reference, allNem, nil, 10000)
	b.OnProcess(1).Write("k", "1", "a", 0, 5).Write("k", "2", "b", 10, 15)
	b.Fault("restart", "reference", 100, 200)
	b.OnProcess(2).WriteInfo("k", "1", "c", 300, 305)
	b.OnProcess(3).WriteStale("k", "1", "d", 400, 405, "2")
	assert.Equal(t, 1, situation(t, covCheck(t, b, checkers.Semantics{}), SitResourceRestart).Count)

	b = covRun(reference, allNem, nil, 10000)
	b.OnProcess(1).Write("k", "1", "a", 0, 5).Write("k", "2", "b", 10, 15)
	b.Fault("restart", "reference", 100, 200)
	b.OnProcess(2).WriteInfo("k", "3", "c", 300, 305) // may have landed: the mark is 3 again
	b.OnProcess(3).WriteStale("k", "1", "d", 400, 405, "3")
	assert.Zero(t, situation(t, covCheck(t, b, checkers.Semantics{}), SitResourceRestart).Count)
}

// An idle period during which a fault touched a node keeping the state
// (a restart, a pause of the node) is not counted: it is reported apart,
// as During, by nemesis. A quiet one counts, and so does one that only
// client-side faults (a holder stall, the strip proxy) or a fault of a
// stateless node overlapped: the node holding the state saw the idle time.
func TestCoverageCountsOnlyQuietIdlePeriods(t *testing.T) {
	nodes := []history.RunNode{{Name: "db", Role: "redis"}, {Name: "adapter-1", Role: "adapter", Stateless: true}}
	b := covRun(nodes, allNem, nil, 40000)
	b.OnProcess(1).Write("k", "1", "a", 0, 5).Write("k", "2", "b", 10, 15)
	b.OnProcess(5).Acquire("L", 0, 5, "1").Release("L", "1", 10, 15)
	b.Fault("restart", "db", 1000, 2000)
	b.OnProcess(2).WriteStale("k", "1", "c", 6015, 6020, "2") // idle over the restart: during
	b.OnProcess(5).Acquire("L", 6015, 6020, "2").Release("L", "2", 6030, 6035)
	b.OnProcess(3).Write("k", "3", "d", 6100, 6105)
	b.FaultWith("pause", "client", 7000, 8000, map[string]any{"mode": "holder"})
	b.Fault("strip", "db", 7000, 8000)
	b.Fault("restart", "adapter-1", 7000, 8000)
	b.FaultWith("clock", "client", 7000, 8000, map[string]any{"mode": "step", "offset_ms": 5000})
	b.OnProcess(4).WriteStale("k", "2", "e", 12200, 12205, "3") // only client-side faults: quiet
	b.OnProcess(5).Acquire("L", 12200, 12205, "3").Release("L", "3", 12210, 12215)
	b.OnProcess(6).Write("j", "1", "a", 13000, 13005).Write("j", "2", "b", 13010, 13015)
	b.FaultWith("pause", "db", 15000, 16000, map[string]any{"mode": "node"})
	b.OnProcess(7).WriteStale("j", "1", "c", 19100, 19105, "2") // idle over the pause of db: during
	c := covCheck(t, b, checkers.Semantics{})
	for _, d := range []time.Duration{time.Second, 5 * time.Second} {
		s := situation(t, c, SitKeyIdle(d))
		assert.Equal(t, 1, s.Count, d)
		assert.Equal(t, 2, s.During, d)
		assert.Equal(t, map[string]int{"restart": 1, "pause": 1}, s.DuringByNemesis, d)
		s = situation(t, c, SitLockFree(d))
		assert.Equal(t, 1, s.Count, d)
		assert.Equal(t, 1, s.During, d)
		assert.Equal(t, map[string]int{"restart": 1}, s.DuringByNemesis, d)
	}
	assert.Zero(t, situation(t, c, SitKeyIdle(20*time.Second)).During)

	// Only idle periods a fault touched: never created, and it says so.
	b = covRun(nodes, allNem, nil, 40000)
	b.OnProcess(1).Write("k", "1", "a", 0, 5).Write("k", "2", "b", 10, 15)
	b.Fault("power-loss", "db", 1000, 2000)
	b.OnProcess(2).WriteStale("k", "1", "c", 6015, 6020, "2")
	c = covCheck(t, b, checkers.Semantics{})
	s := situation(t, c, SitKeyIdle(5*time.Second))
	assert.Zero(t, s.Count)
	assert.Equal(t, 1, s.During)
	assert.Contains(t, s.Missing, "1 idle periods that would have made it overlapped a fault")
	assert.Equal(t, CoveragePartial, class(c, "high-water-forgotten").Status, "the power loss's stale write is a situation of its own")

	// A history that lists no nodes: any node's fault touches, the
	// clients' do not.
	b = covRun(nil, allNem, nil, 40000)
	b.OnProcess(1).Write("k", "1", "a", 0, 5).Write("k", "2", "b", 10, 15)
	b.FaultWith("clock", "client", 1000, 2000, map[string]any{"mode": "step", "offset_ms": 5000})
	b.OnProcess(2).WriteStale("k", "1", "c", 6015, 6020, "2")
	b.OnProcess(3).Write("k", "3", "d", 6100, 6105)
	b.Fault("partition", "n1", 7000, 8000)
	b.OnProcess(4).WriteStale("k", "2", "e", 12200, 12205, "3")
	s = situation(t, covCheck(t, b, checkers.Semantics{}), SitKeyIdle(5*time.Second))
	assert.Equal(t, 1, s.Count)
	assert.Equal(t, map[string]int{"partition": 1}, s.DuringByNemesis)
}
