package analysis

import (
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/assert"
)

// Shares of the soft memory limit add up, never go above the limit in
// force before the first, and the last one's release puts that back.
func TestMemoryLimitShares(t *testing.T) {
	t.Setenv("GOMEMLIMIT", "")
	before := debug.SetMemoryLimit(-1)
	defer debug.SetMemoryLimit(before)
	debug.SetMemoryLimit(1 << 40)
	a := HoldMemoryLimit(100 << 20)
	assert.Equal(t, int64(100<<20), debug.SetMemoryLimit(-1))
	b := HoldMemoryLimit(50 << 20)
	assert.Equal(t, int64(150<<20), debug.SetMemoryLimit(-1))
	a.Set(1 << 41)
	assert.Equal(t, int64(1<<40), debug.SetMemoryLimit(-1), "never above the limit before")
	a.Release()
	assert.Equal(t, int64(50<<20), debug.SetMemoryLimit(-1))
	b.Release()
	b.Release()
	assert.Equal(t, int64(1<<40), debug.SetMemoryLimit(-1))
	assert.Equal(t, int64(MemoryFloor+30<<20), MemoryLimitFor(100<<20))
	assert.Equal(t, int64(MemoryFloor), MemoryLimitFor(-1))
}

// A GOMEMLIMIT from the environment is the user's: holding changes nothing.
func TestMemoryLimitKeepsGOMEMLIMIT(t *testing.T) {
	t.Setenv("GOMEMLIMIT", "1GiB")
	before := debug.SetMemoryLimit(-1)
	l := HoldMemoryLimit(10 << 20)
	assert.Equal(t, before, debug.SetMemoryLimit(-1))
	l.Release()
	assert.Equal(t, before, debug.SetMemoryLimit(-1))
}
