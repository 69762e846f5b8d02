// Package postgres is fencecheck's PostgreSQL fencing implementation: a
// fencing.Store whose every decision is one SQL statement inside
// PostgreSQL (a row per lock, granted by one upsert on the database's
// clock; the resource's conditional write, or a trigger that rejects stale
// tokens), and the container targets "postgres", "postgres-trigger" and
// "postgres-async" that run it behind two adapters.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/fencing"
)

// Semantics is what the store guarantees: a write needs a strictly newer
// token, and tokens are ordered per lock (one counter per lock row).
var Semantics = checkers.Semantics{Equal: checkers.EqualReject, Scope: checkers.ScopePerLock}

// Mode is where the resource's token check sits.
type Mode string

const (
	// Conditional: the write itself is conditional, the seeds' UPDATE ...
	// WHERE key = $1 AND token < $2, as the DO UPDATE of an upsert so that
	// the first write of a key inserts without a race.
	Conditional Mode = "conditional"
	// Trigger: the adapter writes plainly (an unconditional upsert) and a
	// BEFORE INSERT OR UPDATE trigger in the database rejects stale tokens.
	Trigger Mode = "trigger"
)

// ParseMode reads a Mode by name.
func ParseMode(s string) (Mode, error) {
	switch Mode(s) {
	case Conditional, Trigger:
		return Mode(s), nil
	}
	return "", fmt.Errorf("unknown postgres fencing mode %q (conditional or trigger)", s)
}

// The schema. Tokens are numeric(20,0): the Fencing API's tokens are
// unsigned 64-bit, beyond bigint, and numeric compares them exactly. A
// released lock's lease ends at -infinity, so "free" is one comparison
// whatever the database's clock does.
const schemaSQL = `
CREATE TABLE IF NOT EXISTS fencecheck_locks (
  name        text PRIMARY KEY,
  counter     bigint NOT NULL,
  holder      text NOT NULL,
  lease_until timestamptz NOT NULL
);
CREATE TABLE IF NOT EXISTS fencecheck_resources (
  key   text PRIMARY KEY,
  token numeric(20,0) NOT NULL CHECK (token >= 0),
  value bytea NOT NULL
)`

// staleCode is the SQLSTATE the trigger raises for a stale token; its
// DETAIL is the key's high-water mark.
const staleCode = "FC409"

const triggerSQL = `
CREATE OR REPLACE FUNCTION fencecheck_fence() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'UPDATE' AND NEW.token <= OLD.token THEN
    RAISE EXCEPTION USING ERRCODE = '` + staleCode + `',
      MESSAGE = format('stale fencing token %s for %s: high-water mark is %s', NEW.token, OLD.key, OLD.token),
      DETAIL = OLD.token::text;
  END IF;
  RETURN NEW;
END $$;
CREATE OR REPLACE TRIGGER fencecheck_fence BEFORE INSERT OR UPDATE ON fencecheck_resources
  FOR EACH ROW EXECUTE FUNCTION fencecheck_fence()`

// schemaLock serialises schema set-up between adapters: CREATE ... IF NOT
// EXISTS races with itself in PostgreSQL.
const schemaLock = 7270416

// acquireSQL grants the lock in one statement: a new lock row starts at
// counter 1; an existing one is taken, and its counter incremented, only if
// its lease has ended by the database's clock. No row back: held. The row
// lock ON CONFLICT takes makes the check and the increment one step.
const acquireSQL = `
INSERT INTO fencecheck_locks AS l (name, counter, holder, lease_until)
VALUES ($1, 1, $2, clock_timestamp() + $3::float8 * interval '1 millisecond')
ON CONFLICT (name) DO UPDATE
  SET counter = l.counter + 1, holder = EXCLUDED.holder, lease_until = EXCLUDED.lease_until
  WHERE l.lease_until <= clock_timestamp()
RETURNING counter`

// renewSQL and releaseSQL act only for the current holder with that token,
// while its lease lasts.
const renewSQL = `
UPDATE fencecheck_locks SET lease_until = clock_timestamp() + $4::float8 * interval '1 millisecond'
WHERE name = $1 AND holder = $2 AND counter = $3::numeric AND lease_until > clock_timestamp()`

