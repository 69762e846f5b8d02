package postgres

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/fencing"
	"github.com/fencecheck/fencecheck/harness"
	"github.com/fencecheck/fencecheck/targets/adapted/adaptedtest"
	"github.com/fencecheck/fencecheck/targets/conform"
)

// reset empties the fencing tables (the shared cluster's runs each start
// from nothing, as on a fresh cluster).
func reset(ctx context.Context, addr string) error {
	conn, err := pgx.Connect(ctx, DSN(addr))
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, "TRUNCATE fencecheck_locks, fencecheck_resources")
	return err
}

// sql opens a direct connection to the target's database from the host.
func sql(t *testing.T, s *adaptedtest.Shared) *pgx.Conn {
	t.Helper()
	addr, err := s.ServerAddr()
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, DSN(addr))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func opCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// The Fencing API contract, through both adapters.
func conformant(t *testing.T, eps harness.Endpoints) {
	t.Helper()
	rep, err := conform.Check(opCtx(t), eps, conform.Options{Semantics: Semantics})
	require.NoError(t, err)
	var b testWriter
	rep.Print(&b)
	assert.True(t, rep.Conformant(), "%s", b)
}

type testWriter []byte

func (w *testWriter) Write(p []byte) (int, error) { *w = append(*w, p...); return len(p), nil }
func (w testWriter) String() string               { return string(w) }

// The token check sits in the database: a write through one adapter raises
// the mark that the other adapter's stale write then hits, and the row in
// the table is the only state there is.
func checkInDatabase(t *testing.T, s *adaptedtest.Shared) {
	t.Helper()
	ctx := opCtx(t)
	a := fencing.NewClient(s.Endpoints().Issuers[0].URL, nil)
	b := fencing.NewClient(s.Endpoints().Resources[1].URL, nil)
	acq := a.Acquire(ctx, "db-lock", "c1", 5*time.Second)
	require.Equal(t, fencing.Ok, acq.Outcome, "%+v", acq)
	require.Equal(t, fencing.Ok, a.Write(ctx, "db-key", "7", []byte("v7")).Outcome)
	stale := b.Write(ctx, "db-key", "7", []byte("again"))
	assert.Equal(t, fencing.Fail, stale.Outcome)
	assert.Equal(t, "stale", stale.Error)
	assert.Equal(t, "7", stale.HighWater)
	big := strconv.FormatUint(1<<64-1, 10)
	require.Equal(t, fencing.Ok, b.Write(ctx, "db-key", big, []byte("max")).Outcome, "tokens are unsigned 64-bit")
	assert.Equal(t, big, b.Write(ctx, "db-key", "8", []byte("late")).HighWater)

	conn := sql(t, s)
	var token, value string
	require.NoError(t, conn.QueryRow(ctx, "SELECT token::text, convert_from(value, 'UTF8') FROM fencecheck_resources WHERE key = 'db-key'").Scan(&token, &value))
	assert.Equal(t, big, token)
	assert.Equal(t, "max", value)
	var counter int64
	var holder string
	require.NoError(t, conn.QueryRow(ctx, "SELECT counter, holder FROM fencecheck_locks WHERE name = 'db-lock'").Scan(&counter, &holder))
	assert.Equal(t, acq.Token, strconv.FormatInt(counter, 10), "the token is the lock row's counter")
	assert.Equal(t, "c1", holder)
}

// killKeepsAcknowledged kills the database right after n acknowledged
// acquires and returns how many of their counter increments survived.
func acquiresSurvivingKill(t *testing.T, s *adaptedtest.Shared, n int) int64 {
	t.Helper()
	ctx := opCtx(t)
	c := fencing.NewClient(s.Endpoints().Issuers[0].URL, nil)
	for i := 0; i < n; i++ {
		lock := "kill-" + strconv.Itoa(i%4)
		r := c.Acquire(ctx, lock, "c", 10*time.Second)
		require.Equal(t, fencing.Ok, r.Outcome, "%+v", r)
		require.Equal(t, fencing.Ok, c.Release(ctx, lock, "c", r.Token).Outcome)
	}
	require.NoError(t, s.KillNode(ctx, ServerNode))
	require.NoError(t, s.StartNode(ctx, ServerNode, false))
	var total int64
	require.NoError(t, sql(t, s).QueryRow(ctx, "SELECT coalesce(sum(counter), 0) FROM fencecheck_locks WHERE name LIKE 'kill-%'").Scan(&total))
	return total
}

// checkStore runs the store contract from the host against the target's
// database, in the target's mode.
func checkStore(t *testing.T, s *adaptedtest.Shared, mode Mode) {
	st, err := OpenStore(StoreOptions{DSN: DSN(mustAddr(t, s)), Mode: mode})
	require.NoError(t, err)
	defer st.Close()
	adaptedtest.CheckStore(t, st, "store-")
}

