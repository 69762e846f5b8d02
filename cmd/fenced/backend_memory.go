package main

import (
	"context"
	"errors"

	"github.com/fencecheck/fencecheck/fencing"
	"github.com/fencecheck/fencecheck/targets/memory"
)

func init() {
	registerBackend("memory", Backend{
		Usage: "the reference: durable file-backed state in --data (bug switches: --bug)",
		Bugs:  true,
		Open: func(ctx context.Context, cfg Config) (fencing.Store, fencing.ServerOptions, error) {
			if cfg.Data == "" {
				return nil, fencing.ServerOptions{}, errors.New("--backend memory needs --data DIR")
			}
			bugs, err := memory.ParseBugs(cfg.Bugs...)
			if err != nil {
				return nil, fencing.ServerOptions{}, err
			}
			if bugs.Paired() {
				return nil, fencing.ServerOptions{}, errors.New("split-issuers, one-way-failover and rejoin-empty run two replicas in one process: use the embedded memory target")
			}
			st, err := memory.OpenStore(cfg.Data, memory.StoreOptions{Clock: cfg.Clock, Bugs: bugs})
			if err != nil {
				return nil, fencing.ServerOptions{}, err
			}
			return st, memory.ServerOptions(cfg.SealKey, bugs), nil
		},
	})
}
