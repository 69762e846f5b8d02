package nemesis

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/history"
)

// fakeMembers is a cluster's member list: removing a member takes it out,
// adding it back gives it a new id. addFails makes the next adds fail.
type fakeMembers struct {
	mu       sync.Mutex
	refuse   bool
	names    []string
	ids      map[string]int
	next     int
	addFails int
}

func newFakeMembers(names ...string) *fakeMembers {
	f := &fakeMembers{names: names, ids: map[string]int{}}
	for _, n := range names {
		f.next++
		f.ids[n] = f.next
	}
	return f
}

func (f *fakeMembers) Nodes() []Node {
	var out []Node
	for _, n := range f.names {
		out = append(out, Node{Name: n, Role: "etcd"})
	}
	return append(out, Node{Name: "adapter-1", Role: "adapter", Stateless: true})
}
func (f *fakeMembers) ReplaceableMembers() []string { return f.names }
func (f *fakeMembers) RemoveMember(_ context.Context, n string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.refuse {
		return "", fmt.Errorf("removing %s: %w: unhealthy cluster", n, ErrRefusedNow)
	}
	id, ok := f.ids[n]
	if !ok {
		return "", errors.New("no such member")
	}
	delete(f.ids, n)
	return fmt.Sprint(id), nil
}
func (f *fakeMembers) AddMember(_ context.Context, n string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if id, ok := f.ids[n]; ok {
		return fmt.Sprint(id), nil
	}
	if f.addFails > 0 {
		f.addFails--
		return "", errors.New("unhealthy cluster")
	}
	f.next++
	f.ids[n] = f.next
	return fmt.Sprint(f.next), nil
}
func (f *fakeMembers) size() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.ids)
}

// A member replacement removes one member (never an adapter), records the
// id it had, and adds it back with a new one, which the stop event records;
// the cluster is back at its size.
func TestMemberReplaceRemovesThenAddsBackAMember(t *testing.T) {
	f := newFakeMembers("etcd-1", "etcd-2", "etcd-3")
	var buf bytes.Buffer
	nem := &memberReplace{}
	s := NewScheduler(&Env{Target: f}, history.NewRecorder(&buf), 1, []Nemesis{nem})
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(3, 4))
	for range 5 {
		id := s.attempt(ctx, nem, rng)
		require.Positive(t, id)
		assert.Equal(t, 2, f.size(), "one member is out while the fault is live")
		require.NoError(t, s.stop(ctx, id))
		assert.Equal(t, 3, f.size())
	}
	events, err := history.ReadAll(&buf)
	require.NoError(t, err)
	removed, added := map[string]string{}, map[string]string{}
	for _, e := range events {
		assert.Contains(t, f.names, e.Node, "only members are replaced")
		fault := string(e.Extra[history.ExtraFaultID])
		switch {
		case e.Extra["removed_id"] != nil:
			removed[fault] = string(e.Extra["removed_id"])
		case e.Extra["added_id"] != nil:
			added[fault] = string(e.Extra["added_id"])
		}
	}
	assert.Len(t, removed, 5)
	assert.Len(t, added, 5)
	for fault, a := range added {
		assert.NotEqual(t, removed[fault], a, "a member comes back with a new id")
	}
}

// A member whose add fails when the fault ends stays out, held, and the
// final heal adds it back: the run ends with the cluster at its size.
func TestMemberReplaceHealAddsBackAMemberLeftOut(t *testing.T) {
	f := newFakeMembers("etcd-1", "etcd-2", "etcd-3")
	f.addFails = 1
	nem := &memberReplace{}
	s := NewScheduler(&Env{Target: f}, history.NewRecorder(&bytes.Buffer{}), 1, []Nemesis{nem})
	ctx := context.Background()
	id := s.attempt(ctx, nem, rand.New(rand.NewPCG(1, 2)))
	require.Positive(t, id)
	s.endOrKeep(ctx, id)
	assert.Equal(t, 2, f.size(), "the add failed")
	require.NoError(t, s.Heal(ctx))
	assert.Equal(t, 3, f.size(), "the heal added it back")
}

// Only a target that can change its membership, with a member to spare.
func TestMemberReplaceAppliesWhereMembersCanBeReplaced(t *testing.T) {
	ok, _ := (&memberReplace{}).Applicable(&Env{Target: newFakeMembers("etcd-1", "etcd-2")})
	assert.True(t, ok)
	ok, why := (&memberReplace{}).Applicable(&Env{Target: &fakeMembers{}})
	assert.False(t, ok)
	assert.Contains(t, why, "a cluster of one")
	ok, _ = (&memberReplace{}).Applicable(&Env{Target: &fakeCluster{nodes: []Node{{Name: "n1"}}}})
	assert.False(t, ok)
	assert.Error(t, (&memberReplace{}).CheckPlan(&Env{Target: newFakeMembers("etcd-1", "etcd-2")}, Plan{Nodes: []string{"adapter-1"}}))
}

// A removal the cluster refused with nothing changed (etcd: a member
// reconnected in the last 5 s) is no failure and no fault: nothing is
// recorded, the node is free again, and the heal finds the cluster whole.
func TestMemberReplaceRefusedIsNotAFailure(t *testing.T) {
	f := newFakeMembers("etcd-1", "etcd-2", "etcd-3")
	f.refuse = true
	var buf bytes.Buffer
	nem := &memberReplace{}
	s := NewScheduler(&Env{Target: f}, history.NewRecorder(&buf), 1, []Nemesis{nem})
	ctx := context.Background()
	assert.EqualValues(t, -1, s.attempt(ctx, nem, rand.New(rand.NewPCG(1, 2))))
	assert.Zero(t, s.Counts[MemberReplace].Failed)
	assert.Zero(t, s.Counts[MemberReplace].Started)
	assert.NotContains(t, buf.String(), `"f":"member-replace"`)
	require.NoError(t, s.Heal(ctx))
	assert.Equal(t, 3, f.size())
}

// settlingMembers is a cluster whose members added back serve clients only
// once settled (etcd: a member caught up publishes itself later).
type settlingMembers struct {
	*fakeMembers
	settled int
}

func (s *settlingMembers) SettleMembers(context.Context) error { s.settled++; return nil }

// The heal waits until every member serves once a member was added back in
// the run, by the fault's end or by the heal itself; a run that replaced
// none has nothing to wait for.
func TestMemberReplaceHealSettlesTheMembersAddedBack(t *testing.T) {
	for _, tc := range []struct {
		name      string
		addFails  int
		replace   bool
		settleFor int
	}{{"none replaced", 0, false, 0}, {"added back at the fault's end", 0, true, 1}, {"added back by the heal", 1, true, 1}} {
		t.Run(tc.name, func(t *testing.T) {
			f := &settlingMembers{fakeMembers: newFakeMembers("etcd-1", "etcd-2", "etcd-3")}
			f.addFails = tc.addFails
			nem := &memberReplace{}
			s := NewScheduler(&Env{Target: f}, history.NewRecorder(&bytes.Buffer{}), 1, []Nemesis{nem})
			ctx := context.Background()
			if tc.replace {
				id := s.attempt(ctx, nem, rand.New(rand.NewPCG(1, 2)))
				require.Positive(t, id)
				s.endOrKeep(ctx, id)
			}
			require.NoError(t, s.Heal(ctx))
			assert.Equal(t, 3, f.size())
			assert.Equal(t, tc.settleFor, f.settled)
		})
	}
}
