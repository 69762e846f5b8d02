package harness

import (
	"context"
	"sync"
	"time"

	"github.com/fencecheck/fencecheck/fencing"
	"github.com/fencecheck/fencecheck/history"
	"github.com/fencecheck/fencecheck/workloads"
)

// conn adapts the Fencing API client to the workload's Conn.
type conn struct {
	node string
	c    *fencing.Client
}

// conns returns one Conn per endpoint; all share one HTTP transport so idle
// connections are reused across clients.
func conns(eps []Endpoint) []workloads.Conn {
	hc := sharedHTTP()
	out := make([]workloads.Conn, 0, len(eps))
	for _, e := range eps {
		out = append(out, conn{node: e.Node, c: fencing.NewClient(e.URL, hc)})
	}
	return out
}

// sharedHTTP is the one HTTP client (and connection pool) of the process.
var sharedHTTP = sync.OnceValue(fencing.DefaultHTTPClient)

func reply(r fencing.Result) workloads.Reply {
	t := history.Info
	switch r.Outcome {
	case fencing.Ok:
		t = history.Ok
	case fencing.Fail:
		t = history.Fail
	}
	rep := workloads.Reply{Type: t, Token: r.Token, Error: r.Error, HighWater: r.HighWater, TTL: r.TTL}
	if r.Found {
		rep.Value = string(r.Value)
	}
	return rep
}

func (c conn) Node() string { return c.node }
func (c conn) Acquire(ctx context.Context, lock, owner string, ttl time.Duration) workloads.Reply {
	return reply(c.c.Acquire(ctx, lock, owner, ttl))
}
func (c conn) Renew(ctx context.Context, lock, owner, token string, ttl time.Duration) workloads.Reply {
	return reply(c.c.Renew(ctx, lock, owner, token, ttl))
}
func (c conn) Release(ctx context.Context, lock, owner, token string) workloads.Reply {
	return reply(c.c.Release(ctx, lock, owner, token))
}
func (c conn) Write(ctx context.Context, key, token string, value []byte) workloads.Reply {
	return reply(c.c.Write(ctx, key, token, value))
}
func (c conn) Read(ctx context.Context, key string) workloads.Reply {
	r := c.c.Read(ctx, key)
	rep := reply(r)
	if !r.Found {
		rep.Token = "" // never written: no value, no token
	}
	return rep
}
