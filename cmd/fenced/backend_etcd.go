package main

import (
	"context"
	"errors"
	"flag"
	"strings"

	"github.com/fencecheck/fencecheck/targets/etcd"
	"github.com/fencecheck/fencecheck/targets/fenced"
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
		Open: func(ctx context.Context, cfg Config) (fenced.Store, fenced.ServerOptions, error) {
			eps := endpoints
			if eps == "" {
				eps = cfg.Getenv(etcdEndpointsEnv)
			}
			if eps == "" {
				return nil, fenced.ServerOptions{}, errors.New("--backend etcd needs --etcd-endpoints URL,...")
			}
			// The etcd store reads no clock: leases live in etcd, on its
			// members' monotonic clocks.
			st, err := etcd.OpenStore(etcd.StoreOptions{Endpoints: strings.Split(eps, ",")})
			if err != nil {
				return nil, fenced.ServerOptions{}, err
			}
			return st, cfg.ServerOptions(), nil
		},
	})
}
