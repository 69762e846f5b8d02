package zookeeper

import (
	"context"
	"crypto/sha1"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencecheck/fencecheck/nemesis"
)

// The member-replace nemesis on ZooKeeper is dynamic reconfiguration
// (ZooKeeper 3.5 and later): a member is removed with `reconfig -remove
// ID` through the others, stopped and its data folder emptied, and comes
// back as an operator brings a replacement machine: started on the empty
// folder with a configuration that names the current ensemble and itself
// (it syncs from the leader as a non-voting follower), then added with
// `reconfig -add server.ID=...` through another member.

var _ nemesis.MemberReplacer = (*Target)(nil)

// Reconfiguration is an administrator's operation: since 3.5.3 ZooKeeper
// lets only a super user run it, or every client with skipACL=yes. The
// image can do either (both are the server's own settings); the super
// user's digest, a JVM property, leaves the ACL checks of the adapters' own
// requests on, as operators run ZooKeeper, where skipACL would turn them
// off for every client.
const superUser, superPassword = "super", "fencecheck"

// superDigest is the super user's entry as DigestAuthenticationProvider
// reads it: user:base64(sha1(user:password)).
func superDigest() string {
	sum := sha1.Sum([]byte(superUser + ":" + superPassword))
	return superUser + ":" + base64.StdEncoding.EncodeToString(sum[:])
}

// configPath is where every server publishes the membership it knows.
const configPath = "/zookeeper/config"

// membership is the ensemble as a server publishes it at configPath.
type membership struct {
	// servers maps each member's id to the rest of its line
	// ("172.18.0.2:2888:3888:participant;0.0.0.0:2181").
	servers map[int]string
	version string
}

func parseMembership(data []byte) membership {
	m := membership{servers: map[int]string{}}
	for _, line := range strings.Split(string(data), "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), "=")
		if !ok {
			continue
		}
		if id, ok := strings.CutPrefix(k, "server."); ok {
			if n, err := strconv.Atoi(id); err == nil {
				m.servers[n] = v
			}
		} else if k == "version" {
			m.version = v
		}
	}
	return m
}

func (m membership) has(id int) bool { _, ok := m.servers[id]; return ok }

// lines are the membership's server lines, by id.
func (m membership) lines() []string {
	ids := make([]int, 0, len(m.servers))
	for id := range m.servers {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = fmt.Sprintf("server.%d=%s", id, m.servers[id])
	}
	return out
}

// ReplaceableMembers implements nemesis.MemberReplacer: every server of an
// ensemble of three or more. With two, the one left after a removal would
// be an ensemble of one, which ZooKeeper reconfigures to only with
// standaloneEnabled=false.
func (t *Target) ReplaceableMembers() []string {
	if len(t.servers) < 3 {
		return nil
	}
	return t.servers
}

// serverID is a server's id (its myid): its place in the table.
func (t *Target) serverID(name string) (int, error) {
	if i := slices.Index(t.servers, name); i >= 0 && len(t.servers) >= 3 {
		return i + 1, nil
	}
	return 0, fmt.Errorf("%s is not a server another one can remove and add back", name)
}

// RemoveMember implements nemesis.MemberReplacer: `reconfig -remove ID`
// through the other servers, until the membership no longer lists it;
// then every other server is asked for its own view, the server is killed
// and its data folder emptied (its myid and the original zoo.cfg written
// again). A removal ZooKeeper would not make within 10 s (no quorum of the
// remaining members in sync with the leader, no session with the others)
// wraps nemesis.ErrRefusedNow: the membership still lists the server, or
// could not be read (then the heal's AddMember finds out which).
func (t *Target) RemoveMember(ctx context.Context, name string) (string, error) {
	id, err := t.serverID(name)
	if err != nil {
		return "", err
	}
	fail := func(err error) (string, error) { return "", fmt.Errorf("removing %s (server.%d): %w", name, id, err) }
	conn, err := t.adminSession(ctx, name, 10*time.Second)
	if err != nil {
		return fail(fmt.Errorf("%w: %w", nemesis.ErrRefusedNow, err))
	}
	defer conn.Close()
	// 10 s: while another fault keeps a member cut off or restarting,
	// ZooKeeper refuses, and a run's end waits for this start before it
	// heals that fault.
	err = t.reconfigure(ctx, conn, 10*time.Second, func(m membership) bool { return !m.has(id) },
		func() error { _, err := conn.IncrementalReconfig(nil, []string{strconv.Itoa(id)}, -1); return err })
	if err != nil {
		if permanent(err) {
			return fail(err)
		}
		return fail(fmt.Errorf("%w: %w", nemesis.ErrRefusedNow, err))
	}
	for _, other := range t.servers {
		if other == name {
			continue
		}
		if err := t.waitListed(ctx, other, id, false, 10*time.Second); err != nil {
			return fail(err)
		}
	}
	if err := t.StopNode(ctx, name); err != nil {
		return fail(err)
	}
	if err := t.WipeData(name); err != nil {
		return fail(err)
	}
	return strconv.Itoa(id), nil
}

