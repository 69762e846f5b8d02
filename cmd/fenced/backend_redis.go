package main

import (
	"context"
	"errors"
	"flag"
	"time"

	"github.com/fencecheck/fencecheck/fencing"
	"github.com/fencecheck/fencecheck/targets/redis"
)

// redisAddrEnv is the container-friendly fallback for --redis-addr.
const redisAddrEnv = "FENCECHECK_REDIS_ADDR"

func init() {
	var addr string
	var timeout time.Duration
	registerBackend("redis", Backend{
		Usage: "the adapter over one Redis server: Lua SET NX PX + INCR per acquire, one Lua compare-and-set per write (--redis-addr)",
		Flags: func(fs *flag.FlagSet) {
			fs.StringVar(&addr, "redis-addr", "", "Redis host:port (env "+redisAddrEnv+")")
			fs.DurationVar(&timeout, "redis-timeout", 2*time.Second, "bound on each Redis command; a command that times out answers 5xx (unknown outcome)")
		},
		Open: func(ctx context.Context, cfg Config) (fencing.Store, fencing.ServerOptions, error) {
			a := addr
			if a == "" {
				a = cfg.Getenv(redisAddrEnv)
			}
			if a == "" {
				return nil, fencing.ServerOptions{}, errors.New("--backend redis needs --redis-addr HOST:PORT")
			}
			// The Redis store reads no adapter clock: leases are Redis TTLs,
			// on Redis's own (skewable) clock. The adapter does not wait for
			// Redis; health answers 503 until Redis does.
			return redis.OpenStore(redis.StoreOptions{Addr: a, Timeout: timeout}), cfg.ServerOptions(), nil
		},
	})
}
