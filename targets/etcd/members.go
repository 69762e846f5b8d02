package etcd

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fencecheck/fencecheck/nemesis"
)

// Membership changes: a member replaced the way an operator replaces a
// failed machine (nemesis.MemberReplacer), and restart-wipe's member
// started anew.

func (t *Target) replaceMember(ctx context.Context, name string) error {
	cli, err := t.othersClient(name)
	if err != nil {
		return fmt.Errorf("replacing %s: %w", name, err)
	}
	defer cli.Close()
	if _, err := t.removeFromCluster(ctx, cli, name, 30*time.Second); err != nil {
		return fmt.Errorf("replacing %s: %w", name, err)
	}
	_, err = t.addBack(ctx, cli, name)
	return err
}

// othersClient is a client of every member but name: the ones that change
// the membership while name is out.
func (t *Target) othersClient(name string) (*clientv3.Client, error) {
	var others []string
	for _, m := range t.members {
		if m != name {
			others = append(others, t.memberURL(m))
		}
	}
	return hostClient(others)
}

// findMember is name's entry in the cluster's member list (by name, or by
// peer URL for a member added but not started, which has no name yet).
func findMember(list []*etcdserverpb.Member, name, peer string) *etcdserverpb.Member {
	for _, m := range list {
		if m.Name == name || (len(m.PeerURLs) == 1 && m.PeerURLs[0] == peer) {
			return m
		}
	}
	return nil
}

// errStillListed is a removal not yet seen in the member list.
var errStillListed = errors.New("removed, still in the member list")

// removeFromCluster removes name from the member list through cli (the
// others) and returns the id it had (0: it was no member). etcd refuses
// membership changes while it cannot prove quorum is safe ("unhealthy
// cluster": e.g. a peer reconnected less than 5 s ago), so the step is
// retried for a while. A retried step whose first reply was lost finds its
// work done: that counts as success. On an error, the id is that of a
// removal etcd answered (then done) or 0.
func (t *Target) removeFromCluster(ctx context.Context, cli *clientv3.Client, name string, limit time.Duration) (uint64, error) {
	peer, err := t.peerURL(name)
	if err != nil {
		return 0, err
	}
	var removed uint64
	err = retryFor(ctx, limit, func(ctx context.Context) error {
		list, err := cli.MemberList(ctx)
		if err != nil {
			return err
		}
		m := findMember(list.Members, name, peer)
		if m == nil {
			return nil
		}
		if _, err := cli.MemberRemove(ctx, m.ID); err != nil && !errors.Is(err, rpctypes.ErrMemberNotFound) {
			return err
		}
		removed = m.ID
		// Done once the list no longer has it (the next try).
		return errStillListed
	})
	if err != nil {
		return removed, fmt.Errorf("member remove: %w", err)
	}
	return removed, nil
}