const releaseSQL = `
UPDATE fencecheck_locks SET lease_until = '-infinity'
WHERE name = $1 AND holder = $2 AND counter = $3::numeric AND lease_until > clock_timestamp()`

// writeSQL is the seeds' conditional write: the row is updated only if its
// token is older (the DO UPDATE's WHERE), and a key's first write inserts.
// No row affected: stale.
const writeSQL = `
INSERT INTO fencecheck_resources AS r (key, token, value) VALUES ($1, $2::numeric, $3)
ON CONFLICT (key) DO UPDATE SET token = EXCLUDED.token, value = EXCLUDED.value
  WHERE r.token < EXCLUDED.token`

// plainWriteSQL writes whatever it is given; in Trigger mode the trigger
// decides.
const plainWriteSQL = `
INSERT INTO fencecheck_resources AS r (key, token, value) VALUES ($1, $2::numeric, $3)
ON CONFLICT (key) DO UPDATE SET token = EXCLUDED.token, value = EXCLUDED.value`

const markSQL = `SELECT token::text FROM fencecheck_resources WHERE key = $1`
const readSQL = `SELECT value, token::text FROM fencecheck_resources WHERE key = $1`

// Store is a fencing.Store kept entirely in one PostgreSQL database.
type Store struct {
	pool    *pgxpool.Pool
	mode    Mode
	timeout time.Duration

	schemaMu sync.Mutex
	schemaOK bool
}

var _ fencing.Store = (*Store)(nil)

// StoreOptions configure OpenStore.
type StoreOptions struct {
	// DSN is a libpq connection string or URL.
	DSN  string
	Mode Mode
	// Timeout bounds connecting and each operation (default 2 s). An
	// operation that times out is an error, which the server turns into
	// 5xx (info): it may have committed.
	Timeout time.Duration
	_       struct{}
}

// OpenStore makes a connection pool without connecting: the first
// operation fails while the database is down, and the adapter's health
// check says so. The schema is set up on first use.
func OpenStore(opts StoreOptions) (*Store, error) {
	if opts.Mode == "" {
		opts.Mode = Conditional
	}
	if _, err := ParseMode(string(opts.Mode)); err != nil {
		return nil, err
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 2 * time.Second
	}
	cfg, err := pgxpool.ParseConfig(opts.DSN)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	cfg.ConnConfig.ConnectTimeout = opts.Timeout
	cfg.MaxConns = 16
	// A connection that outlived a database restart would fail its next
	// statement after sending it, an unknown outcome. One idle for a while
	// (as every connection is across a restart) is pinged first, and a dead
	// one replaced before anything is sent. (go-sql-driver does the same
	// check for the mysql store.)
	cfg.ShouldPing = func(_ context.Context, p pgxpool.ShouldPingParams) bool {
		return p.IdleDuration > 100*time.Millisecond
	}
	cfg.HealthCheckPeriod = 5 * time.Second
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	return &Store{pool: pool, mode: opts.Mode, timeout: opts.Timeout}, nil
}

// ensureSchema creates the tables (and the trigger) once per process, or
// again after the database lost them (a wiped data directory).
func (s *Store) ensureSchema(ctx context.Context) error {
	s.schemaMu.Lock()
	defer s.schemaMu.Unlock()
	if s.schemaOK {
		return nil
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", schemaLock); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, schemaSQL); err != nil {
			return err
		}
		if s.mode == Trigger {
			if _, err := tx.Exec(ctx, triggerSQL); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("postgres schema: %w", err)
	}
	s.schemaOK = true
	return nil
}

// op bounds one operation and makes sure the schema is there.
func (s *Store) op(ctx context.Context) (context.Context, context.CancelFunc, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	if err := s.ensureSchema(ctx); err != nil {
		cancel()
		return nil, nil, err
	}
	return ctx, cancel, nil
}

// wrap names the operation and notices a lost schema.
func (s *Store) wrap(what string, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P01" { // undefined_table
		s.schemaMu.Lock()
		s.schemaOK = false
		s.schemaMu.Unlock()
	}
	return fmt.Errorf("postgres %s: %w", what, err)
}

func ms(ttl time.Duration) (int64, error) {
	if ttl <= 0 {
		return 0, fmt.Errorf("ttl %v: must be positive", ttl)
	}
	return int64((ttl + time.Millisecond - 1) / time.Millisecond), nil
}

