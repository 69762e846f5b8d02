package overlap

import (
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/history"
)

// hist builds a history in the order calls are made; times are in ms.
type hist struct{ events []history.Event }

func ms(t int64) int64 { return t * int64(time.Millisecond) }

func (h *hist) add(e history.Event) *hist {
	e.Index = int64(len(h.events))
	h.events = append(h.events, e)
	return h
}

func ttlExtra(ttlMS int) map[string]json.RawMessage {
	return map[string]json.RawMessage{"ttl_ms": json.RawMessage(strconv.Itoa(ttlMS))}
}

func (h *hist) invoke(at int64, p int, f, key, token string, ttlMS int) *hist {
	e := history.Event{Time: ms(at), Process: p, Type: history.Invoke, F: f, Key: key, Token: token}
	if ttlMS > 0 {
		e.Extra = ttlExtra(ttlMS)
	}
	return h.add(e)
}

func (h *hist) complete(at int64, p int, typ history.Type, f, key, token, errWord string) *hist {
	return h.add(history.Event{Time: ms(at), Process: p, Type: typ, F: f, Key: key, Token: token, Error: errWord})
}

func find(t *testing.T, h *hist) Report {
	t.Helper()
	rep, err := Find(h.events, Options{})
	require.NoError(t, err)
	return rep
}

func TestSequentialLeasesDoNotOverlap(t *testing.T) {
	h := &hist{}
	h.invoke(0, 1, history.Acquire, "k", "", 1000).complete(5, 1, history.Ok, history.Acquire, "k", "1", "")
	h.invoke(10, 1, history.Write, "k", "1", 0).complete(15, 1, history.Ok, history.Write, "k", "1", "")
	h.invoke(20, 1, history.Release, "k", "1", 0).complete(25, 1, history.Ok, history.Release, "k", "1", "")
	h.invoke(22, 2, history.Acquire, "k", "", 1000).complete(30, 2, history.Ok, history.Acquire, "k", "2", "")
	h.invoke(40, 2, history.Release, "k", "2", 0).complete(45, 2, history.Ok, history.Release, "k", "2", "")
	rep := find(t, h)
	assert.Equal(t, 2, rep.Leases)
	assert.Empty(t, rep.Overlaps)
	assert.Zero(t, rep.Total)
}

// A lock service whose clock jumped hands the lock to p2 while p1 still
// believes it holds it; p1's late write is rejected by fencing.
func TestClockJumpOverlapAndFencingRejection(t *testing.T) {
	h := &hist{}
	h.invoke(0, 1, history.Acquire, "k", "", 1000).complete(1, 1, history.Ok, history.Acquire, "k", "41", "")
	h.invoke(200, 2, history.Acquire, "k", "", 1000).complete(201, 2, history.Ok, history.Acquire, "k", "42", "")
	h.invoke(210, 2, history.Write, "k", "42", 0).complete(220, 2, history.Ok, history.Write, "k", "42", "")
	h.invoke(300, 1, history.Write, "k", "41", 0).complete(310, 1, history.Fail, history.Write, "k", "41", "stale")
	h.invoke(400, 1, history.Release, "k", "41", 0).complete(405, 1, history.Fail, history.Release, "k", "41", "lost")
	h.invoke(500, 2, history.Release, "k", "42", 0).complete(505, 2, history.Ok, history.Release, "k", "42", "")
	rep := find(t, h)
	require.Len(t, rep.Overlaps, 1)
	o := rep.Overlaps[0]
	assert.Equal(t, "k", o.Key)
	assert.Equal(t, 1, o.OlderProcess)
	assert.Equal(t, "41", o.OlderToken)
	assert.Equal(t, 2, o.NewerProcess)
	assert.Equal(t, ms(201), o.Start, "starts when the second acquire returned")
	assert.Equal(t, ms(400), o.End, "ends when the first holder sent its release")
	assert.Equal(t, 199*time.Millisecond, rep.Total)
	assert.Equal(t, 1, o.Rejected)
	assert.Equal(t, 1, rep.Rejected)
	assert.Equal(t, []int64{6}, o.WriteIDs)
	assert.Contains(t, o.Text(), "process 1 (token 41) and process 2 (token 42)")
	assert.Contains(t, o.Text(), "1 rejected as stale")

	an := rep.Anomalies()
	require.Len(t, an, 1)
	assert.True(t, an[0].Finding, "an overlap is a finding, not a violation")
	assert.Equal(t, "lease-overlap", an[0].Kind)
	assert.Equal(t, ms(201), an[0].At)
}