var nemeses = []string{"pause", "restart", "partition", "clock", "strip", "delay"}

// runTime is each fault-injected run's main phase: short, since make check
// has a time budget, yet long enough for several faults of each kind.
const runTime = 5 * time.Second

// One postgres cluster serves every subtest (a database and two adapters
// take longer to start than a short run lasts); each run starts from empty
// tables, and the cluster leaves nothing behind at the end.
func TestPostgres(t *testing.T) {
	s := adaptedtest.StartShared(t, New(Options{}), reset)
	t.Run("conformance", func(t *testing.T) { conformant(t, s.Endpoints()) })
	t.Run("check in the database", func(t *testing.T) { checkInDatabase(t, s) })
	t.Run("store", func(t *testing.T) { checkStore(t, s, Conditional) })
	t.Run("kill -9 keeps every acknowledged commit", func(t *testing.T) {
		assert.EqualValues(t, 200, acquiresSurvivingKill(t, s, 200))
	})
	for i, n := range nemeses {
		t.Run("valid under "+n, func(t *testing.T) {
			s.RequireValid(t, s.Run(t, n, uint64(11+i), runTime), n)
		})
	}
}

// postgres-trigger: the adapters write without a condition and the
// database's trigger rejects what is stale, with the same verdicts.
func TestPostgresTrigger(t *testing.T) {
	s := adaptedtest.StartShared(t, New(Options{Mode: Trigger}), reset)
	t.Run("conformance", func(t *testing.T) { conformant(t, s.Endpoints()) })
	t.Run("check in the database", func(t *testing.T) { checkInDatabase(t, s) })
	t.Run("store", func(t *testing.T) { checkStore(t, s, Trigger) })
	// The check is the trigger's: a plain UPDATE from the host, not through
	// any adapter, is refused with its SQLSTATE and the mark in DETAIL.
	t.Run("the trigger refuses a stale update", func(t *testing.T) {
		ctx := opCtx(t)
		conn := sql(t, s)
		_, err := conn.Exec(ctx, "INSERT INTO fencecheck_resources (key, token, value) VALUES ('trig', 5, 'v5')")
		require.NoError(t, err)
		_, err = conn.Exec(ctx, "UPDATE fencecheck_resources SET token = 5, value = 'replay' WHERE key = 'trig'")
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr)
		assert.Equal(t, staleCode, pgErr.Code)
		assert.Equal(t, "5", pgErr.Detail)
		_, err = conn.Exec(ctx, "UPDATE fencecheck_resources SET token = 6, value = 'v6' WHERE key = 'trig'")
		assert.NoError(t, err, "a newer token passes")
	})
	for i, n := range nemeses {
		t.Run("valid under "+n, func(t *testing.T) {
			// The variant differs from postgres only in where the write's
			// check sits: shorter runs keep make check in its budget.
			s.RequireValid(t, s.Run(t, n, uint64(31+i), runTime-time.Second), n)
		})
	}
}

// postgres-async: with synchronous_commit = off, a kill -9 right after
// acknowledged commits loses some of them (measured from the database after
// the restart), and a run under restart is invalid.
func TestPostgresAsync(t *testing.T) {
	s := adaptedtest.StartShared(t, New(Options{Async: true}), reset)
	t.Run("kill -9 loses acknowledged commits", func(t *testing.T) {
		// The WAL writer may happen to have written everything just before
		// the kill; three tries make that a one-in-a-million miss.
		for try := 1; try <= 3; try++ {
			require.NoError(t, reset(opCtx(t), mustAddr(t, s)))
			kept := acquiresSurvivingKill(t, s, 200)
			t.Logf("try %d: %d of 200 acknowledged acquires survived the kill", try, kept)
			if kept < 200 {
				return
			}
		}
		t.Fatal("no acknowledged commit was lost in three kills: synchronous_commit = off did not take effect")
	})
	t.Run("invalid under restart", func(t *testing.T) {
		v := s.Run(t, "restart", 3, 8*time.Second)
		assert.Equal(t, checkers.Invalid, v.Verdict, "gate: %v", v.GateReasons)
		assert.Equal(t, 1, v.ExitCode)
		kinds := map[string]int{}
		for _, a := range v.Anomalies() {
			kinds[a.Kind]++
		}
		t.Logf("anomalies: %v", kinds)
		assert.Positive(t, kinds["duplicate-token"]+kinds["token-regression"]+kinds["stale-read"]+kinds["stale-write-accepted"],
			"lost commits show as reissued tokens or forgotten writes: %v", kinds)
	})
}

func mustAddr(t *testing.T, s *adaptedtest.Shared) string {
	addr, err := s.ServerAddr()
	require.NoError(t, err)
	return addr
}
