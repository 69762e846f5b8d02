// Package etcd is fencecheck's etcd fencing implementation: a fencing.Store
// whose every check happens inside etcd (a lease plus a create-if-absent
// transaction for locks, one compare-and-put transaction for writes), and
// the container target "etcd": three etcd members behind two adapters.
package etcd

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/fencing"
)

// Semantics is what the etcd store guarantees: a write needs a strictly
// newer token, and tokens are etcd revisions, one sequence for all locks.
var Semantics = checkers.Semantics{Equal: checkers.EqualReject, Scope: checkers.ScopeGlobal}

// Store is a fencing.Store kept entirely in etcd; the adapter holds no
// fencing state of its own, so any adapter replica can serve any request.
//
// Keys (under Prefix):
//
//	lock/<lock>  value = owner, attached to the holder's lease; its
//	             create revision is the token
//	hw/<key>     the high-water mark, as a 20-digit zero-padded decimal so
//	             that etcd's byte-wise value comparison orders it numerically
//	val/<key>    the value of the write that set hw/<key>: the two are only
//	             ever written together, so hw is also the value's token
type Store struct {
	cli     *clientv3.Client
	prefix  string
	timeout time.Duration
}

var (
	_ fencing.Store        = (*Store)(nil)
	_ fencing.LeaseGranter = (*Store)(nil)
)

// StoreOptions configure OpenStore.
type StoreOptions struct {
	// Endpoints are the etcd members' client URLs.
	Endpoints []string
	// Prefix namespaces every key (default "/fence/").
	Prefix string
	// Timeout bounds each operation (default 3 s). An operation that times
	// out is an error, which the server turns into 5xx (info): it may have
	// been applied.
	Timeout time.Duration
	_       struct{}
}

// OpenStore connects to etcd without waiting for it: the first operation
// fails if no member answers, and the adapter's health check says so.
func OpenStore(opts StoreOptions) (*Store, error) {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: opts.Endpoints,
		// Keep-alives let the client notice a frozen or cut-off member and
		// move to another one instead of waiting on a dead connection; gRPC
		// allows no ping interval below 10 s, so requests that land on such
		// a member time out (info) for about that long.
		DialKeepAliveTime:    10 * time.Second,
		DialKeepAliveTimeout: 2 * time.Second,
	})
	if err != nil {
		return nil, fmt.Errorf("etcd client: %w", err)
	}
	return NewStore(cli, opts.Prefix, opts.Timeout), nil
}

// NewStore wraps an etcd client. The client's built-in retries only resend
// a write when it provably never left the client, so a lost reply surfaces
// as an error (info) rather than as a second attempt answering "held" or
// "stale" for an operation that took effect.
func NewStore(cli *clientv3.Client, prefix string, timeout time.Duration) *Store {
	if prefix == "" {
		prefix = "/fence/"
	}
	if timeout == 0 {
		timeout = 3 * time.Second
	}
	return &Store{cli: cli, prefix: prefix, timeout: timeout}
}

func (s *Store) lockKey(lock string) string { return s.prefix + "lock/" + lock }
func (s *Store) hwKey(key string) string    { return s.prefix + "hw/" + key }
func (s *Store) valKey(key string) string   { return s.prefix + "val/" + key }

// padToken writes a token so that byte order is numeric order (uint64 has
// at most 20 decimal digits).
func padToken(t uint64) string { return fmt.Sprintf("%020d", t) }

// opContext bounds an operation and asks etcd to refuse it at once on a
// member that has no leader (one cut off from the majority), instead of
// letting it wait there for the whole timeout.
func (s *Store) opContext(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	return clientv3.WithRequireLeader(ctx), cancel
}