// The client reckons its lease from when it sent the acquire, so a lease the
// service hands on after the ttl is no overlap, however late p1 releases.
func TestBeliefEndsAtTTLFromAcquireInvoke(t *testing.T) {
	h := &hist{}
	h.invoke(0, 1, history.Acquire, "k", "", 100).complete(10, 1, history.Ok, history.Acquire, "k", "1", "")
	h.invoke(100, 2, history.Acquire, "k", "", 100).complete(101, 2, history.Ok, history.Acquire, "k", "2", "")
	h.invoke(300, 1, history.Release, "k", "1", 0).complete(301, 1, history.Fail, history.Release, "k", "1", "lost")
	rep := find(t, h)
	assert.Empty(t, rep.Overlaps)
	leases := finderFrom(t, h).Leases()
	require.Len(t, leases, 2)
	assert.Equal(t, EndExpired, leases[0].EndReason)
	assert.Equal(t, ms(100), leases[0].End)
}

func TestOkRenewExtendsAndFailedRenewEnds(t *testing.T) {
	h := &hist{}
	h.invoke(0, 1, history.Acquire, "k", "", 100).complete(1, 1, history.Ok, history.Acquire, "k", "1", "")
	h.invoke(80, 1, history.Renew, "k", "1", 100).complete(85, 1, history.Ok, history.Renew, "k", "1", "")
	h.invoke(150, 2, history.Acquire, "k", "", 100).complete(151, 2, history.Ok, history.Acquire, "k", "2", "")
	h.invoke(170, 1, history.Renew, "k", "1", 100).complete(175, 1, history.Fail, history.Renew, "k", "1", "lost")
	rep := find(t, h)
	require.Len(t, rep.Overlaps, 1)
	assert.Equal(t, ms(151), rep.Overlaps[0].Start)
	assert.Equal(t, ms(175), rep.Overlaps[0].End, "a failed renew ends the belief when it returns")

	// Without the failed renew, the renewed lease runs to 80+100 ms.
	h2 := &hist{}
	h2.invoke(0, 1, history.Acquire, "k", "", 100).complete(1, 1, history.Ok, history.Acquire, "k", "1", "")
	h2.invoke(80, 1, history.Renew, "k", "1", 100).complete(85, 1, history.Ok, history.Renew, "k", "1", "")
	h2.invoke(150, 2, history.Acquire, "k", "", 100).complete(151, 2, history.Ok, history.Acquire, "k", "2", "")
	h2.invoke(400, 2, history.Release, "k", "2", 0).complete(401, 2, history.Ok, history.Release, "k", "2", "")
	rep = find(t, h2)
	require.Len(t, rep.Overlaps, 1)
	assert.Equal(t, ms(180), rep.Overlaps[0].End)
}

func TestInfoRetiresTheHolder(t *testing.T) {
	h := &hist{}
	h.invoke(0, 1, history.Acquire, "k", "", 1000).complete(1, 1, history.Ok, history.Acquire, "k", "1", "")
	h.invoke(100, 1, history.Write, "k", "1", 0)
	h.invoke(200, 2, history.Acquire, "k", "", 1000).complete(201, 2, history.Ok, history.Acquire, "k", "2", "")
	h.complete(300, 1, history.Info, history.Write, "k", "1", "timeout")
	h.invoke(600, 2, history.Release, "k", "2", 0).complete(601, 2, history.Ok, history.Release, "k", "2", "")
	rep := find(t, h)
	require.Len(t, rep.Overlaps, 1)
	o := rep.Overlaps[0]
	assert.Equal(t, ms(201), o.Start)
	assert.Equal(t, ms(300), o.End, "a process that saw info no longer acts")
	assert.Equal(t, 0, o.Unknown, "the info write was sent before the overlap")
}

