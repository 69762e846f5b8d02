package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log"
	"strconv"
	"strings"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/fencecheck/fencecheck/targets/adapted"
)

// Node names and ports of the MariaDB target.
const (
	ServerNode = "mysql-1"
	Port       = 3306
	// User and Database are what the adapters connect as and to (made by
	// the bootstrap SQL).
	User     = "fencecheck"
	Database = "fencecheck"
	// initMarker is written once the bootstrap has finished, so a restart
	// never bootstraps again and a wiped data folder does.
	initMarker = adapted.DataDir + "/.fencecheck-bootstrap-done"
)

// settings are the server's settings. The durable ones are InnoDB's
// defaults, spelled out: every commit flushes and fsyncs the redo log
// (innodb_flush_log_at_trx_commit = 1), pages go through the doublewrite
// buffer (torn pages), and there is no binary log (nothing to sync).
// innodb_flush_method = fsync rather than 10.11's O_DIRECT default, so that
// the data folder may sit on a filesystem without O_DIRECT (a FUSE layer);
// native AIO is off because Docker's seccomp profile may refuse io_uring.
var settings = []string{
	"--datadir=" + adapted.DataDir,
	"--bind-address=0.0.0.0",
	"--port=" + strconv.Itoa(Port),
	"--socket=/tmp/mysqld.sock",
	"--pid-file=/tmp/mysqld.pid",
	"--skip-name-resolve",
	"--skip-log-bin",
	"--default-storage-engine=InnoDB",
	"--innodb-flush-log-at-trx-commit=1",
	"--innodb-doublewrite=1",
	"--innodb-flush-method=fsync",
	"--innodb-use-native-aio=0",
	"--innodb-buffer-pool-size=32M",
	"--innodb-log-file-size=16M",
	"--max-connections=100",
	"--character-set-server=utf8mb4",
}

// serverCmd bootstraps the data folder on first start (mariadbd
// --bootstrap with the system tables on stdin), then runs mariadbd in the
// foreground, as PID 1 of its container.
func serverCmd() []string {
	boot := fmt.Sprintf("%s --no-defaults --bootstrap --datadir=%s --log-warnings=0 --enforce-storage-engine= --innodb-use-native-aio=0 --innodb-log-file-size=16M --max-allowed-packet=8M < %s",
		serverBinary, adapted.DataDir, BootstrapSQL)
	run := append([]string{"exec", serverBinary, "--no-defaults"}, settings...)
	script := fmt.Sprintf("test -f %s || { %s && : > %s; } || exit 1; %s", initMarker, boot, initMarker, strings.Join(run, " "))
	return []string{"/bin/sh", "-c", script}
}

func config(addr string) *gomysql.Config {
	cfg := gomysql.NewConfig()
	cfg.User = User
	cfg.Net = "tcp"
	cfg.Addr = addr
	cfg.DBName = Database
	return cfg
}

// DSN is the adapters' connection string for a server at addr.
func DSN(addr string) string { return config(addr).FormatDSN() }

// Open connects to the database at addr from the host (the driver's own
// log lines, about connections the starting server drops, are discarded:
// the caller gets the error).
func Open(addr string) (*sql.DB, error) {
	cfg := config(addr)
	cfg.Logger = log.New(io.Discard, "", 0)
	conn, err := gomysql.NewConnector(cfg)
	if err != nil {
		return nil, err
	}
	return sql.OpenDB(conn), nil
}

// ready succeeds once the database takes a query.
func ready(ctx context.Context, addr string) error {
	db, err := Open(addr)
	if err != nil {
		return err
	}
	defer db.Close()
	_, err = db.ExecContext(ctx, "SELECT 1")
	return err
}

// New returns the "mysql" target: Debian's MariaDB 10.11 (InnoDB) in a
// container, data on the host and kept across restarts, behind two adapters.
func New() *adapted.Target {
	return adapted.New(adapted.Options{
		Name:      "mysql",
		Semantics: Semantics,
		Server: adapted.Server{
			Node:  ServerNode,
			Role:  "mysql",
			Port:  Port,
			Image: ImageName,
			Cmd:   serverCmd(),
			Env:   []string{"TZ=UTC"},
			Skew:  true,
			Ready: ready,
			// The data folder belongs to the account the server runs as.
			NoLayer: "the lazyfs layer is not yet tried with MariaDB",
			Product: "MariaDB", HostFile: serverBinary,
		},
		AdapterArgs: []string{"--backend", "mysql", "--mysql-dsn", DSN("{addr:" + ServerNode + "}")},
	})
}