// retryNoLeader runs one etcd request until it gets an answer other than
// "no leader" or the operation's deadline passes. A member refuses a
// require-leader request before looking at it, so the refused request had
// no effect and sending it again (the client's balancer picks the next
// member) is safe even for writes. Any other error is returned as is: the
// request may have been applied.
func retryNoLeader(ctx context.Context, call func() error) error {
	for {
		err := call()
		if !errors.Is(err, rpctypes.ErrNoLeader) || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// leaseSeconds rounds a TTL up to etcd's whole seconds (at least 1; etcd
// itself raises very short leases to its minimum, about 2 s by default).
func leaseSeconds(ttl time.Duration) int64 {
	secs := int64((ttl + time.Second - 1) / time.Second)
	if secs < 1 {
		secs = 1
	}
	return secs
}

// Acquire grants a lease for ttl and creates the lock key under it only if
// the key is absent. An expired holder's key is already gone: etcd deletes
// a lease's keys when the lease expires. The token is the key's create
// revision, i.e. the revision of this transaction: etcd revisions only grow,
// across all keys, so tokens are globally increasing.
func (s *Store) Acquire(ctx context.Context, lock, owner string, ttl time.Duration) (uint64, error) {
	token, _, err := s.AcquireLease(ctx, lock, owner, ttl)
	return token, err
}

// AcquireLease is Acquire that also says the lease etcd granted: whole
// seconds, and no less than etcd's minimum TTL.
func (s *Store) AcquireLease(ctx context.Context, lock, owner string, ttl time.Duration) (uint64, time.Duration, error) {
	ctx, cancel := s.opContext(ctx)
	defer cancel()
	var lease *clientv3.LeaseGrantResponse
	err := retryNoLeader(ctx, func() (err error) {
		lease, err = s.cli.Grant(ctx, leaseSeconds(ttl))
		return err
	})
	if err != nil {
		return 0, 0, fmt.Errorf("etcd grant: %w", err)
	}
	key := s.lockKey(lock)
	var resp *clientv3.TxnResponse
	err = retryNoLeader(ctx, func() (err error) {
		resp, err = s.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
			Then(clientv3.OpPut(key, owner, clientv3.WithLease(lease.ID))).
			Commit()
		return err
	})
	if err != nil {
		// The lock may or may not be ours now; the lease expires by itself
		// if nobody renews it.
		return 0, 0, fmt.Errorf("etcd acquire: %w", err)
	}
	if !resp.Succeeded {
		s.revokeQuietly(lease.ID)
		return 0, 0, fencing.ErrHeld
	}
	return uint64(resp.Header.Revision), time.Duration(lease.TTL) * time.Second, nil
}

// holder returns the lock key if owner holds it with token.
func (s *Store) holder(ctx context.Context, lock, owner string, token uint64) (*clientv3.GetResponse, bool, error) {
	var resp *clientv3.GetResponse
	err := retryNoLeader(ctx, func() (err error) {
		resp, err = s.cli.Get(ctx, s.lockKey(lock))
		return err
	})
	if err != nil {
		return nil, false, fmt.Errorf("etcd get lock: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return resp, false, nil
	}
	kv := resp.Kvs[0]
	return resp, string(kv.Value) == owner && uint64(kv.CreateRevision) == token, nil
}

// Renew keeps the holder's lease alive for at least ttl. A keep-alive
// renews a lease to the TTL it was granted with; when ttl asks for more, the
// key moves to a new lease of that length (a put keeps the key's create
// revision, so the token stays the same). Either way the key is checked
// again afterwards: a lease whose key was released in between must not
// count as a renewed lock.
func (s *Store) Renew(ctx context.Context, lock, owner string, token uint64, ttl time.Duration) error {
	_, err := s.RenewLease(ctx, lock, owner, token, ttl)
	return err
}

// RenewLease is Renew that also says the lease the holder now has.
func (s *Store) RenewLease(ctx context.Context, lock, owner string, token uint64, ttl time.Duration) (time.Duration, error) {
	ctx, cancel := s.opContext(ctx)
	defer cancel()
	resp, ok, err := s.holder(ctx, lock, owner, token)
	if err != nil {
		return 0, err
	}
	if !ok {
		return 0, fencing.ErrLost
	}
	old := clientv3.LeaseID(resp.Kvs[0].Lease)
	var ka *clientv3.LeaseKeepAliveResponse
	if err := retryNoLeader(ctx, func() (err error) {
		ka, err = s.cli.KeepAliveOnce(ctx, old)
		return err
	}); err != nil {
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return 0, fencing.ErrLost
		}
		return 0, fmt.Errorf("etcd keep-alive: %w", err)
	}
	if want := leaseSeconds(ttl); ka.TTL < want {
		return s.moveToNewLease(ctx, lock, owner, token, want, old)
	}
	if _, ok, err := s.holder(ctx, lock, owner, token); err != nil {
		return 0, err
	} else if !ok {
		return 0, fencing.ErrLost
	}
	return time.Duration(ka.TTL) * time.Second, nil
}

// moveToNewLease re-attaches the holder's key to a fresh lease of secs
// seconds, only if owner still holds it with token.
func (s *Store) moveToNewLease(ctx context.Context, lock, owner string, token uint64, secs int64, old clientv3.LeaseID) (time.Duration, error) {
	var lease *clientv3.LeaseGrantResponse
	err := retryNoLeader(ctx, func() (err error) {
		lease, err = s.cli.Grant(ctx, secs)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("etcd grant: %w", err)
	}
	key := s.lockKey(lock)
	var resp *clientv3.TxnResponse
	err = retryNoLeader(ctx, func() (err error) {
		resp, err = s.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.Value(key), "=", owner),
				clientv3.Compare(clientv3.CreateRevision(key), "=", int64(token))).
			Then(clientv3.OpPut(key, owner, clientv3.WithLease(lease.ID))).
			Commit()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("etcd renew: %w", err)
	}
	if !resp.Succeeded {
		s.revokeQuietly(lease.ID)
		return 0, fencing.ErrLost
	}
	s.revokeQuietly(old)
	return time.Duration(lease.TTL) * time.Second, nil
}

// Release deletes the lock key only if owner holds it with token, then
// revokes the lease (which only held that key).
func (s *Store) Release(ctx context.Context, lock, owner string, token uint64) error {
	ctx, cancel := s.opContext(ctx)
	defer cancel()
	key := s.lockKey(lock)
	var resp *clientv3.TxnResponse
	err := retryNoLeader(ctx, func() (err error) {
		resp, err = s.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.Value(key), "=", owner),
				clientv3.Compare(clientv3.CreateRevision(key), "=", int64(token))).
			Then(clientv3.OpDelete(key, clientv3.WithPrevKV())).
			Commit()
		return err
	})
	if err != nil {
		return fmt.Errorf("etcd release: %w", err)
	}
	if !resp.Succeeded {
		return fencing.ErrLost
	}
	if prev := resp.Responses[0].GetResponseDeleteRange().PrevKvs; len(prev) > 0 && prev[0].Lease != 0 {
		s.revokeQuietly(clientv3.LeaseID(prev[0].Lease))
	}
	return nil
}