func TestFailedAndInfoAcquiresAreNoLeases(t *testing.T) {
	h := &hist{}
	h.invoke(0, 1, history.Acquire, "k", "", 1000).complete(1, 1, history.Ok, history.Acquire, "k", "1", "")
	h.invoke(5, 2, history.Acquire, "k", "", 1000).complete(6, 2, history.Fail, history.Acquire, "k", "", "held")
	h.invoke(7, 3, history.Acquire, "k", "", 1000).complete(9, 3, history.Info, history.Acquire, "k", "", "timeout")
	h.invoke(20, 4, history.Acquire, "other", "", 1000).complete(21, 4, history.Ok, history.Acquire, "other", "1", "")
	h.add(history.Event{Time: ms(100), Process: history.NemesisProcess, Type: history.Info, F: "pause"})
	rep := find(t, h)
	assert.Equal(t, 2, rep.Leases)
	assert.Empty(t, rep.Overlaps, "different keys never overlap")
}

func TestHistoryEndClosesOpenLeases(t *testing.T) {
	h := &hist{}
	h.invoke(0, 1, history.Acquire, "k", "", 10000).complete(1, 1, history.Ok, history.Acquire, "k", "1", "")
	h.invoke(50, 2, history.Acquire, "k", "", 10000).complete(51, 2, history.Ok, history.Acquire, "k", "2", "")
	h.add(history.Event{Time: ms(90), Process: history.NemesisProcess, Type: history.Info, F: "clock"})
	rep := find(t, h)
	require.Len(t, rep.Overlaps, 1)
	assert.Equal(t, ms(90), rep.Overlaps[0].End)
}

func TestTTLFromOptionsOrError(t *testing.T) {
	h := &hist{}
	h.invoke(0, 1, history.Acquire, "k", "", 0).complete(1, 1, history.Ok, history.Acquire, "k", "1", "")
	h.invoke(50, 2, history.Acquire, "k", "", 0).complete(51, 2, history.Ok, history.Acquire, "k", "2", "")
	h.invoke(80, 1, history.Release, "k", "1", 0).complete(81, 1, history.Ok, history.Release, "k", "1", "")
	_, err := Find(h.events, Options{})
	require.Error(t, err, "no ttl anywhere")
	rep, err := Find(h.events, Options{TTL: 60 * time.Millisecond})
	require.NoError(t, err)
	require.Len(t, rep.Overlaps, 1)
	assert.Equal(t, ms(60), rep.Overlaps[0].End)
	rep, err = Find(h.events, Options{TTL: time.Second})
	require.NoError(t, err)
	require.Len(t, rep.Overlaps, 1)
	assert.Equal(t, ms(80), rep.Overlaps[0].End)
}

func TestThreeWayOverlapCountsEachPair(t *testing.T) {
	h := &hist{}
	for p := 1; p <= 3; p++ {
		at := int64(p * 10)
		tok := strconv.Itoa(p)
		h.invoke(at, p, history.Acquire, "k", "", 1000).complete(at+1, p, history.Ok, history.Acquire, "k", tok, "")
	}
	for p := 1; p <= 3; p++ {
		at := int64(100 + p*10)
		tok := strconv.Itoa(p)
		h.invoke(at, p, history.Release, "k", tok, 0).complete(at+1, p, history.Ok, history.Release, "k", tok, "")
	}
	rep := find(t, h)
	assert.Len(t, rep.Overlaps, 3)
}

func finderFrom(t *testing.T, h *hist) *Finder {
	t.Helper()
	f := NewFinder(Options{})
	p := history.NewPairer()
	for _, e := range h.events {
		op, err := p.Add(e)
		require.NoError(t, err)
		require.NoError(t, f.Add(e, op))
	}
	return f
}