// addBack adds name to the cluster through cli (the others) as a new member
// and starts it on an empty data folder with the cluster's current
// membership ("existing"); it returns once the member serves, with its new
// id. A member already in the list and started is only waited for; one
// added but not started (an earlier try that failed after the add) is
// started.
func (t *Target) addBack(ctx context.Context, cli *clientv3.Client, name string) (uint64, error) {
	peer, err := t.peerURL(name)
	if err != nil {
		return 0, err
	}
	var id uint64
	started := false
	err = retryFor(ctx, 30*time.Second, func(ctx context.Context) error {
		list, err := cli.MemberList(ctx)
		if err != nil {
			return err
		}
		if m := findMember(list.Members, name, peer); m != nil {
			id, started = m.ID, m.Name != ""
			return nil
		}
		resp, err := cli.MemberAdd(ctx, []string{peer})
		if err != nil {
			return err
		}
		id = resp.Member.ID
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("replacing %s: member add: %w", name, err)
	}
	if !started {
		// A started member's name is set once it published itself: one
		// that is not may still be the old container, or none.
		if err := t.StopNode(ctx, name); err != nil {
			return 0, fmt.Errorf("replacing %s: %w", name, err)
		}
		if err := t.WipeData(name); err != nil {
			return 0, fmt.Errorf("replacing %s: %w", name, err)
		}
		// The replacement starts a fresh log; Recreate keeps the old
		// member's.
		if err := t.Recreate(ctx, name, t.memberCmd(name, "existing")); err != nil {
			return 0, fmt.Errorf("replacing %s: %w", name, err)
		}
	}
	return id, nil
}

// ReplaceableMembers implements nemesis.MemberReplacer: every member, when
// there are others to remove it through.
func (t *Target) ReplaceableMembers() []string {
	if len(t.members) < 2 {
		return nil
	}
	return t.members
}

// RemoveMember implements nemesis.MemberReplacer: name is removed through
// the other members (etcd stops a removed member itself; the container is
// killed in case it did not), and its data folder emptied.
func (t *Target) RemoveMember(ctx context.Context, name string) (string, error) {
	if !t.isMember(name) || len(t.members) < 2 {
		return "", fmt.Errorf("%s is not a member another one can remove", name)
	}
	cli, err := t.othersClient(name)
	if err != nil {
		return "", err
	}
	defer cli.Close()
	// 10 s, not 30: while another fault keeps a member cut off or
	// restarting, etcd refuses the removal, and a run's end waits for this
	// start before it heals that fault.
	id, err := t.removeFromCluster(ctx, cli, name, 10*time.Second)
	// A removal etcd answered (id set) happened, whatever timed out after.
	if id == 0 && refusedNow(err) {
		return "", fmt.Errorf("removing %s: %w: %w", name, nemesis.ErrRefusedNow, err)
	}
	if err != nil {
		return "", fmt.Errorf("removing %s: %w", name, err)
	}
	if err := t.StopNode(ctx, name); err != nil {
		return "", fmt.Errorf("removing %s: %w", name, err)
	}
	if err := t.WipeData(name); err != nil {
		return "", fmt.Errorf("removing %s: %w", name, err)
	}
	return memberID(id), nil
}

// refusedNow says whether a removal's error is the cluster declining it
// now: refused as unsafe ("unhealthy cluster"), or not committed in time
// because other faults keep its quorum away (a deadline, no leader). In
// random runs of etcd with 3 members, the one removal a 30 s run tried
// timed out beside a partition, a power loss and link loss in 3 runs of
// 3, and the gate's rule for a nemesis that never applied left each valid
// run unknown. A removal that did not commit in time may still commit
// once those faults end: the nemesis leaves the member marked, and the
// heal's AddMember adds it back if it is out (etcd stops a removed member
// itself).
func refusedNow(err error) bool {
	for _, declined := range []error{rpctypes.ErrUnhealthy, context.DeadlineExceeded, rpctypes.ErrTimeout,
		rpctypes.ErrTimeoutDueToLeaderFail, rpctypes.ErrTimeoutDueToConnectionLost, rpctypes.ErrNoLeader,
		rpctypes.ErrLeaderChanged, rpctypes.ErrTooManyRequests} {
		if errors.Is(err, declined) {
			return true
		}
	}
	// No member of the others answering (each cut off or restarting), or
	// not in time.
	var st interface{ GRPCStatus() *status.Status }
	if !errors.As(err, &st) {
		return false
	}
	code := st.GRPCStatus().Code()
	return code == codes.Unavailable || code == codes.DeadlineExceeded
}

// AddMember implements nemesis.MemberReplacer: name is added back as a new
// member through the others and started on its empty data folder; it
// returns once the new member has caught up with the others (it has a
// leader and has applied all they had committed when it started), before
// it serves clients. A member caught up keeps the cluster whole: another
// member may go down beside it. It publishes itself and serves only up to
// etcd's request timeout later (7 s with the default timings: its first
// publish is lost while it installs the leader's snapshot), and every
// member fault waited for that (etcd, 3 members: 6 s of a 30 s run);
// SettleMembers waits for it at the heal.
func (t *Target) AddMember(ctx context.Context, name string) (string, error) {
	if !t.isMember(name) || len(t.members) < 2 {
		return "", fmt.Errorf("%s is not a member another one can add", name)
	}
	cli, err := t.othersClient(name)
	if err != nil {
		return "", err
	}
	defer cli.Close()
	id, err := t.addBack(ctx, cli, name)
	if err != nil {
		return "", err
	}
	if err := t.caughtUp(ctx, cli, name, 60*time.Second); err != nil {
		return "", fmt.Errorf("adding %s back: %w", name, err)
	}
	return memberID(id), nil
}

// SettleMembers implements nemesis.MemberSettler: every member serves and
// is in the member list. A removal the cluster declined at the time (not
// committed within its 10 s while other faults kept the quorum away) can
// commit once the heal lifts those faults, after the heal's AddMember found
// the member still in; etcd then stops the member itself, and waiting for
// it to serve left the cluster one member short (make check, stop 51). A
// member that does not serve and is out of the others' list is added back
// anew. Once every member serves, such a removal has committed or never
// will (a member serves only through a leader that committed an entry of
// its own term, and every entry before it), so the list, read
// linearizably, then says whether one took a member out after its check.
func (t *Target) SettleMembers(ctx context.Context) error {
	for round := 0; round < 3; round++ {
		for _, m := range t.members {
			if err := t.serveOrAddBack(ctx, m); err != nil {
				return err
			}
		}
		added := false
		for _, m := range t.members {
			var a bool
			err := retryFor(ctx, 30*time.Second, func(context.Context) (err error) {
				a, err = t.addBackIfOut(ctx, m)
				return err
			})
			if err != nil {
				return fmt.Errorf("settling %s: %w", m, err)
			}
			added = added || a
		}
		if !added {
			return nil
		}
	}
	return errors.New("the membership kept changing: a member was added back three times")
}

// serveOrAddBack waits, at most a minute, until member m serves, adding it
// back when the others' list no longer has it. A member in the list that
// has not served for restartUnserving is started again with its data, once:
// etcd opens its client port only once it has published itself through
// raft, and make check twice saw a member in the list, its metrics
// answering, its client port closed for the whole minute of the heal
// (the stall of docs/systems.md#membership-changes-member-replace: a
// member whose publish fails retries it without end); started again, it
// publishes from what it applied.
func (t *Target) serveOrAddBack(ctx context.Context, m string) error {
	begin := time.Now()
	deadline := begin.Add(60 * time.Second)
	restarted := false
	var membership error
	for {
		err := waitEtcdHealthy(ctx, t.memberURL(m), 5*time.Second)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s does not serve: %w (its membership: %v; started again: %v)", m, err, membership, restarted)
		}
		// The others may be settling too: a failed look is retried.
		var added bool
		added, membership = t.addBackIfOut(ctx, m)
		if added {
			begin = time.Now()
		}
		if !added && membership == nil && !restarted && time.Since(begin) > restartUnserving {
			restarted = true
			if err := t.KillNode(ctx, m); err != nil {
				return fmt.Errorf("%s does not serve, and stopping it to start it again: %w", m, err)
			}
			if err := t.StartNode(ctx, m, false); err != nil {
				return fmt.Errorf("%s does not serve, and starting it again: %w", m, err)
			}
		}
	}
}