// AddMember implements nemesis.MemberReplacer: a server the membership
// does not list is killed if it runs, its data folder emptied, and started
// with a zoo.cfg naming the current members and itself; once it is in sync
// with the leader, `reconfig -add` through the others makes it a voting
// member. It returns once every server lists it and it serves. A server
// still listed (a removal that was refused, an add that went through) is
// only started if it is not running and waited for.
func (t *Target) AddMember(ctx context.Context, name string) (string, error) {
	id, err := t.serverID(name)
	if err != nil {
		return "", err
	}
	fail := func(err error) (string, error) {
		return "", fmt.Errorf("adding %s (server.%d) back: %w", name, id, err)
	}
	conn, err := t.adminSession(ctx, name, 30*time.Second)
	if err != nil {
		return fail(err)
	}
	defer conn.Close()
	// Twice at most: a removal refused at the time that commits later (once
	// the heal lifted the faults that kept its quorum away) takes the
	// server out while this waits for it; it is then added anew.
	for again := true; ; again = false {
		err := t.addOrStart(ctx, conn, name, id)
		if err == nil {
			break
		}
		if !again || !errors.Is(err, errRemovedMeanwhile) {
			return fail(err)
		}
	}
	if err := t.waitServing(ctx, name, time.Minute); err != nil {
		return fail(err)
	}
	return strconv.Itoa(id), nil
}

// errRemovedMeanwhile: the leader's membership no longer lists the server
// AddMember waits for.
var errRemovedMeanwhile = errors.New("the membership no longer lists it (a removal committed meanwhile)")

// addOrStart adds server id (name) as a new member if the membership does
// not list it, or starts it if it is listed, then waits until every server
// lists it.
func (t *Target) addOrStart(ctx context.Context, conn *zk.Conn, name string, id int) error {
	var current membership
	if err := retry(ctx, 30*time.Second, func() (err error) { current, err = readMembership(ctx, conn); return err }); err != nil {
		return err
	}
	if !current.has(id) {
		addr, err := t.NetAddr(name, "quorum")
		if err != nil {
			return err
		}
		line := serverLine(id, addr)
		if err := t.startJoiner(ctx, name, current, line); err != nil {
			return err
		}
		// The joiner must be connected and in sync before ZooKeeper takes
		// it (new config no quorum until then): retried for a minute, the
		// time a JVM takes to start and a snapshot to arrive on two busy
		// cores.
		err = t.reconfigure(ctx, conn, time.Minute, func(m membership) bool { return m.has(id) },
			func() error { _, err := conn.IncrementalReconfig([]string{line}, nil, -1); return err })
		if err != nil {
			return err
		}
	} else if err := t.Cluster.StartNode(ctx, name, false); err != nil {
		return err
	}
	return retry(ctx, time.Minute, func() error {
		if m, err := readMembership(ctx, conn); err == nil && !m.has(id) {
			return stopRetry{errRemovedMeanwhile}
		}
		for _, n := range t.servers {
			// One look each (limit 0); the loop around retries.
			if err := t.waitListed(ctx, n, id, true, 0); err != nil {
				return err
			}
		}
		return nil
	})
}

// startJoiner kills the server if it runs, empties its data folder, writes
// a zoo.cfg naming the current members and itself as a participant (the
// reconfiguration guide's second way for a joiner: it finds the leader
// through them, adopts their membership and follows without a vote until
// it is added), and starts it.
func (t *Target) startJoiner(ctx context.Context, name string, current membership, line string) error {
	if err := t.StopNode(ctx, name); err != nil {
		return err
	}
	if err := t.WipeData(name); err != nil {
		return err
	}
	cfg := staticCfg() + strings.Join(append(current.lines(), line), "\n") + "\n"
	// The data folder is the node's folder's data/ (never a lazyfs layer's
	// mount: NoLayer), bind-mounted as /data.
	if err := os.WriteFile(filepath.Join(t.Folder(name), "data", "zoo.cfg"), []byte(cfg), 0o644); err != nil {
		return err
	}
	return t.Cluster.StartNode(ctx, name, false)
}

