package memory

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/fencing"
	"github.com/fencecheck/fencecheck/nemesis/lazyfs"
	"github.com/fencecheck/fencecheck/nemesis/lazyfs/lazyfstest"
)

// On a full disk the reference answers nothing it could not save (5xx),
// and everything it acknowledged before is still there once the disk has
// space again; ignore-write-errors answers the failed writes as done, and
// forgets them at the next operation.
func TestDiskFull(t *testing.T) {
	t.Run("reference", func(t *testing.T) {
		_, c, m := startOnLayer(t)
		seed(t, c)
		require.Equal(t, fencing.Ok, c.Release(bg, "l", "c3", "3").Outcome)
		require.NoError(t, m.SetFaults(lazyfs.Faults{Full: true}))
		r := c.Acquire(bg, "l", "c4", time.Minute)
		assert.Equal(t, fencing.Info, r.Outcome, "a grant it could not save is not answered")
		assert.Equal(t, fencing.Info, write(c, "k", 9, "full").Outcome)
		require.NoError(t, m.SetFaults(lazyfs.Faults{}))
		assert.Greater(t, acquire(t, c, "l", "c4"), uint64(3), "the unanswered grant may have happened")
		assert.Equal(t, "stale", write(c, "k", 3, "old").Error)
	})
	t.Run("ignore-write-errors", func(t *testing.T) {
		n, c, m := startOnLayer(t, IgnoreWriteErrors)
		seed(t, c)
		require.Equal(t, fencing.Ok, c.Release(bg, "l", "c3", "3").Outcome)
		restart(t, n, c, false)
		assert.Equal(t, "stale", write(c, "k", 3, "old").Error, "a kill keeps what it acknowledged")
		require.NoError(t, m.SetFaults(lazyfs.Faults{Full: true}))
		assert.Equal(t, uint64(4), acquire(t, c, "l", "c4"))
		require.Equal(t, fencing.Ok, write(c, "k", 4, "v4").Outcome, "answered as saved")
		assert.Equal(t, "v3", string(c.Read(bg, "k").Value), "the acknowledged write is gone")
		require.NoError(t, m.SetFaults(lazyfs.Faults{}))
		assert.Equal(t, uint64(4), acquire(t, c, "l", "c5"), "token 4 is granted twice")
	})
}

// corrupt damages one durable file of n's disk while n is down, as the
// disk-corrupt nemesis does, and starts n again on it.
func corrupt(t *testing.T, n *Node, m *lazyfstest.Layer, mode string, seed uint64) (lazyfs.Corrupted, error) {
	t.Helper()
	require.NoError(t, n.Kill())
	_, err := m.PowerLoss()
	require.NoError(t, err)
	co, err := m.Corrupt(lazyfs.Corruption{Mode: mode, Seed: seed})
	require.NoError(t, err)
	_, err = m.PowerLoss() // the layer reads the disk again
	require.NoError(t, err)
	return co, n.Restart(false)
}

// The reference finds a damaged copy of its state (cut short, or a bit
// flipped: the checksum) and starts from the other; with both damaged it
// refuses to start. trust-truncated-state keeps one copy and starts from
// nothing.
func TestDiskCorrupt(t *testing.T) {
	for _, mode := range []string{lazyfs.Truncate, lazyfs.BitFlip} {
		t.Run("reference/"+mode, func(t *testing.T) {
			n, c, m := startOnLayer(t)
			seed(t, c)
			require.Equal(t, fencing.Ok, c.Release(bg, "l", "c3", "3").Outcome)
			hit := map[string]bool{}
			for s := uint64(1); len(hit) < 2 && s < 40; s++ {
				co, err := corrupt(t, n, m, mode, s)
				require.NoError(t, err, "%s damaged", co.File)
				hit[co.File] = true
				require.NoError(t, c.Health(bg))
				assert.Equal(t, "stale", write(c, "k", 3, "old").Error, "%s damaged: the mark is kept", co.File)
				tok := acquire(t, c, "l", "c4")
				require.Equal(t, fencing.Ok, c.Release(bg, "l", "c4", strconv.FormatUint(tok, 10)).Outcome)
				assert.Greater(t, tok, uint64(3), "%s damaged: the counter is kept", co.File)
			}
			assert.Equal(t, map[string]bool{snapshotName: true, copyName: true}, hit)
			require.NoError(t, n.Kill())
			for _, name := range []string{snapshotName, copyName} {
				require.NoError(t, os.Truncate(filepath.Join(m.Backing(), name), 10))
			}
			_, err := m.PowerLoss()
			require.NoError(t, err)
			assert.ErrorIs(t, n.Restart(false), errCorrupt, "both copies damaged")
		})
		t.Run("trust-truncated-state/"+mode, func(t *testing.T) {
			n, c, m := startOnLayer(t, TrustTruncatedState)
			seed(t, c)
			co, err := corrupt(t, n, m, mode, 7)
			require.NoError(t, err)
			require.Equal(t, snapshotName, co.File, "its one copy")
			require.NoError(t, c.Health(bg))
			assert.Equal(t, uint64(1), acquire(t, c, "l", "c4"), "token 1 again")
			assert.Equal(t, fencing.Ok, write(c, "k", 1, "old").Outcome, "the mark of 3 is forgotten")
		})
	}
}

// A snapshot written before the checksum is still read.
func TestSnapshotWithoutChecksum(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, snapshotName), []byte(`{"format":1,"version":2,"counters":{"l":5}}`), 0o644))
	s, err := OpenStore(dir, StoreOptions{})
	require.NoError(t, err)
	defer s.Close()
	tok, err := s.NextToken(bg, "l")
	require.NoError(t, err)
	assert.Equal(t, uint64(6), tok)
}
