// Package mysql is fencecheck's MySQL/MariaDB fencing implementation: a
// fencing.Store whose every decision is one SQL statement inside the
// database (InnoDB): a row per lock granted by one upsert on the database's
// clock, and the resource's conditional write. The container target "mysql"
// runs it on Debian's MariaDB 10.11 behind two adapters.
package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/fencing"
)

// Semantics is what the store guarantees: a write needs a strictly newer
// token, and tokens are ordered per lock (one counter per lock row).
var Semantics = checkers.Semantics{Equal: checkers.EqualReject, Scope: checkers.ScopePerLock}

// The schema. Names are VARBINARY so that they compare byte for byte (a
// case-insensitive collation would make "K" and "k" one key); tokens are
// BIGINT UNSIGNED, the Fencing API's full range. A released lock's lease
// ends at DATETIME's first instant, so "free" is one comparison whatever
// the database's clock does.
var schema = []string{`
CREATE TABLE IF NOT EXISTS fencecheck_locks (
  name        VARBINARY(128) NOT NULL PRIMARY KEY,
  counter     BIGINT UNSIGNED NOT NULL,
  holder      VARBINARY(256) NOT NULL,
  lease_until DATETIME(6) NOT NULL
) ENGINE=InnoDB`, `
CREATE TABLE IF NOT EXISTS fencecheck_resources (
  k     VARBINARY(128) NOT NULL PRIMARY KEY,
  token BIGINT UNSIGNED NOT NULL,
  value LONGBLOB NOT NULL
) ENGINE=InnoDB`}

// acquireSQL grants the lock in one statement: a new lock row starts at
// counter 1 (1 row affected); an existing one is taken only if its lease
// has ended by the database's clock (2 rows affected), its counter
// incremented through LAST_INSERT_ID(expr) so that the new value comes back
// in the reply. Nothing changed (0 rows): held. Every assignment tests
// lease_until, which is assigned last, so the decision is the same whether
// assignments see earlier ones (MariaDB's default) or not
// (SIMULTANEOUS_ASSIGNMENT).
const acquireSQL = `
INSERT INTO fencecheck_locks (name, counter, holder, lease_until)
VALUES (?, 1, ?, NOW(6) + INTERVAL ? MICROSECOND)
ON DUPLICATE KEY UPDATE
  counter     = IF(lease_until <= NOW(6), LAST_INSERT_ID(counter + 1), counter),
  holder      = IF(lease_until <= NOW(6), VALUES(holder), holder),
  lease_until = IF(lease_until <= NOW(6), VALUES(lease_until), lease_until)`

// renewSQL and releaseSQL act only for the current holder with that token,
// while its lease lasts.
const renewSQL = `
UPDATE fencecheck_locks SET lease_until = NOW(6) + INTERVAL ? MICROSECOND
WHERE name = ? AND holder = ? AND counter = ? AND lease_until > NOW(6)`

const releaseSQL = `
UPDATE fencecheck_locks SET lease_until = '1000-01-01 00:00:00'
WHERE name = ? AND holder = ? AND counter = ? AND lease_until > NOW(6)`

// writeSQL is the seeds' conditional write as one upsert: the first write
// of a key inserts (1 row affected); a later one replaces value and token
// only if its token is newer (2 rows); otherwise nothing changes (0 rows):
// stale. value is assigned first, while token still holds the old mark, and
// GREATEST makes the token's own assignment independent of order.
const writeSQL = `
INSERT INTO fencecheck_resources (k, token, value) VALUES (?, ?, ?)
ON DUPLICATE KEY UPDATE
  value = IF(token < VALUES(token), VALUES(value), value),
  token = GREATEST(token, VALUES(token))`

const markSQL = `SELECT token FROM fencecheck_resources WHERE k = ?`
const readSQL = `SELECT value, token FROM fencecheck_resources WHERE k = ?`

// Store is a fencing.Store kept entirely in one MySQL or MariaDB database.
type Store struct {
	db      *sql.DB
	timeout time.Duration
}

var _ fencing.Store = (*Store)(nil)

// StoreOptions configure OpenStore.
type StoreOptions struct {
	// DSN is a go-sql-driver DSN, user@tcp(host:port)/database.
	DSN string
	// Timeout bounds connecting and each operation (default 2 s). An
	// operation that times out is an error, which the server turns into
	// 5xx (info): it may have committed.
	Timeout time.Duration
	_       struct{}
}

// OpenStore makes a connection pool without connecting: the first
// operation fails while the database is down, and the adapter's health
// check says so. The schema is created on first use.
func OpenStore(opts StoreOptions) (*Store, error) {
	if opts.Timeout <= 0 {
		opts.Timeout = 2 * time.Second
	}
	cfg, err := gomysql.ParseDSN(opts.DSN)
	if err != nil {
		return nil, fmt.Errorf("mysql: %w", err)
	}
	cfg.Timeout = opts.Timeout
	cfg.ReadTimeout = opts.Timeout
	cfg.WriteTimeout = opts.Timeout
	// Rows affected must count changed rows, not matched ones: that is how
	// the upserts say what they did.
	cfg.ClientFoundRows = false
	// One round trip per statement instead of prepare, execute, close.
	cfg.InterpolateParams = true
	// Timestamps in UTC whatever the server's zone.
	cfg.Params = map[string]string{"time_zone": "'+00:00'"}
	conn, err := gomysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("mysql: %w", err)
	}
	db := sql.OpenDB(conn)
	db.SetMaxOpenConns(16)
	db.SetMaxIdleConns(16)
	// Connections that outlived a database restart are noticed by the
	// driver before it sends anything (and replaced); older ones expire.
	db.SetConnMaxIdleTime(30 * time.Second)
	return &Store{db: db, timeout: opts.Timeout}, nil
}

