package main

import (
	"context"
	"errors"
	"flag"
	"strings"

	"github.com/fencecheck/fencecheck/fencing"
	"github.com/fencecheck/fencecheck/targets/etcd"
)

// etcdEndpointsEnv is the container-friendly fallback for --etcd-endpoints.
const etcdEndpointsEnv = "FENCECHECK_ETCD_ENDPOINTS"

func init() {
	var endpoints string
	registerBackend("etcd", Backend{
		Usage: "the adapter over etcd: leases + create-if-absent lock keys, one transaction per write (--etcd-endpoints)",
		Flags: func(fs *flag.FlagSet) {
			fs.StringVar(&endpoints, "etcd-endpoints", "", "comma-separated etcd client URLs (env "+etcdEndpointsEnv+")")
		},
		Open: func(ctx context.Context, cfg Config) (fencing.Store, fencing.ServerOptions, error) {
			eps := endpoints
			if eps == "" {
				eps = cfg.Getenv(etcdEndpointsEnv)
			}
			if eps == "" {
				return nil, fencing.ServerOptions{}, errors.New("--backend etcd needs --etcd-endpoints URL,...")
			}
			// The etcd store reads no clock: leases live in etcd, on its
			// members' monotonic clocks.
			st, err := etcd.OpenStore(etcd.StoreOptions{Endpoints: strings.Split(eps, ",")})
			if err != nil {
				return nil, fencing.ServerOptions{}, err
			}
			return st, cfg.ServerOptions(), nil
		},
	})
}
