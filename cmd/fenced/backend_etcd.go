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

// etcdEndpoints is --etcd-endpoints, shared by the etcd backends.
var etcdEndpoints string

// etcdStoreOptions reads the etcd backends' common settings.
func etcdStoreOptions(backend string, cfg Config) (etcd.StoreOptions, error) {
	eps := etcdEndpoints
	if eps == "" {
		eps = cfg.Getenv(etcdEndpointsEnv)
	}
	if eps == "" {
		return etcd.StoreOptions{}, errors.New("--backend " + backend + " needs --etcd-endpoints URL,...")
	}
	return etcd.StoreOptions{Endpoints: strings.Split(eps, ",")}, nil
}

func init() {
	registerBackend("etcd", Backend{
		Usage: "the adapter over etcd: leases + create-if-absent lock keys, one transaction per write (--etcd-endpoints)",
		Flags: func(fs *flag.FlagSet) {
			fs.StringVar(&etcdEndpoints, "etcd-endpoints", "", "comma-separated etcd client URLs (env "+etcdEndpointsEnv+")")
		},
		Open: func(ctx context.Context, cfg Config) (fencing.Store, fencing.ServerOptions, error) {
			opts, err := etcdStoreOptions("etcd", cfg)
			if err != nil {
				return nil, fencing.ServerOptions{}, err
			}
			// The etcd store reads no clock: leases live in etcd, on its
			// members' monotonic clocks.
			st, err := etcd.OpenStore(opts)
			if err != nil {
				return nil, fencing.ServerOptions{}, err
			}
			return st, cfg.ServerOptions(), nil
		},
	})
}