// CreateSchema creates the tables if they are missing. CREATE TABLE IF NOT
// EXISTS takes the table's metadata lock, so adapters can race here.
func (s *Store) CreateSchema(ctx context.Context) error {
	for _, q := range schema {
		if _, err := s.db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("mysql schema: %w", err)
		}
	}
	return nil
}

func (s *Store) op(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.timeout)
}

// noTable says err is "table doesn't exist" (a wiped data directory): the
// schema is made again and the statement tried once more, which is safe
// because a statement on a missing table did nothing.
func noTable(err error) bool {
	var me *gomysql.MySQLError
	return errors.As(err, &me) && me.Number == 1146
}

// exec runs one statement, making the schema first when the tables are gone.
func (s *Store) exec(ctx context.Context, q string, args ...any) (sql.Result, error) {
	res, err := s.db.ExecContext(ctx, q, args...)
	if noTable(err) {
		if err := s.CreateSchema(ctx); err != nil {
			return nil, err
		}
		res, err = s.db.ExecContext(ctx, q, args...)
	}
	return res, err
}

func (s *Store) queryRow(ctx context.Context, q string, args []any, dest ...any) error {
	err := s.db.QueryRowContext(ctx, q, args...).Scan(dest...)
	if noTable(err) {
		if err := s.CreateSchema(ctx); err != nil {
			return err
		}
		err = s.db.QueryRowContext(ctx, q, args...).Scan(dest...)
	}
	return err
}

func micros(ttl time.Duration) (int64, error) {
	if ttl <= 0 {
		return 0, fmt.Errorf("ttl %v: must be positive", ttl)
	}
	ms := int64((ttl + time.Millisecond - 1) / time.Millisecond)
	return ms * 1000, nil
}

// Acquire implements fencing.Store.
func (s *Store) Acquire(ctx context.Context, lock, owner string, ttl time.Duration) (uint64, error) {
	us, err := micros(ttl)
	if err != nil {
		return 0, err
	}
	ctx, cancel := s.op(ctx)
	defer cancel()
	res, err := s.exec(ctx, acquireSQL, []byte(lock), []byte(owner), us)
	if err != nil {
		return 0, fmt.Errorf("mysql acquire %s: %w", lock, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("mysql acquire %s: %w", lock, err)
	}
	switch n {
	case 0:
		return 0, fencing.ErrHeld
	case 1:
		return 1, nil
	case 2:
		id, err := res.LastInsertId()
		if err != nil || id <= 0 {
			return 0, fmt.Errorf("mysql acquire %s: no counter in the reply (%d, %v)", lock, id, err)
		}
		return uint64(id), nil
	}
	return 0, fmt.Errorf("mysql acquire %s: %d rows affected", lock, n)
}

// Renew implements fencing.Store.
func (s *Store) Renew(ctx context.Context, lock, owner string, token uint64, ttl time.Duration) error {
	us, err := micros(ttl)
	if err != nil {
		return err
	}
	return s.holderUpdate(ctx, "renew "+lock, renewSQL, us, []byte(lock), []byte(owner), token)
}

// Release implements fencing.Store.
func (s *Store) Release(ctx context.Context, lock, owner string, token uint64) error {
	return s.holderUpdate(ctx, "release "+lock, releaseSQL, []byte(lock), []byte(owner), token)
}

func (s *Store) holderUpdate(ctx context.Context, what, q string, args ...any) error {
	ctx, cancel := s.op(ctx)
	defer cancel()
	res, err := s.exec(ctx, q, args...)
	if err != nil {
		return fmt.Errorf("mysql %s: %w", what, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("mysql %s: %w", what, err)
	} else if n != 1 {
		return fencing.ErrLost
	}
	return nil
}

// Write implements fencing.Store.
func (s *Store) Write(ctx context.Context, key string, token uint64, value []byte) error {
	ctx, cancel := s.op(ctx)
	defer cancel()
	res, err := s.exec(ctx, writeSQL, []byte(key), token, value)
	if err != nil {
		return fmt.Errorf("mysql write %s: %w", key, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("mysql write %s: %w", key, err)
	}
	if n == 1 || n == 2 {
		return nil
	}
	// Rejected inside the database; the mark is read afterwards only to
	// report it (it may have grown since, never shrunk).
	var mark uint64
	if err := s.queryRow(ctx, markSQL, []any{[]byte(key)}, &mark); err != nil {
		return fmt.Errorf("mysql write %s: reading the high-water mark: %w", key, err)
	}
	return &fencing.StaleError{HighWater: mark}
}

// Read implements fencing.Store.
func (s *Store) Read(ctx context.Context, key string) ([]byte, uint64, error) {
	ctx, cancel := s.op(ctx)
	defer cancel()
	var value []byte
	var token uint64
	err := s.queryRow(ctx, readSQL, []any{[]byte(key)}, &value, &token)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, 0, fencing.ErrNotFound
	}
	if err != nil {
		return nil, 0, fmt.Errorf("mysql read %s: %w", key, err)
	}
	return value, token, nil
}

// Health reports whether the database answers and holds the schema
// (fencing.HealthChecker): the adapter is not ready before.
func (s *Store) Health(ctx context.Context) error {
	ctx, cancel := s.op(ctx)
	defer cancel()
	return s.CreateSchema(ctx)
}

// Close implements fencing.Store.
func (s *Store) Close() error { return s.db.Close() }