// reconfigure asks for a change until done says the membership has it
// (read after each try: an answer lost with the connection, or a leader
// that stepped down as it committed, still counts) or limit passes. The
// errors ZooKeeper gives while it cannot make the change now are retried
// (new config no quorum: the members of the new membership are not all in
// sync with the leader; reconfig in progress; a lost connection); the
// permanent ones end it.
func (t *Target) reconfigure(ctx context.Context, conn *zk.Conn, limit time.Duration, done func(membership) bool, change func() error) error {
	return retry(ctx, limit, func() error {
		m, err := readMembership(ctx, conn)
		if err != nil {
			return err
		}
		if done(m) {
			return nil
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if _, err := await(cctx, func() (struct{}, error) { return struct{}{}, change() }); err != nil {
			if permanent(err) {
				return stopRetry{err}
			}
			return err
		}
		return errNotYet
	})
}

var errNotYet = errors.New("reconfigured, the membership not yet changed")

// permanent errors will not go away by asking again.
func permanent(err error) bool {
	return errors.Is(err, zk.ErrNoAuth) || errors.Is(err, zk.ErrReconfigDisabled) || errors.Is(err, zk.ErrBadArguments) ||
		errors.Is(err, zk.ErrBadVersion)
}

// stopRetry ends a retry with its error.
type stopRetry struct{ error }

func (s stopRetry) Unwrap() error { return s.error }

// retry calls fn every 500 ms until it succeeds, returns a stopRetry, or limit
// passes, and returns its last error.
func retry(ctx context.Context, limit time.Duration, fn func() error) error {
	deadline := time.Now().Add(limit)
	for {
		err := fn()
		var s stopRetry
		if err == nil || errors.As(err, &s) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// readMembership is the membership as the leader committed it (a sync
// first: the server the session is on may lag).
func readMembership(ctx context.Context, conn *zk.Conn) (membership, error) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	data, err := await(cctx, func() ([]byte, error) {
		if _, err := conn.Sync(configPath); err != nil {
			return nil, err
		}
		data, _, err := conn.Get(configPath)
		return data, err
	})
	if err != nil {
		return membership{}, fmt.Errorf("reading %s: %w", configPath, err)
	}
	return parseMembership(data), nil
}

// waitListed waits until server's own view of the membership lists id
// (listed) or does not.
func (t *Target) waitListed(ctx context.Context, server string, id int, listed bool, limit time.Duration) error {
	err := retry(ctx, limit, func() error {
		addr, err := t.ServerAddr(server)
		if err != nil {
			return err
		}
		conn, err := dialSession(ctx, []string{addr}, 5*time.Second)
		if err != nil {
			return err
		}
		defer conn.Close()
		m, err := readMembership(ctx, conn)
		if err != nil {
			return err
		}
		if m.has(id) != listed {
			return fmt.Errorf("its membership (version %s) has %s", m.version, strings.Join(m.lines(), ", "))
		}
		return nil
	})
	if err != nil {
		verb := "lists"
		if !listed {
			verb = "no longer lists"
		}
		return fmt.Errorf("waiting until %s %s server.%d: %w", server, verb, id, err)
	}
	return nil
}

// adminSession is a super user's session with every server but name.
func (t *Target) adminSession(ctx context.Context, name string, limit time.Duration) (*zk.Conn, error) {
	var addrs []string
	for _, s := range t.servers {
		if s == name {
			continue
		}
		a, err := t.ServerAddr(s)
		if err != nil {
			return nil, err
		}
		addrs = append(addrs, a)
	}
	conn, err := dialSession(ctx, addrs, limit)
	if err != nil {
		return nil, fmt.Errorf("no session with %v: %w", addrs, err)
	}
	if _, err := await(ctx, func() (struct{}, error) {
		return struct{}{}, conn.AddAuth("digest", []byte(superUser+":"+superPassword))
	}); err != nil {
		conn.Close()
		return nil, fmt.Errorf("authenticating as %s: %w", superUser, err)
	}
	return conn, nil
}

// dialSession is a session of the harness's own with servers (host
// addresses), once established within limit.
func dialSession(ctx context.Context, addrs []string, limit time.Duration) (*zk.Conn, error) {
	conn, events, err := zk.Connect(addrs, 4*time.Second, zk.WithLogInfo(false), zk.WithLogger(quiet{}))
	if err != nil {
		return nil, err
	}
	timer := time.NewTimer(limit)
	defer timer.Stop()
	for {
		select {
		case ev := <-events:
			if ev.State == zk.StateHasSession {
				return conn, nil
			}
		case <-timer.C:
			conn.Close()
			return nil, fmt.Errorf("no session within %s", limit)
		case <-ctx.Done():
			conn.Close()
			return nil, ctx.Err()
		}
	}
}

// quiet drops the client's log: failures come back as errors.
type quiet struct{}

func (quiet) Printf(string, ...any) {}