// A client whose clock was stepped back believes in its lease past the ttl
// and writes late: its belief (extra.lease_left_ms on the write) runs the
// lease on, into the next holder's, and the late write is fenced off.
func TestAClientsSkewedClockExtendsItsBelief(t *testing.T) {
	h := &hist{}
	h.invoke(0, 1, history.Acquire, "k", "", 100).complete(5, 1, history.Ok, history.Acquire, "k", "1", "")
	h.invoke(100, 2, history.Acquire, "k", "", 100).complete(110, 2, history.Ok, history.Acquire, "k", "2", "")
	h.invoke(120, 2, history.Write, "k", "2", 0).complete(125, 2, history.Ok, history.Write, "k", "2", "")
	late := history.Event{Time: ms(150), Process: 1, Type: history.Invoke, F: history.Write, Key: "k", Token: "1",
		Extra: map[string]json.RawMessage{history.ExtraLeaseLeft: json.RawMessage("30000")}}
	h.add(late).complete(155, 1, history.Fail, history.Write, "k", "1", "stale")
	h.invoke(160, 1, history.Release, "k", "1", 0).complete(165, 1, history.Fail, history.Release, "k", "1", "lost")
	rep := find(t, h)
	require.Len(t, rep.Overlaps, 1, "without the belief p1's lease ended at 100 ms, before p2's began")
	o := rep.Overlaps[0]
	assert.True(t, o.Older.ClockBelief)
	assert.Equal(t, ms(110), o.Start)
	assert.Equal(t, ms(160), o.End, "until p1 released")
	assert.Equal(t, 1, o.Rejected)
	assert.Contains(t, o.Text(), "process 1's clock was off")

	// A belief no longer than the ttl changes nothing, and a malformed one
	// is an error naming the event.
	h2 := &hist{}
	h2.invoke(0, 1, history.Acquire, "k", "", 100).complete(5, 1, history.Ok, history.Acquire, "k", "1", "")
	short := late
	short.Time, short.Index = ms(10), 0
	short.Extra = map[string]json.RawMessage{history.ExtraLeaseLeft: json.RawMessage("50")}
	h2.add(short).complete(15, 1, history.Ok, history.Write, "k", "1", "")
	h2.invoke(200, 2, history.Read, "k", "", 0).complete(205, 2, history.Ok, history.Read, "k", "", "")
	leases := finderFrom(t, h2).Leases()
	require.Len(t, leases, 1)
	assert.False(t, leases[0].ClockBelief)
	assert.Equal(t, ms(100), leases[0].End)

	bad := &hist{}
	bad.invoke(0, 1, history.Acquire, "k", "", 100).complete(5, 1, history.Ok, history.Acquire, "k", "1", "")
	short.Extra = map[string]json.RawMessage{history.ExtraLeaseLeft: json.RawMessage(`"soon"`)}
	bad.add(short)
	_, err := Find(bad.events, Options{})
	assert.ErrorContains(t, err, "lease_left_ms")
}

// FirstAnomalies keeps the overlaps checkers.CapAnomalies keeps, worded.
func TestFirstAnomaliesAsCapped(t *testing.T) {
	var rep Report
	for i := 0; i < 50; i++ {
		rep.Overlaps = append(rep.Overlaps, Overlap{Key: []string{"b", "a"}[i%2], Start: int64((i * 7) % 13),
			Older: Lease{AcquireID: int64(100 - i)}, Newer: Lease{AcquireID: int64(200 + i)}})
	}
	capped := checkers.Result{Anomalies: rep.Anomalies()}
	checkers.CapAnomalies(&capped, 20)
	first := rep.FirstAnomalies(20)
	if len(first) != len(capped.Anomalies) {
		t.Fatalf("%d kept, CapAnomalies keeps %d", len(first), len(capped.Anomalies))
	}
	for i := range first {
		if first[i].Text != capped.Anomalies[i].Text || first[i].Ops[0] != capped.Anomalies[i].Ops[0] {
			t.Errorf("%d: %v, CapAnomalies: %v", i, first[i], capped.Anomalies[i])
		}
	}
}

// Summary counts every overlap as Report does and keeps the earliest.
func TestSummaryKeepsTheEarliest(t *testing.T) {
	h := &hist{}
	for p := 1; p <= 6; p++ {
		at := int64(p * 10)
		tok := strconv.Itoa(p)
		h.invoke(at, p, history.Acquire, "k", "", 1000).complete(at+1, p, history.Ok, history.Acquire, "k", tok, "")
	}
	all := finderFrom(t, h).Report()
	require.Len(t, all.Overlaps, 10, "the last lease starts as the history ends")
	assert.Equal(t, 10, all.Count)
	sum := finderFrom(t, h).Summary(4)
	assert.Equal(t, all.Count, sum.Count)
	assert.Equal(t, all.Total, sum.Total)
	assert.Equal(t, all.Leases, sum.Leases)
	require.Len(t, sum.Overlaps, 4)
	assert.Equal(t, all.FirstAnomalies(4), sum.FirstAnomalies(4))
	assert.Empty(t, finderFrom(t, h).Summary(0).Overlaps)
}
