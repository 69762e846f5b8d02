// Package zookeeper is fencecheck's ZooKeeper fencing implementation: a
// fencing.Store whose every check happens inside a ZooKeeper ensemble
// (ZooKeeper's lock recipe for the issuer, a version-conditional set per
// write for the resource), the image of Debian's ZooKeeper on a Java runtime
// FROM scratch, and the container target "zookeeper": three servers behind
// two adapters.
package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/fencing"
)

// Semantics is what the store guarantees: a write needs a strictly newer
// token, and tokens are zxids, one sequence for the whole ensemble.
var Semantics = checkers.Semantics{Equal: checkers.EqualReject, Scope: checkers.ScopeGlobal}

// Store is a fencing.Store kept entirely in ZooKeeper.
//
// Znodes (under Prefix):
//
//	locks/<lock>/_c_<guid>-lock-<seq>  ephemeral sequential, one per
//	                 acquire, owned by the acquirer's session; the lowest
//	                 holds the lock, its creation zxid is the token
//	res/<key>        "<high-water mark>\n<value>": the mark and the value of
//	                 the write that set it, always written together
//
// A zxid is the leader's epoch in the high 32 bits and a counter in the low
// ones, so tokens keep growing across leader changes.
//
// Every acquire opens a session of its own, as every lock-holding process
// has one: the session is the lease. The adapter keeps the holders'
// sessions in memory (the client library keeps them alive with pings); the
// lock itself, the token and every check live in the ensemble. Resource
// requests share one long-lived session.
type Store struct {
	opts    StoreOptions
	res     *zk.Conn
	made    sync.Map // znode paths known to exist (parents are never deleted)
	mu      sync.Mutex
	holders map[holderKey]*holder
}

// StoreOptions configure OpenStore.
type StoreOptions struct {
	// Servers are the ensemble's client addresses, host:port.
	Servers []string
	// Prefix is the znode every path lives under (default "/fence").
	Prefix string
	// Timeout bounds each operation (default 3 s). An operation that times
	// out is an error, which the server turns into 5xx (info): it may have
	// been applied.
	Timeout time.Duration
	// ResourceSession is the session timeout asked for the resource
	// requests' shared session (default 4 s); it is no lease.
	ResourceSession time.Duration
	// Log receives the client library's error messages (default stderr).
	Log io.Writer
	_   struct{}
}

var (
	_ fencing.Store         = (*Store)(nil)
	_ fencing.LeaseGranter  = (*Store)(nil)
	_ fencing.HealthChecker = (*Store)(nil)
)

// holderSessionBuffer bounds a lock session's packets: lock requests are
// small, and the library allocates the buffer for every connection.
const holderSessionBuffer = 64 << 10

type holderKey struct {
	lock  string
	token uint64
}

// holder is one held lock: its node and the session that owns it.
type holder struct {
	owner string
	node  string
	sess  *session
	heard chan struct{} // signalled by each renew: pushes the idle deadline back
	done  chan struct{} // closed when the holder is forgotten
	once  sync.Once
}

// OpenStore connects to the ensemble without waiting for it: operations fail
// until a server answers, and the adapter's health check says so.
func OpenStore(opts StoreOptions) (*Store, error) {
	if len(opts.Servers) == 0 {
		return nil, errors.New("zookeeper: no servers")
	}
	if opts.Prefix == "" {
		opts.Prefix = "/fence"
	}
	opts.Prefix = "/" + strings.Trim(opts.Prefix, "/")
	if opts.Timeout <= 0 {
		opts.Timeout = 3 * time.Second
	}
	if opts.ResourceSession <= 0 {
		opts.ResourceSession = 4 * time.Second
	}
	if opts.Log == nil {
		opts.Log = os.Stderr
	}
	l := &link{}
	conn, _, err := zk.Connect(opts.Servers, opts.ResourceSession, zk.WithLogger(l.logger(opts.Log)), zk.WithLogInfo(false))
	if err != nil {
		return nil, fmt.Errorf("zookeeper: %w", err)
	}
	return &Store{opts: opts, res: conn, holders: map[holderKey]*holder{}}, nil
}

func (s *Store) lockDir(lock string) string { return s.opts.Prefix + "/locks/" + lock }
func (s *Store) resPath(key string) string  { return s.opts.Prefix + "/res/" + key }

var acl = zk.WorldACL(zk.PermAll)

