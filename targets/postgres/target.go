package postgres

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/fencecheck/fencecheck/targets/adapted"
)

// Node names and ports of a PostgreSQL target.
const (
	ServerNode = "postgres-1"
	Port       = 5432
	// User and Database are what the adapters connect as and to (initdb
	// makes the user the superuser; the database is initdb's own).
	User     = "fencecheck"
	Database = "postgres"
	pgData   = adapted.DataDir + "/pgdata"
	// initMarker is written once initdb has finished, so a restart never
	// runs initdb again and a wiped data folder does.
	initMarker = pgData + "/.fencecheck-initdb-done"
)

// Options select a PostgreSQL target.
type Options struct {
	// Mode is where the resource's token check sits (default Conditional).
	Mode Mode
	// Async runs the database with synchronous_commit = off: a commit is
	// acknowledged before its WAL reaches the disk, so a crash can lose
	// acknowledged writes (and lock grants).
	Async bool
	_     struct{}
}

// Name is the target's name for these options.
func (o Options) Name() string {
	switch {
	case o.Async:
		return "postgres-async"
	case o.Mode == Trigger:
		return "postgres-trigger"
	}
	return "postgres"
}

// WALWriterDelay is the async target's wal_writer_delay. With
// synchronous_commit = off, a commit's WAL sits in shared memory until the
// WAL writer writes it (whenever a full WAL page is ready, and at least
// every wal_writer_delay), and a kill -9 of the container loses what was
// not yet written; the page cache keeps what was. PostgreSQL's default is
// 200 ms.
const WALWriterDelay = "200ms"

// settings are the server's settings; the durable ones are PostgreSQL's
// defaults, spelled out because the targets differ in them.
func (o Options) settings() []string {
	s := []string{
		"listen_addresses=0.0.0.0",
		"port=" + strconv.Itoa(Port),
		"unix_socket_directories=/tmp",
		"hba_file=" + hbaFile,
		"shared_buffers=32MB",
		"max_connections=50",
		"TimeZone=UTC",
		"log_timezone=UTC",
		"fsync=on",
		"full_page_writes=on",
	}
	if o.Async {
		return append(s, "synchronous_commit=off", "wal_writer_delay="+WALWriterDelay)
	}
	return append(s, "synchronous_commit=on")
}

// serverCmd initialises the data folder on first start (initdb), then runs
// postgres in the foreground, as PID 1 of its container.
func (o Options) serverCmd() []string {
	initdb := fmt.Sprintf("%s/initdb --pgdata=%s --username=%s --auth=trust --locale=C --encoding=UTF8", binDir, pgData, User)
	run := []string{"exec", binDir + "/postgres", "-D", pgData}
	for _, kv := range o.settings() {
		run = append(run, "-c", kv)
	}
	script := fmt.Sprintf("test -f %s || { %s && : > %s; } || exit 1; %s", initMarker, initdb, initMarker, strings.Join(run, " "))
	return []string{"/bin/sh", "-c", script}
}

// DSN is the adapters' connection string for a server at addr.
func DSN(addr string) string {
	return fmt.Sprintf("postgres://%s@%s/%s?sslmode=disable", User, addr, Database)
}

// ready succeeds once the database takes a query.
func ready(ctx context.Context, addr string) error {
	conn, err := pgx.Connect(ctx, DSN(addr))
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, "SELECT 1")
	return err
}

// New returns a PostgreSQL target: Debian's PostgreSQL 15 in a container
// (data on the host, kept across restarts) behind two adapters.
func New(o Options) *adapted.Target {
	if o.Mode == "" {
		o.Mode = Conditional
	}
	return adapted.New(adapted.Options{
		Name:      o.Name(),
		Semantics: Semantics,
		Server: adapted.Server{
			Node:  ServerNode,
			Role:  "postgres",
			Port:  Port,
			Image: ImageName,
			Cmd:   o.serverCmd(),
			Env:   []string{"TZ=UTC"},
			Skew:  true,
			Ready: ready,
			// The data folder belongs to the account the server runs as.
			NoLayer: "the lazyfs layer is not yet tried with PostgreSQL",
			Product: "PostgreSQL", HostFile: binDir + "/postgres",
		},
		AdapterArgs: []string{"--backend", "postgres", "--postgres-dsn", DSN("{addr:" + ServerNode + "}"), "--postgres-fence", string(o.Mode)},
	})
}
