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
	assert.Equal(t, []nemesis.Node{{Name: RedisNode, Role: "redis"}, {Name: "adapter-1", Role: "adapter", Stateless: true},
		{Name: "adapter-2", Role: "adapter", Stateless: true}}, Durable().Nodes())
	assert.Equal(t, []string{RedisNode}, Durable().ClockNodes(), "only Redis's clock matters to the Redis store")
	all := NewTarget(TargetOptions{SkewAdapters: true})
	assert.Equal(t, []string{RedisNode, "adapter-1", "adapter-2"}, all.ClockNodes())
}