// restartUnserving is how long a member in the list may go without serving
// at the heal before it is started again (a member that published serves
// within etcd's request timeout, 7 s, of its start).
const restartUnserving = 20 * time.Second

// addBackIfOut adds name back, started anew, when the others' member list
// no longer has it, and says whether it did.
func (t *Target) addBackIfOut(ctx context.Context, name string) (bool, error) {
	cli, err := t.othersClient(name)
	if err != nil {
		return false, err
	}
	defer cli.Close()
	peer, err := t.peerURL(name)
	if err != nil {
		return false, err
	}
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	list, err := cli.MemberList(lctx)
	cancel()
	if err != nil {
		return false, err
	}
	if findMember(list.Members, name, peer) != nil {
		return false, nil
	}
	_, err = t.addBack(ctx, cli, name)
	return err == nil, err
}

// caughtUp waits, at most limit, until member name has a leader and has
// applied every entry the others (through cli) had committed when the wait
// began, as its metrics say: they are served from its start, its client
// port only once it published itself.
func (t *Target) caughtUp(ctx context.Context, cli *clientv3.Client, name string, limit time.Duration) error {
	var committed uint64
	err := retryFor(ctx, limit, func(ctx context.Context) error {
		var last error
		for _, m := range t.members {
			if m == name {
				continue
			}
			sctx, cancel := context.WithTimeout(ctx, time.Second)
			st, err := cli.Status(sctx, t.memberURL(m))
			cancel()
			if err != nil {
				last = err
				continue
			}
			committed = max(committed, st.RaftIndex)
		}
		if committed == 0 {
			return fmt.Errorf("no other member gave its status: %w", last)
		}
		return nil
	})
	if err != nil {
		return err
	}
	addr, err := t.HostAddr(name, "metrics")
	if err != nil {
		return err
	}
	return retryFor(ctx, limit, func(ctx context.Context) error {
		m, err := metrics(ctx, "http://"+addr, "etcd_server_has_leader", "etcd_server_proposals_applied_total")
		switch {
		case err != nil:
			return err
		case m["etcd_server_has_leader"] != 1:
			return errors.New("it has no leader yet")
		case m["etcd_server_proposals_applied_total"] < float64(committed):
			return fmt.Errorf("it applied %.0f of the %d entries the others had committed", m["etcd_server_proposals_applied_total"], committed)
		}
		return nil
	})
}

// memberID is an etcd member id as etcd's own tools print it.
func memberID(id uint64) string { return strconv.FormatUint(id, 16) }

// peerURL is a member's peer URL as the other members reach it.
func (t *Target) peerURL(name string) (string, error) {
	addr, err := t.NetAddr(name, "peer")
	if err != nil {
		return "", err
	}
	return "http://" + addr, nil
}
