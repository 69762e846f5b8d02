package memory

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/nemesis/lazyfs/lazyfstest"

	"github.com/fencecheck/fencecheck/fencing"
	"github.com/fencecheck/fencecheck/nemesis/lazyfs"
)

// startOnLayer starts a node whose data folder is a lazyfs mount.
func startOnLayer(t *testing.T, bugs ...Bug) (*Node, *fencing.Client, *lazyfs.Mount) {
	t.Helper()
	lazyfstest.Require(t)
	root := t.TempDir()
	m, err := lazyfs.New(filepath.Join(root, "data"), filepath.Join(root, "mnt"), lazyfs.Options{})
	require.NoError(t, err)
	set := Bugs{}
	for _, b := range bugs {
		set[b] = true
	}
	n, err := NewNode(Config{Dir: m.Dir(), Bugs: set})
	require.NoError(t, err)
	url, err := n.Start("")
	require.NoError(t, err)
	t.Cleanup(func() { n.Stop(); m.Unmount() })
	return n, fencing.NewClient(url, nil), m
}

// powerLoss kills n, drops what it never synced, and starts it again.
func powerLoss(t *testing.T, n *Node, c *fencing.Client, m *lazyfs.Mount) lazyfs.Loss {
	t.Helper()
	require.NoError(t, n.Kill())
	loss, err := m.PowerLoss()
	require.NoError(t, err)
	require.NoError(t, n.Restart(false))
	require.NoError(t, c.Health(bg))
	return loss
}

func TestReferenceSurvivesPowerLoss(t *testing.T) {
	n, c, m := startOnLayer(t)
	seed(t, c)
	loss := powerLoss(t, n, c, m)
	assert.Zero(t, loss.Files, "every answer waited for its fsync")
	assert.Equal(t, uint64(4), acquire(t, c, "l", "c3"), "the counter is durable")
	assert.Equal(t, "v3", string(c.Read(bg, "k").Value))
}

// The no-fsync bugs keep everything across a kill (the page cache) and
// lose what they name at a power loss, nothing else.
func TestBugsNoFsync(t *testing.T) {
	t.Run("counter", func(t *testing.T) {
		n, c, m := startOnLayer(t, CounterNoFsync)
		seed(t, c)
		restart(t, n, c, false)
		require.Equal(t, fencing.Ok, c.Release(bg, "l", "c3", "3").Outcome)
		assert.Equal(t, uint64(4), acquire(t, c, "l", "c4"), "a kill keeps the counter")
		loss := powerLoss(t, n, c, m)
		assert.Positive(t, loss.Files)
		require.Equal(t, fencing.Ok, c.Release(bg, "l", "c4", "4").Outcome, "holders stay durable")
		assert.Equal(t, uint64(1), acquire(t, c, "l", "c5"), "the counter was never on disk")
		assert.Equal(t, "stale", write(c, "k", 1, "x").Error, "the high-water mark stays durable")
	})
	t.Run("highwater", func(t *testing.T) {
		n, c, m := startOnLayer(t, HighwaterNoFsync)
		seed(t, c)
		restart(t, n, c, false)
		assert.Equal(t, "stale", write(c, "k", 2, "late").Error, "a kill keeps the marks")
		powerLoss(t, n, c, m)
		assert.False(t, c.Read(bg, "k").Found, "the value was never on disk")
		assert.Equal(t, fencing.Ok, write(c, "k", 2, "late").Outcome, "nor the mark")
		require.Equal(t, fencing.Ok, c.Release(bg, "l", "c3", "3").Outcome)
		assert.Equal(t, uint64(4), acquire(t, c, "l", "c4"), "the counter stays durable")
	})
}
