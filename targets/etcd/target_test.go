package etcd

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/fencing"
	"github.com/fencecheck/fencecheck/harness"
	"github.com/fencecheck/fencecheck/harness/docker/dockertest"
)

type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) { w.t.Logf("%s", p); return len(p), nil }

// One cluster serves every subtest: starting three members and two
// adapters is the expensive part, so the faults take turns on it, each
// leaving it healthy for the next.
func TestCluster(t *testing.T) {
	dockertest.Require(t)
	ctx := context.Background()
	tg := New(Options{Log: logWriter{t}}).(*Target)
	env := harness.Env{RunID: fmt.Sprintf("test-etcd-%d", time.Now().UnixNano()%1e9), Dir: t.TempDir(), Log: logWriter{t}}
	begin := time.Now()
	eps, err := tg.Start(ctx, env)
	require.NoError(t, err)
	t.Logf("Start took %.1fs", time.Since(begin).Seconds())
	stopped := false
	defer func() {
		if !stopped {
			tg.Stop(ctx)
		}
	}()
	require.Len(t, eps.Issuers, 2)
	require.Len(t, eps.Resources, 2)
	a1 := fencing.NewClient(eps.Issuers[0].URL, nil)
	a2 := fencing.NewClient(eps.Resources[1].URL, nil)
	opCtx := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, 5*time.Second) }

	t.Run("fencing through both adapters", func(t *testing.T) {
		c, cancel := opCtx()
		defer cancel()
		acq := a1.Acquire(c, "lock", "c1", 5*time.Second)
		require.Equal(t, fencing.Ok, acq.Outcome, "%+v", acq)
		held := a2.Acquire(c, "lock", "c2", 5*time.Second)
		assert.Equal(t, fencing.Fail, held.Outcome)
		assert.Equal(t, "held", held.Error)

		w := a2.Write(c, "k", acq.Token, []byte("v1"))
		require.Equal(t, fencing.Ok, w.Outcome, "%+v", w)
		r := a1.Read(c, "k")
		require.Equal(t, fencing.Ok, r.Outcome, "%+v", r)
		assert.Equal(t, "v1", string(r.Value))
		assert.Equal(t, acq.Token, r.Token)
		stale := a1.Write(c, "k", acq.Token, []byte("again"))
		assert.Equal(t, fencing.Fail, stale.Outcome)
		assert.Equal(t, "stale", stale.Error)
		assert.Equal(t, acq.Token, stale.HighWater)
		require.Equal(t, fencing.Ok, a1.Release(c, "lock", "c1", acq.Token).Outcome)
	})

	leader, err := tg.Leader(ctx)
	require.NoError(t, err)
	follower := "etcd-1"
	if leader == follower {
		follower = "etcd-2"
	}

	t.Run("paused member stops answering", func(t *testing.T) {
		require.NoError(t, tg.PauseNode(ctx, follower))
		hc := &http.Client{Timeout: 700 * time.Millisecond}
		assert.Error(t, etcdHealth(ctx, hc, tg.memberURL(follower)), "a frozen member must not answer")
		// A request the adapter's etcd client sends over its connection to
		// the frozen member times out (info) until gRPC keep-alives give
		// up on it; the majority serves the others.
		token := 1000000
		assert.Eventually(t, func() bool {
			token++
			c, cancel := opCtx()
			defer cancel()
			w := a1.Write(c, "k", fmt.Sprint(token), []byte("during-pause"))
			t.Logf("write during pause: %s %s", w.Outcome, w.Message)
			return w.Outcome == fencing.Ok
		}, 30*time.Second, 100*time.Millisecond, "the majority keeps serving")
		require.NoError(t, tg.ResumeNode(ctx, follower))
		require.NoError(t, waitEtcdHealthy(ctx, tg.memberURL(follower), 20*time.Second))
	})

	t.Run("partitioned leader loses leadership", func(t *testing.T) {
		var rest []string
		for _, n := range tg.members {
			if n != leader {
				rest = append(rest, n)
			}
		}
		require.NoError(t, tg.Partition(ctx, [][]string{{leader}, rest}))
		require.Eventually(t, func() bool {
			l, err := tg.Leader(ctx)
			return err == nil && l != leader
		}, 20*time.Second, 250*time.Millisecond, "the majority must elect a new leader")
		// The old leader steps down (check-quorum) and cannot serve a
		// linearizable read.
		require.Eventually(t, func() bool {
			_, lead, err := tg.memberStatus(ctx, leader)
			if err != nil {
				return false
			}
			id, _, _ := tg.memberStatus(ctx, leader)
			return lead != id
		}, 20*time.Second, 250*time.Millisecond, "the isolated leader must lose leadership")
		// Adapters reach every member; a write that lands on the old leader
		// before it steps down times out (info), later ones are refused by
		// it at once and go to the majority.
		token := 2000000
		assert.Eventually(t, func() bool {
			token++
			c, cancel := opCtx()
			defer cancel()
			w := a2.Write(c, "k", fmt.Sprint(token), []byte("during-partition"))
			t.Logf("write during partition: %s %s", w.Outcome, w.Message)
			return w.Outcome == fencing.Ok
		}, 30*time.Second, 100*time.Millisecond, "adapters reach the majority")
		require.NoError(t, tg.HealPartition(ctx))
		require.NoError(t, waitEtcdHealthy(ctx, tg.memberURL(leader), 20*time.Second))
	})

	t.Run("restart keeps data, wipe replaces the member", func(t *testing.T) {
		id, _, err := tg.memberStatus(ctx, follower)
		require.NoError(t, err)
		require.NoError(t, tg.KillNode(ctx, follower))
		require.NoError(t, tg.StartNode(ctx, follower, false))
		require.NoError(t, waitEtcdHealthy(ctx, tg.memberURL(follower), 30*time.Second))
		again, _, err := tg.memberStatus(ctx, follower)
		require.NoError(t, err)
		assert.Equal(t, id, again, "same member, same data")

		require.NoError(t, tg.KillNode(ctx, follower))
		require.NoError(t, tg.StartNode(ctx, follower, true))
		require.NoError(t, waitEtcdHealthy(ctx, tg.memberURL(follower), 30*time.Second))
		fresh, _, err := tg.memberStatus(ctx, follower)
		require.NoError(t, err)
		assert.NotEqual(t, id, fresh, "a wiped member rejoins as a new member")
		wiped, _ := filepath.Glob(filepath.Join(env.Dir, "logs", follower+".before-wipe-*.log"))
		assert.Len(t, wiped, 1, "the replaced member's log is kept")

		require.NoError(t, tg.KillNode(ctx, "adapter-1"))
		require.NoError(t, tg.StartNode(ctx, "adapter-1", false))
		require.NoError(t, harness.WaitHealthy(ctx, harness.Endpoints{Issuers: eps.Issuers[:1]}, 20*time.Second))
		c, cancel := opCtx()
		r := a1.Read(c, "k")
		cancel()
		assert.Equal(t, "during-partition", string(r.Value), "state lives in etcd, not in the adapter")
	})

	// Seen from the other members: the replaced member (the leader, the
	// hardest case) leaves their member list and comes back with a new id,
	// and the two left serve throughout, the member out included in nothing.
	t.Run("member replace: gone from the others' list, back with a new id", func(t *testing.T) {
		leader, err := tg.Leader(ctx)
		require.NoError(t, err)
		old, _, err := tg.memberStatus(ctx, leader)
		require.NoError(t, err)
		others, err := tg.othersClient(leader)
		require.NoError(t, err)
		defer others.Close()
		list := func() map[string]uint64 {
			c, cancel := opCtx()
			defer cancel()
			resp, err := others.MemberList(c)
			require.NoError(t, err)
			out := map[string]uint64{}
			for _, m := range resp.Members {
				out[m.Name] = m.ID
			}
			return out
		}
		begin := time.Now()
		removed, err := tg.RemoveMember(ctx, leader)
		require.NoError(t, err)
		t.Logf("RemoveMember took %.1fs", time.Since(begin).Seconds())
		assert.Equal(t, memberID(old), removed)
		members := list()
		assert.Len(t, members, 2, "the cluster is one member smaller: %v", members)
		assert.NotContains(t, members, leader)
		for _, id := range members {
			assert.NotEqual(t, old, id)
		}
		hc := &http.Client{Timeout: 700 * time.Millisecond}
		assert.Error(t, etcdHealth(ctx, hc, tg.memberURL(leader)), "the removed member does not answer")
		// The two left are a majority of the two: they serve, directly and
		// through the adapters.
		c, cancel := opCtx()
		_, err = others.Put(c, "/member-test/while-out", "v")
		cancel()
		require.NoError(t, err, "the others serve a write while the member is out")
		token := 3000000
		assert.Eventually(t, func() bool {
			token++
			c, cancel := opCtx()
			defer cancel()
			return a1.Write(c, "k", fmt.Sprint(token), []byte("member-out")).Outcome == fencing.Ok
		}, 30*time.Second, 100*time.Millisecond, "the adapters reach the members left")

		c, cancel = opCtx()
		st, err := others.Status(c, tg.memberURL(tg.members[slices.IndexFunc(tg.members, func(m string) bool { return m != leader })]))
		cancel()
		require.NoError(t, err)
		begin = time.Now()
		added, err := tg.AddMember(ctx, leader)
		require.NoError(t, err)
		t.Logf("AddMember took %.1fs", time.Since(begin).Seconds())
		// It returned once the new member caught up, which its metrics say
		// (its client port may serve only later).
		addr, err := tg.HostAddr(leader, "metrics")
		require.NoError(t, err)
		m, err := metrics(ctx, "http://"+addr, "etcd_server_has_leader", "etcd_server_proposals_applied_total")
		require.NoError(t, err)
		assert.EqualValues(t, 1, m["etcd_server_has_leader"])
		assert.GreaterOrEqual(t, m["etcd_server_proposals_applied_total"], float64(st.RaftIndex), "it applied what the others had committed before it was added")
		begin = time.Now()
		require.NoError(t, tg.SettleMembers(ctx))
		t.Logf("SettleMembers took %.1fs more", time.Since(begin).Seconds())
		members = list()
		assert.Len(t, members, 3, "the cluster is back at its size: %v", members)
		require.Contains(t, members, leader)
		assert.NotEqual(t, old, members[leader], "the member came back as a new member")
		assert.Equal(t, memberID(members[leader]), added)
		for _, m := range tg.members {
			require.NoError(t, waitEtcdHealthy(ctx, tg.memberURL(m), time.Second), m)
		}
		// The new member started empty and caught up from the others.
		back, err := hostClient([]string{tg.memberURL(leader)})
		require.NoError(t, err)
		defer back.Close()
		c, cancel = opCtx()
		got, err := back.Get(c, "/member-test/while-out")
		cancel()
		require.NoError(t, err)
		require.Len(t, got.Kvs, 1, "the write made while it was out reached the new member")
		assert.Equal(t, "v", string(got.Kvs[0].Value))
		again, err := tg.AddMember(ctx, leader)
		require.NoError(t, err, "adding a member that is back only waits for it")
		assert.Equal(t, added, again)

		// A removal declined at the time that commits after the heal's
		// AddMember found the member in: the member stops itself, and
		// SettleMembers adds it back rather than wait for it.
		_, err = tg.removeFromCluster(ctx, others, leader, 30*time.Second)
		require.NoError(t, err)
		assert.Eventually(t, func() bool { return etcdHealth(ctx, hc, tg.memberURL(leader)) != nil }, 20*time.Second,
			200*time.Millisecond, "a removed member stops serving")
		require.NoError(t, tg.SettleMembers(ctx))
		members = list()
		assert.Len(t, members, 3, "SettleMembers brought the cluster back to its size: %v", members)
		assert.NotEqual(t, added, memberID(members[leader]), "as a new member")

		// A member in the list that does not serve (here frozen) is started
		// again with its data once it has not served for restartUnserving.
		require.NoError(t, tg.PauseNode(ctx, leader))
		begin = time.Now()
		require.NoError(t, tg.SettleMembers(ctx), "a member that does not serve is started again")
		t.Logf("SettleMembers started a frozen member again in %.1fs", time.Since(begin).Seconds())
		assert.GreaterOrEqual(t, time.Since(begin), restartUnserving)
		assert.Len(t, list(), 3, "the same members")
	})

	// etcd is a static Go program: its clock reads never reach libc, and
	// the runtime patches its vDSO. Its own HTTP Date header shows the step.
	t.Run("clock: every member and adapter, seen from inside", func(t *testing.T) {
		assert.Equal(t, []string{"etcd-1", "etcd-2", "etcd-3", "adapter-1", "adapter-2"}, tg.ClockNodes())
		assert.Empty(t, tg.ClockUnreachable())
		wall0, mono0 := time.Now().Round(0), time.Now()
		dateSkew := func(url string) float64 {
			before := time.Now()
			resp, err := http.Get(url)
			require.NoError(t, err)
			resp.Body.Close()
			date, err := http.ParseTime(resp.Header.Get("Date"))
			require.NoError(t, err)
			return date.Sub(before.Truncate(time.Second)).Seconds()
		}
		member := func(name string) string { return tg.memberURL(name) + "/version" }
		adapter := eps.Issuers[1].URL + "/v1/health"

		require.NoError(t, tg.SetClockOffset(ctx, "etcd-1", 90*time.Second))
		require.NoError(t, tg.SetClockOffset(ctx, "adapter-2", -2*time.Minute))
		assert.InDelta(t, 90, dateSkew(member("etcd-1")), 1.1, "etcd-1's own clock")
		assert.InDelta(t, 0, dateSkew(member("etcd-2")), 1.1, "the other members are untouched")
		assert.InDelta(t, -120, dateSkew(adapter), 1.1, "adapter-2's own clock")

		// A restart during the fault: the new etcd process gets the offset.
		require.NoError(t, tg.KillNode(ctx, "etcd-1"))
		require.NoError(t, tg.StartNode(ctx, "etcd-1", false))
		require.NoError(t, waitEtcdHealthy(ctx, tg.memberURL("etcd-1"), 30*time.Second))
		assert.InDelta(t, 90, dateSkew(member("etcd-1")), 1.1, "after the restart")

		for _, n := range []string{"etcd-1", "adapter-2"} {
			require.NoError(t, tg.SetClockOffset(ctx, n, 0))
		}
		assert.InDelta(t, 0, dateSkew(member("etcd-1")), 1.1, "healed")
		assert.InDelta(t, 0, dateSkew(adapter), 1.1, "healed")
		require.NoError(t, waitEtcdHealthy(ctx, tg.memberURL("etcd-1"), 10*time.Second), "still serving")
		c, cancel := opCtx()
		defer cancel()
		assert.Equal(t, fencing.Ok, a2.Read(c, "k").Outcome)
		drift := time.Now().Round(0).Sub(wall0) - time.Since(mono0)
		assert.Less(t, drift.Abs(), 5*time.Millisecond, "this machine's clock moved")
	})

	require.NoError(t, tg.Stop(ctx))
	stopped = true
	require.NoError(t, tg.Stop(ctx), "Stop is idempotent")
	assert.Error(t, tg.HealPartition(ctx), "faults after Stop are errors, not panics")
	for _, n := range tg.Nodes() {
		_, err := os.Stat(filepath.Join(env.Dir, "logs", n.Name+".log"))
		assert.NoError(t, err, "log of %s saved", n.Name)
	}
	_, err = os.Stat(filepath.Dir(tg.Folder("etcd-1")))
	assert.True(t, os.IsNotExist(err), "the members' data is removed with the run: %v", err)
	c, n := dockertest.Leftovers(t, env.RunID)
	assert.Zero(t, c, "containers left after Stop")
	assert.Zero(t, n, "networks left after Stop")
}
