package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/fencing"
	"github.com/fencecheck/fencecheck/harness"
	"github.com/fencecheck/fencecheck/harness/docker/dockertest"
	"github.com/fencecheck/fencecheck/nemesis"
)

// viewOf is a server's own view of the membership, through a session with
// it alone.
func viewOf(t *testing.T, tg *Target, server string) membership {
	t.Helper()
	addr, err := tg.ServerAddr(server)
	require.NoError(t, err)
	conn, err := dialSession(context.Background(), []string{addr}, 10*time.Second)
	require.NoError(t, err, "a session with %s", server)
	defer conn.Close()
	data, _, err := conn.Get(configPath)
	require.NoError(t, err)
	return parseMembership(data)
}

// The member-replace nemesis's two halves on a real ensemble, seen from the
// other side: after RemoveMember another server's membership lacks the
// member and no client reaches it; after AddMember every server lists it,
// it serves what was written while it was out (which it can only have from
// the others: its data folder was emptied), and the fencing service works
// through the adapters. A removal without a quorum of the rest in sync is
// refused, with nothing changed.
func TestMemberReplace(t *testing.T) {
	dockertest.Require(t)
	ctx := context.Background()
	tg := New(Options{Log: logWriter{t}})
	env := harness.Env{RunID: fmt.Sprintf("test-zkmr-%d", time.Now().UnixNano()%1e9), Dir: t.TempDir(), Log: logWriter{t}}
	eps, err := tg.Start(ctx, env)
	require.NoError(t, err)
	defer func() {
		require.NoError(t, tg.Stop(ctx))
		c, n := dockertest.Leftovers(t, env.RunID)
		assert.Zero(t, c, "containers left after Stop")
		assert.Zero(t, n, "networks left after Stop")
	}()
	assert.Equal(t, []string{"zk-1", "zk-2", "zk-3"}, tg.ReplaceableMembers())
	assert.Nil(t, New(Options{Servers: 1}).ReplaceableMembers(), "an ensemble of one has no member to replace")
	for _, n := range tg.servers {
		require.Len(t, viewOf(t, tg, n).servers, 3, "%s's membership at the start", n)
	}

	// The leader, so that the removal also makes the others elect one.
	victim, err := tg.Leader(ctx)
	require.NoError(t, err)
	id, err := tg.serverID(victim)
	require.NoError(t, err)
	data := filepath.Join(tg.Folder(victim), "data")
	require.NoError(t, os.WriteFile(filepath.Join(data, "marker-before"), []byte("x"), 0o644))
	conn := hostConn(t, tg)
	_, err = conn.Create("/before", []byte("before"), 0, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)

	begin := time.Now()
	removed, err := tg.RemoveMember(ctx, victim)
	require.NoError(t, err)
	t.Logf("RemoveMember(%s) took %.1fs", victim, time.Since(begin).Seconds())
	assert.Equal(t, fmt.Sprint(id), removed, "the id as ZooKeeper names it")
	var others []string
	for _, n := range tg.servers {
		if n != victim {
			others = append(others, n)
		}
	}
	for _, n := range others {
		m := viewOf(t, tg, n)
		assert.False(t, m.has(id), "%s's membership no longer lists %s: %v", n, victim, m.lines())
		assert.Len(t, m.servers, 2)
	}
	addr, err := tg.ServerAddr(victim)
	require.NoError(t, err)
	if c, err := dialSession(ctx, []string{addr}, 3*time.Second); err == nil {
		c.Close()
		t.Errorf("a client of the removed %s got a session", victim)
	}
	_, err = os.Stat(filepath.Join(data, "marker-before"))
	assert.True(t, os.IsNotExist(err), "the removed member's data folder is emptied: %v", err)
	_, err = os.Stat(filepath.Join(data, "version-2"))
	assert.True(t, os.IsNotExist(err), "no snapshot or log left: %v", err)
	myid, err := os.ReadFile(filepath.Join(data, "myid"))
	require.NoError(t, err)
	assert.Equal(t, fmt.Sprintf("%d\n", id), string(myid))

	// Written while it is out: the member can only learn it from the others.
	_, err = conn.Create("/while-out", []byte("written while out"), 0, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(data, "marker-out"), []byte("x"), 0o644))

	begin = time.Now()
	added, err := tg.AddMember(ctx, victim)
	require.NoError(t, err)
	t.Logf("AddMember(%s) took %.1fs", victim, time.Since(begin).Seconds())
	assert.Equal(t, fmt.Sprint(id), added)
	for _, n := range tg.servers {
		m := viewOf(t, tg, n)
		assert.True(t, m.has(id), "%s's membership lists %s again: %v", n, victim, m.lines())
		assert.Len(t, m.servers, 3, "the ensemble is back at its size")
	}
	_, err = os.Stat(filepath.Join(data, "marker-out"))
	assert.True(t, os.IsNotExist(err), "the member started on an emptied folder: %v", err)
	mode, err := tg.mode(ctx, victim)
	require.NoError(t, err)
	assert.Contains(t, []string{"follower", "leader"}, mode)
	solo, err := dialSession(ctx, []string{addr}, 10*time.Second)
	require.NoError(t, err, "a client of the new member gets a session")
	defer solo.Close()
	for p, want := range map[string]string{"/before": "before", "/while-out": "written while out"} {
		got, _, err := solo.Get(p)
		require.NoError(t, err, "%s through the new member", p)
		assert.Equal(t, want, string(got), "%s through the new member, caught up from the others", p)
	}

	// AddMember of a member that is back only waits for it.
	again, err := tg.AddMember(ctx, victim)
	require.NoError(t, err)
	assert.Equal(t, added, again)

	c, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	a := fencing.NewClient(eps.Issuers[0].URL, nil)
	var acq fencing.Result
	require.Eventually(t, func() bool {
		acq = a.Acquire(c, "after-replace", "c1", time.Second)
		return acq.Outcome == fencing.Ok
	}, 20*time.Second, 200*time.Millisecond, "the adapters serve after the replacement: %+v", acq)
	require.Equal(t, fencing.Ok, a.Write(c, "after-replace-k", acq.Token, []byte("v")).Outcome)

	// With one of the others down, removing another member would leave a
	// membership with no quorum in sync: ZooKeeper refuses, nothing changes.
	down, target := others[0], others[1]
	require.NoError(t, tg.KillNode(ctx, down))
	tid, _ := tg.serverID(target)
	_, err = tg.RemoveMember(ctx, target)
	require.Error(t, err)
	assert.True(t, errors.Is(err, nemesis.ErrRefusedNow), "refused: %v", err)
	require.NoError(t, tg.StartNode(ctx, down, false))
	require.NoError(t, tg.waitServing(ctx, down, time.Minute))
	for _, n := range tg.servers {
		require.NoError(t, tg.waitListed(ctx, n, tid, true, 10*time.Second))
	}
	running, err := tg.Runtime().State(ctx, target)
	require.NoError(t, err)
	assert.True(t, running.Running, "a refused removal leaves the member running")

	// A removal refused at the time can commit later, once the faults that
	// kept its quorum away end, after the heal's AddMember found the server
	// listed: here it lands while AddMember waits for the server's JVM to
	// start. AddMember then adds it anew (it waited a minute and failed).
	require.NoError(t, tg.KillNode(ctx, victim))
	admin, err := tg.adminSession(ctx, victim, 10*time.Second)
	require.NoError(t, err)
	defer admin.Close()
	done := make(chan error, 1)
	go func() { _, err := tg.AddMember(ctx, victim); done <- err }()
	time.Sleep(time.Second)
	require.NoError(t, tg.reconfigure(ctx, admin, 30*time.Second, func(m membership) bool { return !m.has(id) },
		func() error { _, err := admin.IncrementalReconfig(nil, []string{fmt.Sprint(id)}, -1); return err }))
	require.NoError(t, <-done, "AddMember adds back a server removed while it waited")
	for _, n := range tg.servers {
		m := viewOf(t, tg, n)
		assert.True(t, m.has(id), "%s's membership lists %s again: %v", n, victim, m.lines())
	}
}
