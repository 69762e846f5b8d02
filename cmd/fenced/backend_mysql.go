package main

import (
	"context"
	"errors"
	"flag"
	"time"

	"github.com/fencecheck/fencecheck/fencing"
	"github.com/fencecheck/fencecheck/targets/mysql"
)

// mysqlDSNEnv is the container-friendly fallback for --mysql-dsn.
const mysqlDSNEnv = "FENCECHECK_MYSQL_DSN"

func init() {
	var dsn string
	var timeout time.Duration
	registerBackend("mysql", Backend{
		Usage: "the adapter over MySQL/MariaDB (InnoDB): a lock row granted by one upsert, one conditional upsert per write (--mysql-dsn)",
		Flags: func(fs *flag.FlagSet) {
			fs.StringVar(&dsn, "mysql-dsn", "", "go-sql-driver DSN user@tcp(host:port)/database (env "+mysqlDSNEnv+")")
			fs.DurationVar(&timeout, "mysql-timeout", 2*time.Second, "bound on each operation; one that times out answers 5xx (unknown outcome)")
		},
		Open: func(ctx context.Context, cfg Config) (fencing.Store, fencing.ServerOptions, error) {
			d := dsn
			if d == "" {
				d = cfg.Getenv(mysqlDSNEnv)
			}
			if d == "" {
				return nil, fencing.ServerOptions{}, errors.New("--backend mysql needs --mysql-dsn user@tcp(host:port)/database")
			}
			// The store reads no adapter clock: leases end by the
			// database's clock. The adapter does not wait for the
			// database; health answers 503 until it does.
			st, err := mysql.OpenStore(mysql.StoreOptions{DSN: d, Timeout: timeout})
			if err != nil {
				return nil, fencing.ServerOptions{}, err
			}
			return st, cfg.ServerOptions(), nil
		},
	})
}
