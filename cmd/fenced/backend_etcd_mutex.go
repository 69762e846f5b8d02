package main

import (
	"context"

	"github.com/fencecheck/fencecheck/fencing"
	"github.com/fencecheck/fencecheck/targets/etcd"
)

func init() {
	registerBackend("etcd-mutex", Backend{
		Usage: "the adapter over etcd's own client lock (concurrency.Session + Mutex; token = the mutex key's create revision), writes as --backend etcd (--etcd-endpoints)",
		Open: func(ctx context.Context, cfg Config) (fencing.Store, fencing.ServerOptions, error) {
			opts, err := etcdStoreOptions("etcd-mutex", cfg)
			if err != nil {
				return nil, fencing.ServerOptions{}, err
			}
			st, err := etcd.OpenMutexStore(opts)
			if err != nil {
				return nil, fencing.ServerOptions{}, err
			}
			return st, cfg.ServerOptions(), nil
		},
	})
}
