package main

import (
	"context"
	"errors"
	"flag"
	"time"

	"github.com/fencecheck/fencecheck/fencing"
	"github.com/fencecheck/fencecheck/targets/postgres"
)

// postgresDSNEnv is the container-friendly fallback for --postgres-dsn.
const postgresDSNEnv = "FENCECHECK_POSTGRES_DSN"

func init() {
	var dsn, fence string
	var timeout time.Duration
	registerBackend("postgres", Backend{
		Usage: "the adapter over PostgreSQL: a lock row granted by one upsert, a conditional write or a trigger per write (--postgres-dsn)",
		Flags: func(fs *flag.FlagSet) {
			fs.StringVar(&dsn, "postgres-dsn", "", "PostgreSQL connection URL or string (env "+postgresDSNEnv+")")
			fs.StringVar(&fence, "postgres-fence", string(postgres.Conditional), "where the token check sits: conditional (the write's WHERE) or trigger (a BEFORE UPDATE trigger)")
			fs.DurationVar(&timeout, "postgres-timeout", 2*time.Second, "bound on each operation; one that times out answers 5xx (unknown outcome)")
		},
		Open: func(ctx context.Context, cfg Config) (fencing.Store, fencing.ServerOptions, error) {
			d := dsn
			if d == "" {
				d = cfg.Getenv(postgresDSNEnv)
			}
			if d == "" {
				return nil, fencing.ServerOptions{}, errors.New("--backend postgres needs --postgres-dsn URL")
			}
			mode, err := postgres.ParseMode(fence)
			if err != nil {
				return nil, fencing.ServerOptions{}, err
			}
			// The store reads no adapter clock: leases end by the
			// database's clock. The adapter does not wait for the
			// database; health answers 503 until it does.
			st, err := postgres.OpenStore(postgres.StoreOptions{DSN: d, Mode: mode, Timeout: timeout})
			if err != nil {
				return nil, fencing.ServerOptions{}, err
			}
			return st, cfg.ServerOptions(), nil
		},
	})
}