// revokeQuietly drops a lease nobody needs; if that fails it expires on
// its own.
func (s *Store) revokeQuietly(id clientv3.LeaseID) {
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	s.cli.Revoke(ctx, id)
}

// Write is one transaction: if the key has no high-water mark yet, or its
// mark is below token, store value and mark together; otherwise read the
// mark back for the stale answer. The "absent" case needs its own branch
// because etcd fails every value comparison on a missing key; the nested
// transaction keeps the whole decision atomic in etcd.
func (s *Store) Write(ctx context.Context, key string, token uint64, value []byte) error {
	ctx, cancel := s.opContext(ctx)
	defer cancel()
	hw, val := s.hwKey(key), s.valKey(key)
	tok := padToken(token)
	store := []clientv3.Op{clientv3.OpPut(hw, tok), clientv3.OpPut(val, string(value))}
	var resp *clientv3.TxnResponse
	err := retryNoLeader(ctx, func() (err error) {
		resp, err = s.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(hw), "=", 0)).
			Then(store...).
			Else(clientv3.OpTxn(
				[]clientv3.Cmp{clientv3.Compare(clientv3.Value(hw), "<", tok)},
				store,
				[]clientv3.Op{clientv3.OpGet(hw)},
			)).
			Commit()
		return err
	})
	if err != nil {
		return fmt.Errorf("etcd write: %w", err)
	}
	if resp.Succeeded {
		return nil
	}
	inner := resp.Responses[0].GetResponseTxn()
	if inner.Succeeded {
		return nil
	}
	kvs := inner.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 {
		return fmt.Errorf("etcd write: high-water mark of %s vanished inside a transaction", key)
	}
	mark, err := strconv.ParseUint(string(kvs[0].Value), 10, 64)
	if err != nil {
		return fmt.Errorf("etcd write: bad high-water mark %q for %s", kvs[0].Value, key)
	}
	return &fencing.StaleError{HighWater: mark}
}

// Read is a linearizable read (etcd's default for a transaction without
// writes) of the value and the mark, which is the value's token.
func (s *Store) Read(ctx context.Context, key string) ([]byte, uint64, error) {
	ctx, cancel := s.opContext(ctx)
	defer cancel()
	var resp *clientv3.TxnResponse
	err := retryNoLeader(ctx, func() (err error) {
		resp, err = s.cli.Txn(ctx).Then(clientv3.OpGet(s.valKey(key)), clientv3.OpGet(s.hwKey(key))).Commit()
		return err
	})
	if err != nil {
		return nil, 0, fmt.Errorf("etcd read: %w", err)
	}
	vals := resp.Responses[0].GetResponseRange().Kvs
	hws := resp.Responses[1].GetResponseRange().Kvs
	if len(vals) == 0 || len(hws) == 0 {
		return nil, 0, fencing.ErrNotFound
	}
	mark, err := strconv.ParseUint(string(hws[0].Value), 10, 64)
	if err != nil {
		return nil, 0, fmt.Errorf("etcd read: bad high-water mark %q for %s", hws[0].Value, key)
	}
	return vals[0].Value, mark, nil
}

// Health is a linearizable read: it succeeds only when a quorum of members
// answers, which is when the adapter can serve anything at all.
func (s *Store) Health(ctx context.Context) error {
	ctx, cancel := s.opContext(ctx)
	defer cancel()
	if err := retryNoLeader(ctx, func() error {
		_, err := s.cli.Get(ctx, s.prefix+"health")
		return err
	}); err != nil {
		return fmt.Errorf("etcd: %w", err)
	}
	return nil
}

// Close closes the etcd client.
func (s *Store) Close() error { return s.cli.Close() }
