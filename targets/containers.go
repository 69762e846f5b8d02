package targets

import (
	"github.com/fencecheck/fencecheck/harness"
	"github.com/fencecheck/fencecheck/targets/etcd"
	"github.com/fencecheck/fencecheck/targets/redis"
)

func init() {
	register("etcd", "3 etcd members + 2 fenced adapters in containers (token = lock key's create revision, global scope)",
		func(o Options) (harness.Target, error) { return etcd.New(etcd.Options{Log: o.Log}), nil })
	register("redis", "Redis with AOF appendfsync always + 2 fenced adapters in containers (Lua scripts, per-lock tokens)",
		func(o Options) (harness.Target, error) { return redis.Durable(), nil })
	register("redis-volatile", "Redis with no persistence + 2 adapters: the lock counter resets on restart (expected invalid under restart)",
		func(o Options) (harness.Target, error) { return redis.VolatileTarget(), nil })
}
