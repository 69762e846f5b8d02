package main

import (
	"context"
	"errors"
	"flag"
	"strings"

	"github.com/fencecheck/fencecheck/fencing"
	"github.com/fencecheck/fencecheck/targets/zookeeper"
)

// zkServersEnv is the container-friendly fallback for --zk-servers.
const zkServersEnv = "FENCECHECK_ZK_SERVERS"

func init() {
	var servers, prefix string
	registerBackend("zookeeper", Backend{
		Usage: "the adapter over a ZooKeeper ensemble: the lock recipe (token = the lock node's creation zxid, lease = a session), a version-conditional set per write (--zk-servers)",
		Flags: func(fs *flag.FlagSet) {
			fs.StringVar(&servers, "zk-servers", "", "comma-separated ZooKeeper client addresses host:port (env "+zkServersEnv+")")
			fs.StringVar(&prefix, "zk-prefix", "/fence", "the znode every lock and resource lives under")
		},
		Open: func(ctx context.Context, cfg Config) (fencing.Store, fencing.ServerOptions, error) {
			s := servers
			if s == "" {
				s = cfg.Getenv(zkServersEnv)
			}
			if s == "" {
				return nil, fencing.ServerOptions{}, errors.New("--backend zookeeper needs --zk-servers HOST:PORT,...")
			}
			// The store reads no adapter clock: sessions expire on the
			// ensemble's monotonic clocks. It does not wait for the
			// ensemble; health answers 503 until a quorum answers.
			st, err := zookeeper.OpenStore(zookeeper.StoreOptions{Servers: strings.Split(s, ","), Prefix: prefix, Log: cfg.Log})
			if err != nil {
				return nil, fencing.ServerOptions{}, err
			}
			return st, cfg.ServerOptions(), nil
		},
	})
}