// await runs a ZooKeeper call, which takes no context, and gives up when ctx
// ends. The call may still take effect afterwards; the caller reports an
// unknown outcome.
func await[T any](ctx context.Context, call func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		v, err := call()
		ch <- result{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}

// ensure creates p and its parents as persistent znodes if needed.
func (s *Store) ensure(ctx context.Context, conn *zk.Conn, p string) error {
	if _, ok := s.made.Load(p); ok {
		return nil
	}
	at := ""
	for _, part := range strings.Split(strings.Trim(p, "/"), "/") {
		at += "/" + part
		if _, ok := s.made.Load(at); ok {
			continue
		}
		_, err := await(ctx, func() (string, error) { return conn.Create(at, nil, 0, acl) })
		if err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return fmt.Errorf("zookeeper create %s: %w", at, err)
		}
		s.made.Store(at, true)
	}
	return nil
}

// again runs call, and once more after making dir anew if it failed because
// a parent node is missing: the paths ensure remembers may have been deleted
// by hand (or between test runs), and a failed create had no effect.
func (s *Store) again(ctx context.Context, conn *zk.Conn, dir string, call func() error) error {
	err := call()
	if !errors.Is(err, zk.ErrNoNode) {
		return err
	}
	s.made.Clear()
	if err := s.ensure(ctx, conn, dir); err != nil {
		return err
	}
	return call()
}

// Acquire implements fencing.Store.
func (s *Store) Acquire(ctx context.Context, lock, owner string, ttl time.Duration) (uint64, error) {
	token, _, err := s.AcquireLease(ctx, lock, owner, ttl)
	return token, err
}

// AcquireLease is ZooKeeper's lock recipe as a try-lock: in a new session
// with ttl as its timeout, create an ephemeral sequential node under the
// lock's node; if no node has a lower sequence number, the lock is ours,
// otherwise it is held (the recipe's waiter would now watch its
// predecessor; a Fencing API acquire answers at once instead). The node is
// protected (its name carries a GUID), so a create whose answer was lost is
// found again rather than left behind. The lease granted is the session
// timeout the ensemble negotiated. Whenever the lock is not ours for
// certain, the session is closed, which deletes the node.
func (s *Store) AcquireLease(ctx context.Context, lock, owner string, ttl time.Duration) (uint64, time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	sess, err := openSession(ctx, s.opts.Servers, ttl, holderSessionBuffer, s.opts.Log)
	if err != nil {
		return 0, 0, fmt.Errorf("zookeeper session: %w", err)
	}
	held := false
	defer func() {
		if !held {
			go sess.close()
		}
	}()
	dir := s.lockDir(lock)
	if err := s.ensure(ctx, sess.conn, dir); err != nil {
		return 0, 0, err
	}
	var node string
	err = s.again(ctx, sess.conn, dir, func() (err error) {
		node, err = await(ctx, func() (string, error) {
			return sess.conn.CreateProtectedEphemeralSequential(dir+"/lock-", []byte(owner), acl)
		})
		return err
	})
	if err != nil {
		return 0, 0, fmt.Errorf("zookeeper create lock node: %w", err)
	}
	mine, ok := sequence(node)
	if !ok {
		return 0, 0, fmt.Errorf("zookeeper: lock node %s has no sequence number", node)
	}
	// The server answering has applied our create, hence every node created
	// before it: a lower number that is still listed is a holder (or one
	// that just left, which makes this answer a harmless false "held").
	children, err := await(ctx, func() ([]string, error) {
		c, _, err := sess.conn.Children(dir)
		return c, err
	})
	if err != nil {
		return 0, 0, fmt.Errorf("zookeeper children of %s: %w", dir, err)
	}
	for _, c := range children {
		if n, ok := sequence(c); ok && n < mine {
			return 0, 0, fencing.ErrHeld
		}
	}
	stat, err := await(ctx, func() (*zk.Stat, error) {
		ok, st, err := sess.conn.Exists(node)
		if err == nil && !ok {
			err = errors.New("the lock node vanished: the session was lost")
		}
		return st, err
	})
	if err != nil {
		return 0, 0, fmt.Errorf("zookeeper lock node %s: %w", node, err)
	}
	if sess.lost() {
		return 0, 0, errors.New("zookeeper: the session was lost while acquiring")
	}
	token := uint64(stat.Czxid)
	h := &holder{owner: owner, node: node, sess: sess, heard: make(chan struct{}, 1), done: make(chan struct{})}
	k := holderKey{lock, token}
	s.mu.Lock()
	s.holders[k] = h
	s.mu.Unlock()
	held = true
	go s.watch(k, h)
	return token, sess.granted, nil
}

// sequence is the sequence number ZooKeeper appended to a "lock-" node.
func sequence(name string) (int64, bool) {
	i := strings.LastIndex(name, "lock-")
	if i < 0 {
		return 0, false
	}
	n, err := strconv.ParseInt(name[i+len("lock-"):], 10, 64)
	return n, err == nil
}

