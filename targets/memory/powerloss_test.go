package memory

import (
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/nemesis/lazyfs/lazyfstest"

	"github.com/fencecheck/fencecheck/fencing"
	"github.com/fencecheck/fencecheck/nemesis/lazyfs"
)

// startOnLayer starts a node whose data folder is a lazyfs mount.
// The layer is served by a child process (lazyfstest), never by this one:
// the node's fsyncs on it are requests to another process.
func startOnLayer(t *testing.T, bugs ...Bug) (*Node, *fencing.Client, *lazyfstest.Layer) {
	t.Helper()
	root := t.TempDir()
	m := lazyfstest.Start(t, lazyfstest.Spec{Backing: filepath.Join(root, "data"), Mount: filepath.Join(root, "mnt")})
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
func powerLoss(t *testing.T, n *Node, c *fencing.Client, m *lazyfstest.Layer) lazyfs.Loss {
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

// ack-before-fsync answers a commit before its fsync: a power loss in that
// window loses an acknowledged grant, a kill -9 in it loses nothing.
func TestBugAckBeforeFsync(t *testing.T) {
	// holdWindow keeps the next late fsync from starting until the
	// returned func is called; entered is closed once the flusher waits.
	holdWindow := func(t *testing.T) (entered <-chan struct{}, release func()) {
		in, hold := make(chan struct{}), make(chan struct{})
		var once sync.Once
		fn := func() { once.Do(func() { close(in) }); <-hold }
		beforeLateSync.Store(&fn)
		var rel sync.Once
		release = func() { rel.Do(func() { beforeLateSync.Store(nil); close(hold) }) }
		t.Cleanup(release)
		return in, release
	}
	t.Run("power-loss in the window", func(t *testing.T) {
		n, c, m := startOnLayer(t, AckBeforeFsync)
		seed(t, c)
		require.Equal(t, fencing.Ok, c.Release(bg, "l", "c3", "3").Outcome)
		flushed(n)
		entered, release := holdWindow(t)
		assert.Equal(t, uint64(4), acquire(t, c, "l", "c4"), "answered before its fsync")
		<-entered
		require.NoError(t, n.Kill())
		loss, err := m.PowerLoss()
		require.NoError(t, err)
		release()
		require.NoError(t, n.Restart(false))
		require.NoError(t, c.Health(bg))
		assert.Positive(t, loss.Files+loss.Entries, "the answered commit was not on disk")
		assert.Equal(t, uint64(4), acquire(t, c, "l", "c5"), "the acknowledged grant of 4 is lost: 4 again")
	})
	t.Run("kill in the window", func(t *testing.T) {
		n, c, _ := startOnLayer(t, AckBeforeFsync)
		seed(t, c)
		require.Equal(t, fencing.Ok, c.Release(bg, "l", "c3", "3").Outcome)
		flushed(n)
		entered, release := holdWindow(t)
		assert.Equal(t, uint64(4), acquire(t, c, "l", "c4"))
		<-entered
		require.NoError(t, n.Kill())
		release()
		restart(t, n, c, false)
		require.Equal(t, fencing.Ok, c.Release(bg, "l", "c4", "4").Outcome, "a kill keeps the page cache")
		assert.Equal(t, uint64(5), acquire(t, c, "l", "c5"))
	})
	t.Run("power-loss after the window", func(t *testing.T) {
		n, c, m := startOnLayer(t, AckBeforeFsync)
		seed(t, c)
		require.Equal(t, fencing.Ok, c.Release(bg, "l", "c3", "3").Outcome)
		flushed(n)
		powerLoss(t, n, c, m)
		assert.Equal(t, uint64(4), acquire(t, c, "l", "c4"), "fsynced before the power went")
	})
}

// flushed waits until n's store has no commit running (ack-before-fsync's
// late fsync included).
func flushed(n *Node) {
	n.mu.Lock()
	s := n.inst.store
	n.mu.Unlock()
	s.mu.Lock()
	for s.committing {
		s.cond.Wait()
	}
	s.mu.Unlock()
}
