package redis

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/fencecheck/fencecheck/nemesis"
)

func TestTargetNamesAndSemantics(t *testing.T) {
	assert.Equal(t, "redis", Durable().Name())
	assert.Equal(t, "redis-volatile", VolatileTarget().Name())
	assert.Equal(t, Semantics, Durable().Semantics())
	assert.Contains(t, Durable().persistenceArgs(), "always")
	assert.Equal(t, []string{"--save", "", "--appendonly", "no"}, VolatileTarget().persistenceArgs())
}

func TestClockNodes(t *testing.T) {
	nodes := []nemesis.Node{{Name: RedisNode, Role: "redis"}, {Name: "adapter-1", Role: "adapter"}, {Name: "adapter-2", Role: "adapter"}}
	plain := Durable()
	plain.nodes = nodes
	assert.Equal(t, []string{RedisNode}, plain.ClockNodes(), "only Redis's clock matters to the Redis store")
	all := NewTarget(TargetOptions{SkewAdapters: true})
	all.nodes = nodes
	assert.Equal(t, []string{RedisNode, "adapter-1", "adapter-2"}, all.ClockNodes())
}