// watch forgets a holder whose session expired. A holder the adapter has
// not heard from for one session timeout is treated as a process that died
// holding the lock: its connection is cut and the ensemble expires the
// session one timeout later, as it would for a crashed client. Without this
// a fencing client that vanished would hold the lock for ever, kept alive
// by the adapter's pings.
func (s *Store) watch(k holderKey, h *holder) {
	idle := time.NewTimer(h.sess.granted)
	defer idle.Stop()
	for {
		select {
		case <-h.done:
			return
		case <-h.sess.expired:
			s.forget(k, h)
			h.sess.close()
			return
		case <-h.heard:
			if !idle.Stop() {
				<-idle.C
			}
			idle.Reset(h.sess.granted)
		case <-idle.C:
			s.forget(k, h)
			h.sess.die()
			return
		}
	}
}

func (s *Store) forget(k holderKey, h *holder) {
	s.mu.Lock()
	if s.holders[k] == h {
		delete(s.holders, k)
	}
	s.mu.Unlock()
	h.once.Do(func() { close(h.done) })
}

// holder finds owner's holder of lock with token whose session is still the
// one that created the node, or reports the lock lost.
func (s *Store) holder(lock, owner string, token uint64) (*holder, error) {
	s.mu.Lock()
	h := s.holders[holderKey{lock, token}]
	s.mu.Unlock()
	if h == nil || h.owner != owner || h.sess.lost() {
		return nil, fencing.ErrLost
	}
	select {
	case h.heard <- struct{}{}:
	default:
	}
	return h, nil
}

// RenewLease checks, through the leader (a check-only multi is a
// transaction), that the holder's node still exists; the request itself
// renews the session. A session's timeout is fixed when it is made, so the
// lease answered is that timeout whatever ttl asks for.
func (s *Store) RenewLease(ctx context.Context, lock, owner string, token uint64, _ time.Duration) (time.Duration, error) {
	h, err := s.holder(lock, owner, token)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	_, err = await(ctx, func() ([]zk.MultiResponse, error) {
		return h.sess.conn.Multi(&zk.CheckVersionRequest{Path: h.node, Version: -1})
	})
	switch {
	case errors.Is(err, zk.ErrNoNode):
		return 0, fencing.ErrLost
	case err != nil:
		return 0, fmt.Errorf("zookeeper renew: %w", err)
	case h.sess.lost():
		return 0, fencing.ErrLost
	}
	return h.sess.granted, nil
}

// Renew implements fencing.Store.
func (s *Store) Renew(ctx context.Context, lock, owner string, token uint64, ttl time.Duration) error {
	_, err := s.RenewLease(ctx, lock, owner, token, ttl)
	return err
}

// Release deletes the holder's node and closes its session.
func (s *Store) Release(ctx context.Context, lock, owner string, token uint64) error {
	h, err := s.holder(lock, owner, token)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	_, err = await(ctx, func() (struct{}, error) { return struct{}{}, h.sess.conn.Delete(h.node, -1) })
	s.forget(holderKey{lock, token}, h)
	go h.sess.close() // deletes the node if the delete did not
	switch {
	case errors.Is(err, zk.ErrNoNode):
		return fencing.ErrLost
	case err != nil:
		return fmt.Errorf("zookeeper release: %w", err)
	}
	return nil
}

// encodeValue and decodeValue keep a key's mark and value in one znode.
func encodeValue(token uint64, value []byte) []byte {
	return append([]byte(strconv.FormatUint(token, 10)+"\n"), value...)
}

func decodeValue(data []byte) (uint64, []byte, error) {
	i := slices.Index(data, '\n')
	if i < 0 {
		return 0, nil, fmt.Errorf("resource znode holds no high-water mark: %.40q", data)
	}
	head, value := data[:i], data[i+1:]
	mark, err := strconv.ParseUint(string(head), 10, 64)
	if err != nil {
		return 0, nil, fmt.Errorf("resource znode holds a bad high-water mark %q", head)
	}
	return mark, value, nil
}

