package mysql

import (
	"context"
	"database/sql"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/fencing"
	"github.com/fencecheck/fencecheck/targets/adapted/adaptedtest"
	"github.com/fencecheck/fencecheck/targets/conform"
)

// reset empties the fencing tables (the shared cluster's runs each start
// from nothing, as on a fresh cluster).
func reset(ctx context.Context, addr string) error {
	db, err := Open(addr)
	if err != nil {
		return err
	}
	defer db.Close()
	for _, q := range []string{"DELETE FROM fencecheck_locks", "DELETE FROM fencecheck_resources"} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return err
		}
	}
	return nil
}

func direct(t *testing.T, s *adaptedtest.Shared) *sql.DB {
	t.Helper()
	addr, err := s.ServerAddr()
	require.NoError(t, err)
	db, err := Open(addr)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	return db
}

func opCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

type testWriter []byte

func (w *testWriter) Write(p []byte) (int, error) { *w = append(*w, p...); return len(p), nil }
func (w testWriter) String() string               { return string(w) }

var nemeses = []string{"pause", "restart", "partition", "clock", "strip", "delay"}

// One MariaDB cluster serves every subtest; each run starts from empty
// tables, and the cluster leaves nothing behind at the end.
func TestMySQL(t *testing.T) {
	s := adaptedtest.StartShared(t, New(), reset)

	t.Run("conformance", func(t *testing.T) {
		rep, err := conform.Check(opCtx(t), s.Endpoints(), conform.Options{Semantics: Semantics})
		require.NoError(t, err)
		var b testWriter
		rep.Print(&b)
		assert.True(t, rep.Conformant(), "%s", b)
	})

	// The checks sit in the database: tokens come from the lock row's
	// counter (also when an expired lease is taken over: the counter comes
	// back through LAST_INSERT_ID), the mark one adapter raised stops the
	// other's write, and keys differing only in case are two keys.
	t.Run("check in the database", func(t *testing.T) {
		ctx := opCtx(t)
		a := fencing.NewClient(s.Endpoints().Issuers[0].URL, nil)
		b := fencing.NewClient(s.Endpoints().Issuers[1].URL, nil)
		const lease = 1500 * time.Millisecond // long enough to see "held" on a loaded machine
		first := a.Acquire(ctx, "db-lock", "c1", lease)
		require.Equal(t, fencing.Ok, first.Outcome, "%+v", first)
		assert.Equal(t, "1", first.Token)
		assert.Equal(t, "held", b.Acquire(ctx, "db-lock", "c2", time.Second).Error)
		time.Sleep(lease + 100*time.Millisecond)
		second := b.Acquire(ctx, "db-lock", "c2", 5*time.Second)
		require.Equal(t, fencing.Ok, second.Outcome, "an expired lease is free: %+v", second)
		assert.Equal(t, "2", second.Token)
		assert.Equal(t, "lost", a.Release(ctx, "db-lock", "c1", first.Token).Error)

		require.Equal(t, fencing.Ok, a.Write(ctx, "db-key", "7", []byte("v7")).Outcome)
		stale := b.Write(ctx, "db-key", "7", []byte("again"))
		assert.Equal(t, "stale", stale.Error)
		assert.Equal(t, "7", stale.HighWater)
		big := strconv.FormatUint(1<<64-1, 10)
		require.Equal(t, fencing.Ok, b.Write(ctx, "db-key", big, []byte("max")).Outcome, "tokens are unsigned 64-bit")
		assert.Equal(t, big, a.Write(ctx, "db-key", "8", []byte("late")).HighWater)
		require.Equal(t, fencing.Ok, a.Write(ctx, "DB-KEY", "1", []byte("other")).Outcome, "keys compare byte for byte")

		db := direct(t, s)
		var token uint64
		var value string
		require.NoError(t, db.QueryRowContext(ctx, "SELECT token, value FROM fencecheck_resources WHERE k = 'db-key'").Scan(&token, &value))
		assert.Equal(t, uint64(1<<64-1), token)
		assert.Equal(t, "max", value)
		var counter uint64
		var holder string
		require.NoError(t, db.QueryRowContext(ctx, "SELECT counter, holder FROM fencecheck_locks WHERE name = 'db-lock'").Scan(&counter, &holder))
		assert.Equal(t, second.Token, strconv.FormatUint(counter, 10), "the token is the lock row's counter")
		assert.Equal(t, "c2", holder)
	})

	t.Run("store", func(t *testing.T) {
		addr, err := s.ServerAddr()
		require.NoError(t, err)
		st, err := OpenStore(StoreOptions{DSN: DSN(addr)})
		require.NoError(t, err)
		defer st.Close()
		adaptedtest.CheckStore(t, st, "store-")
	})

	t.Run("kill -9 keeps every acknowledged commit", func(t *testing.T) {
		ctx := opCtx(t)
		c := fencing.NewClient(s.Endpoints().Issuers[0].URL, nil)
		const n = 200
		for i := 0; i < n; i++ {
			lock := "kill-" + strconv.Itoa(i%4)
			r := c.Acquire(ctx, lock, "c", 10*time.Second)
			require.Equal(t, fencing.Ok, r.Outcome, "%+v", r)
			require.Equal(t, fencing.Ok, c.Release(ctx, lock, "c", r.Token).Outcome)
		}
		require.NoError(t, s.KillNode(ctx, ServerNode))
		require.NoError(t, s.StartNode(ctx, ServerNode, false))
		var total int64
		require.NoError(t, direct(t, s).QueryRowContext(ctx, "SELECT COALESCE(SUM(counter), 0) FROM fencecheck_locks WHERE name LIKE 'kill-%'").Scan(&total))
		assert.EqualValues(t, n, total)
	})

	for i, n := range nemeses {
		t.Run("valid under "+n, func(t *testing.T) {
			s.RequireValid(t, s.Run(t, n, uint64(21+i), 5*time.Second), n)
		})
	}
}
