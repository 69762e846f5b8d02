package etcd

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/fencecheck/fencecheck/fencing"
)

// MutexStore is the fencing implementation etcd's users write: the issuer is
// etcd's own client-side lock (concurrency.Session + concurrency.Mutex), the
// token is the mutex key's create revision, and the resource is Store's
// compare-and-put transaction.
//
// Each acquire opens a session of its own (a lease kept alive in the
// background by the client, as etcd's Session does for the process that
// holds it) and tries the mutex on it. The adapter keeps the holders'
// Session and Mutex values in memory, as every program using etcd's lock
// does; the lock itself, the token and every check live in etcd. Jepsen found
// in 2020 that such locks are not mutually exclusive: a session whose
// keep-alives stop (its process paused or cut off) loses its lease on etcd's
// clock while its holder still believes in it. The token is what keeps the
// resource safe.
type MutexStore struct {
	res     *Store
	timeout time.Duration

	mu      sync.Mutex
	holders map[holderKey]*mutexHolder
}

var (
	_ fencing.Store         = (*MutexStore)(nil)
	_ fencing.LeaseGranter  = (*MutexStore)(nil)
	_ fencing.HealthChecker = (*MutexStore)(nil)
)

type holderKey struct {
	lock  string
	token uint64
}

// mutexHolder is one held lock: the session and mutex of the etcd client
// that holds it on the fencing client's behalf.
type mutexHolder struct {
	owner   string
	session *concurrency.Session
	mutex   *concurrency.Mutex
	granted time.Duration
	// heard is signalled by every renew or release of the holder, which
	// pushes its idle deadline back (see watch).
	heard chan struct{}
}

// NewMutexStore wraps an etcd client; the resource half is Store's, under
// the same prefix.
func NewMutexStore(cli *clientv3.Client, prefix string, timeout time.Duration) *MutexStore {
	res := NewStore(cli, prefix, timeout)
	return &MutexStore{res: res, timeout: res.timeout, holders: map[holderKey]*mutexHolder{}}
}

// OpenMutexStore connects as OpenStore does.
func OpenMutexStore(opts StoreOptions) (*MutexStore, error) {
	st, err := OpenStore(opts)
	if err != nil {
		return nil, err
	}
	return &MutexStore{res: st, timeout: st.timeout, holders: map[holderKey]*mutexHolder{}}, nil
}

func (s *MutexStore) mutexPrefix(lock string) string { return s.res.prefix + "mutex/" + lock }

// Acquire implements fencing.Store.
func (s *MutexStore) Acquire(ctx context.Context, lock, owner string, ttl time.Duration) (uint64, error) {
	token, _, err := s.AcquireLease(ctx, lock, owner, ttl)
	return token, err
}

// AcquireLease grants a lease (etcd rounds it to whole seconds and raises it
// to its minimum: that is the ttl answered), opens a session on it and
// tries the mutex. On a fresh session TryLock's transaction puts the
// session's key, so the revision of that transaction (the mutex's header)
// is the key's create revision: the token. Whenever the lock is not ours
// for certain, the session is closed, which revokes its lease and with it
// any key it may have created.
func (s *MutexStore) AcquireLease(ctx context.Context, lock, owner string, ttl time.Duration) (uint64, time.Duration, error) {
	ctx, cancel := s.res.opContext(ctx)
	defer cancel()
	cli := s.res.cli
	var lease *clientv3.LeaseGrantResponse
	err := retryNoLeader(ctx, func() (err error) {
		lease, err = cli.Grant(ctx, leaseSeconds(ttl))
		return err
	})
	if err != nil {
		return 0, 0, fmt.Errorf("etcd grant: %w", err)
	}
	// The session's own context is not the request's: it must outlive it.
	// WithTTL only bounds how long Close waits for the revoke.
	sess, err := concurrency.NewSession(cli, concurrency.WithLease(lease.ID), concurrency.WithTTL(int(lease.TTL)))
	if err != nil {
		s.revokeLater(lease.ID)
		return 0, 0, fmt.Errorf("etcd session: %w", err)
	}
	m := concurrency.NewMutex(sess, s.mutexPrefix(lock))
	err = retryNoLeader(ctx, func() error { return m.TryLock(ctx) })
	if errors.Is(err, concurrency.ErrLocked) {
		go sess.Close()
		return 0, 0, fencing.ErrHeld
	}
	if err != nil {
		go sess.Close()
		return 0, 0, fmt.Errorf("etcd mutex: %w", err)
	}
	token := uint64(m.Header().Revision)
	granted := time.Duration(lease.TTL) * time.Second
	h := &mutexHolder{owner: owner, session: sess, mutex: m, granted: granted, heard: make(chan struct{}, 1)}
	s.mu.Lock()
	s.holders[holderKey{lock, token}] = h
	s.mu.Unlock()
	go s.watch(holderKey{lock, token}, h)
	return token, granted, nil
}