// Write compares the token with the key's mark and then sets mark and value
// with a version-conditional set, so a write that raced with another one
// since the read fails with a version conflict and starts again. A first
// write creates the znode (a race there is a "node exists" conflict). A
// stale answer first confirms the mark it read, as Read does: a server that
// lags gives an older mark, which makes the rejection no less right but the
// mark reported with it out of date. Conflicts are definite (the set did
// not happen); any other error is returned at once, since the set may have
// happened.
func (s *Store) Write(ctx context.Context, key string, token uint64, value []byte) error {
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	p := s.resPath(key)
	data := encodeValue(token, value)
	for {
		g, err := s.get(ctx, p)
		if errors.Is(err, zk.ErrNoNode) {
			dir := s.opts.Prefix + "/res"
			if err := s.ensure(ctx, s.res, dir); err != nil {
				return err
			}
			err = s.again(ctx, s.res, dir, func() error {
				_, err := await(ctx, func() (string, error) { return s.res.Create(p, data, 0, acl) })
				return err
			})
			if errors.Is(err, zk.ErrNodeExists) {
				continue
			}
			if err != nil {
				return fmt.Errorf("zookeeper create %s: %w", p, err)
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("zookeeper get %s: %w", p, err)
		}
		mark, _, err := decodeValue(g.data)
		if err != nil {
			return err
		}
		if token <= mark {
			// The rejection is right on any server's mark, but the mark
			// it reports must be the current one (the checkers read it
			// as the register's state): confirmed by a check-only multi,
			// as a read is. Unconfirmed, an adapter on a server that had
			// just restarted reported a mark 1.4 s old (guided run,
			// zookeeper seed 2: not linearizable).
			_, cerr := await(ctx, func() ([]zk.MultiResponse, error) {
				return s.res.Multi(&zk.CheckVersionRequest{Path: p, Version: g.stat.Version})
			})
			switch {
			case errors.Is(cerr, zk.ErrBadVersion), errors.Is(cerr, zk.ErrNoNode):
				continue // written meanwhile: read again
			case cerr != nil:
				return fmt.Errorf("zookeeper check %s: %w", p, cerr)
			}
			return &fencing.StaleError{HighWater: mark}
		}
		_, err = await(ctx, func() (*zk.Stat, error) { return s.res.Set(p, data, g.stat.Version) })
		if errors.Is(err, zk.ErrBadVersion) {
			continue
		}
		if err != nil {
			return fmt.Errorf("zookeeper set %s: %w", p, err)
		}
		return nil
	}
}

// Read is linearizable: a ZooKeeper read is served by the server the client
// is connected to and may lag behind, so the version read is confirmed by a
// check-only multi, a transaction that the leader orders with every write.
// If the check passes, the value read was the current one at that point.
func (s *Store) Read(ctx context.Context, key string) ([]byte, uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	p := s.resPath(key)
	for {
		g, err := s.get(ctx, p)
		version := int32(-1) // absent: confirm that nothing exists yet
		switch {
		case errors.Is(err, zk.ErrNoNode):
		case err != nil:
			return nil, 0, fmt.Errorf("zookeeper get %s: %w", p, err)
		default:
			version = g.stat.Version
		}
		_, cerr := await(ctx, func() ([]zk.MultiResponse, error) {
			return s.res.Multi(&zk.CheckVersionRequest{Path: p, Version: version})
		})
		switch {
		case errors.Is(cerr, zk.ErrNoNode) && version == -1:
			return nil, 0, fencing.ErrNotFound
		case errors.Is(cerr, zk.ErrNoNode), errors.Is(cerr, zk.ErrBadVersion):
			continue // written meanwhile: read again
		case cerr != nil:
			return nil, 0, fmt.Errorf("zookeeper check %s: %w", p, cerr)
		case version == -1:
			continue // created meanwhile
		}
		mark, value, err := decodeValue(g.data)
		if err != nil {
			return nil, 0, err
		}
		return value, mark, nil
	}
}

// Health succeeds when a quorum orders a transaction (a check of the
// resources' node, made first if needed).
func (s *Store) Health(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	dir := s.opts.Prefix + "/res"
	if err := s.ensure(ctx, s.res, dir); err != nil {
		return err
	}
	err := s.again(ctx, s.res, dir, func() error {
		_, err := await(ctx, func() ([]zk.MultiResponse, error) {
			return s.res.Multi(&zk.CheckVersionRequest{Path: dir, Version: -1})
		})
		return err
	})
	if err != nil {
		return fmt.Errorf("zookeeper: %w", err)
	}
	return nil
}

// Close closes every holder's session (their nodes go) and the resource
// session.
func (s *Store) Close() error {
	s.mu.Lock()
	hs := s.holders
	s.holders = map[holderKey]*holder{}
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, h := range hs {
		h.once.Do(func() { close(h.done) })
		wg.Add(1)
		go func() { defer wg.Done(); h.sess.close() }()
	}
	wg.Wait()
	s.res.Close()
	return nil
}

// node is a resource's znode as read: its data and its version.
type node struct {
	data []byte
	stat *zk.Stat
}

// get reads a resource's znode.
func (s *Store) get(ctx context.Context, p string) (node, error) {
	return await(ctx, func() (node, error) {
		d, st, err := s.res.Get(p)
		return node{d, st}, err
	})
}