func tokenText(t uint64) string { return strconv.FormatUint(t, 10) }

// Acquire implements fencing.Store.
func (s *Store) Acquire(ctx context.Context, lock, owner string, ttl time.Duration) (uint64, error) {
	m, err := ms(ttl)
	if err != nil {
		return 0, err
	}
	ctx, cancel, err := s.op(ctx)
	if err != nil {
		return 0, err
	}
	defer cancel()
	var token int64
	err = s.pool.QueryRow(ctx, acquireSQL, lock, owner, m).Scan(&token)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, fencing.ErrHeld
	}
	if err != nil {
		return 0, s.wrap("acquire "+lock, err)
	}
	return uint64(token), nil
}

// Renew implements fencing.Store.
func (s *Store) Renew(ctx context.Context, lock, owner string, token uint64, ttl time.Duration) error {
	m, err := ms(ttl)
	if err != nil {
		return err
	}
	return s.holderUpdate(ctx, "renew "+lock, renewSQL, lock, owner, tokenText(token), m)
}

// Release implements fencing.Store.
func (s *Store) Release(ctx context.Context, lock, owner string, token uint64) error {
	return s.holderUpdate(ctx, "release "+lock, releaseSQL, lock, owner, tokenText(token))
}

func (s *Store) holderUpdate(ctx context.Context, what, sql string, args ...any) error {
	ctx, cancel, err := s.op(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	tag, err := s.pool.Exec(ctx, sql, args...)
	if err != nil {
		return s.wrap(what, err)
	}
	if tag.RowsAffected() != 1 {
		return fencing.ErrLost
	}
	return nil
}

// Write implements fencing.Store.
func (s *Store) Write(ctx context.Context, key string, token uint64, value []byte) error {
	ctx, cancel, err := s.op(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	if s.mode == Trigger {
		_, err := s.pool.Exec(ctx, plainWriteSQL, key, tokenText(token), value)
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == staleCode {
			mark, perr := strconv.ParseUint(pgErr.Detail, 10, 64)
			if perr != nil {
				return fmt.Errorf("postgres write %s: the trigger's high-water mark %q: %w", key, pgErr.Detail, perr)
			}
			return &fencing.StaleError{HighWater: mark}
		}
		if err != nil {
			return s.wrap("write "+key, err)
		}
		return nil
	}
	tag, err := s.pool.Exec(ctx, writeSQL, key, tokenText(token), value)
	if err != nil {
		return s.wrap("write "+key, err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	// Rejected inside the database; the mark is read afterwards only to
	// report it (it may have grown since, never shrunk).
	var markText string
	if err := s.pool.QueryRow(ctx, markSQL, key).Scan(&markText); err != nil {
		return s.wrap("write "+key+": reading the high-water mark", err)
	}
	mark, err := strconv.ParseUint(markText, 10, 64)
	if err != nil {
		return fmt.Errorf("postgres write %s: bad high-water mark %q: %w", key, markText, err)
	}
	return &fencing.StaleError{HighWater: mark}
}

// Read implements fencing.Store.
func (s *Store) Read(ctx context.Context, key string) ([]byte, uint64, error) {
	ctx, cancel, err := s.op(ctx)
	if err != nil {
		return nil, 0, err
	}
	defer cancel()
	var value []byte
	var tokText string
	err = s.pool.QueryRow(ctx, readSQL, key).Scan(&value, &tokText)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, 0, fencing.ErrNotFound
	}
	if err != nil {
		return nil, 0, s.wrap("read "+key, err)
	}
	token, err := strconv.ParseUint(tokText, 10, 64)
	if err != nil {
		return nil, 0, fmt.Errorf("postgres read %s: bad token %q: %w", key, tokText, err)
	}
	return value, token, nil
}

// Health reports whether the database answers and holds the schema
// (fencing.HealthChecker): the adapter is not ready before.
func (s *Store) Health(ctx context.Context) error {
	ctx, cancel, err := s.op(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	if _, err := s.pool.Exec(ctx, "SELECT 1"); err != nil {
		return s.wrap("health", err)
	}
	return nil
}

// Close implements fencing.Store.
func (s *Store) Close() error {
	s.pool.Close()
	return nil
}