// watch forgets a holder once its session ends. A holder the adapter has
// not heard from for one lease is treated as a process that died holding
// the lock: its session stops its keep-alives (Orphan, not Close), so etcd
// expires the lease one TTL later, as it would for a crashed client. Without
// this a fencing client that vanished would hold the lock for ever, kept
// alive by the adapter.
func (s *MutexStore) watch(k holderKey, h *mutexHolder) {
	idle := time.NewTimer(h.granted)
	defer idle.Stop()
	for {
		select {
		case <-h.session.Done():
			s.forget(k, h)
			return
		case <-h.heard:
			if !idle.Stop() {
				<-idle.C
			}
			idle.Reset(h.granted)
		case <-idle.C:
			h.session.Orphan()
			s.forget(k, h)
			return
		}
	}
}

// forget drops h from the holders, unless another took its place.
func (s *MutexStore) forget(k holderKey, h *mutexHolder) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.holders[k] == h {
		delete(s.holders, k)
	}
}

// holder finds owner's live holder of lock with token, or reports the lock
// lost.
func (s *MutexStore) holder(lock, owner string, token uint64) (*mutexHolder, error) {
	s.mu.Lock()
	h := s.holders[holderKey{lock, token}]
	s.mu.Unlock()
	if h == nil || h.owner != owner {
		return nil, fencing.ErrLost
	}
	select {
	case <-h.session.Done():
		return nil, fencing.ErrLost
	default:
	}
	select {
	case h.heard <- struct{}{}:
	default:
	}
	return h, nil
}

// isOwner asks etcd whether the mutex key still exists with the token as its
// create revision (the mutex's own IsOwner comparison).
func (s *MutexStore) isOwner(ctx context.Context, h *mutexHolder, then ...clientv3.Op) (bool, error) {
	var resp *clientv3.TxnResponse
	err := retryNoLeader(ctx, func() (err error) {
		resp, err = s.res.cli.Txn(ctx).If(h.mutex.IsOwner()).Then(then...).Commit()
		return err
	})
	if err != nil {
		return false, err
	}
	return resp.Succeeded, nil
}

// Renew implements fencing.Store.
func (s *MutexStore) Renew(ctx context.Context, lock, owner string, token uint64, ttl time.Duration) error {
	_, err := s.RenewLease(ctx, lock, owner, token, ttl)
	return err
}

// RenewLease checks that the holder's session still owns the mutex. The
// session renews its lease by itself, so the lease answered is the
// session's TTL whatever ttl asks for.
func (s *MutexStore) RenewLease(ctx context.Context, lock, owner string, token uint64, _ time.Duration) (time.Duration, error) {
	h, err := s.holder(lock, owner, token)
	if err != nil {
		return 0, err
	}
	ctx, cancel := s.res.opContext(ctx)
	defer cancel()
	ok, err := s.isOwner(ctx, h)
	if err != nil {
		return 0, fmt.Errorf("etcd renew: %w", err)
	}
	if !ok {
		return 0, fencing.ErrLost
	}
	return h.granted, nil
}

// Release deletes the mutex key if the holder still owns it, then closes
// the session (revoking its lease).
func (s *MutexStore) Release(ctx context.Context, lock, owner string, token uint64) error {
	h, err := s.holder(lock, owner, token)
	if err != nil {
		return err
	}
	ctx, cancel := s.res.opContext(ctx)
	defer cancel()
	ok, err := s.isOwner(ctx, h, clientv3.OpDelete(h.mutex.Key()))
	if err != nil {
		return fmt.Errorf("etcd release: %w", err)
	}
	s.forget(holderKey{lock, token}, h)
	go h.session.Close()
	if !ok {
		return fencing.ErrLost
	}
	return nil
}

func (s *MutexStore) revokeLater(id clientv3.LeaseID) { go s.res.revokeQuietly(id) }

// Write implements fencing.Store with Store's transaction.
func (s *MutexStore) Write(ctx context.Context, key string, token uint64, value []byte) error {
	return s.res.Write(ctx, key, token, value)
}

// Read implements fencing.Store with Store's linearizable read.
func (s *MutexStore) Read(ctx context.Context, key string) ([]byte, uint64, error) {
	return s.res.Read(ctx, key)
}

// Health implements fencing.HealthChecker.
func (s *MutexStore) Health(ctx context.Context) error { return s.res.Health(ctx) }

// Close ends every session (their leases expire) and closes the client.
func (s *MutexStore) Close() error {
	s.mu.Lock()
	hs := s.holders
	s.holders = map[holderKey]*mutexHolder{}
	s.mu.Unlock()
	for _, h := range hs {
		h.session.Orphan()
	}
	return s.res.Close()
}
