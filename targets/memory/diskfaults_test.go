package memory

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/fencing"
	"github.com/fencecheck/fencecheck/nemesis/lazyfs"
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
		m.SetFaults(lazyfs.Faults{Full: true})
		r := c.Acquire(bg, "l", "c4", time.Minute)
		assert.Equal(t, fencing.Info, r.Outcome, "a grant it could not save is not answered")
		assert.Equal(t, fencing.Info, write(c, "k", 9, "full").Outcome)
		m.SetFaults(lazyfs.Faults{})
		assert.Greater(t, acquire(t, c, "l", "c4"), uint64(3), "the unanswered grant may have happened")
		assert.Equal(t, "stale", write(c, "k", 3, "old").Error)
	})
	t.Run("ignore-write-errors", func(t *testing.T) {
		n, c, m := startOnLayer(t, IgnoreWriteErrors)
		seed(t, c)
		require.Equal(t, fencing.Ok, c.Release(bg, "l", "c3", "3").Outcome)
		restart(t, n, c, false)
		assert.Equal(t, "stale", write(c, "k", 3, "old").Error, "a kill keeps what it acknowledged")
		m.SetFaults(lazyfs.Faults{Full: true})
		assert.Equal(t, uint64(4), acquire(t, c, "l", "c4"))
		require.Equal(t, fencing.Ok, write(c, "k", 4, "v4").Outcome, "answered as saved")
		assert.Equal(t, "v3", string(c.Read(bg, "k").Value), "the acknowledged write is gone")
		m.SetFaults(lazyfs.Faults{})
		assert.Equal(t, uint64(4), acquire(t, c, "l", "c5"), "token 4 is granted twice")
	})
}

// A damaged snapshot stops the reference from starting (a flipped bit
// included: the checksum); trust-truncated-state starts from nothing.
func TestDiskCorrupt(t *testing.T) {
	for _, mode := range []string{lazyfs.Truncate, lazyfs.BitFlip} {
		t.Run("reference/"+mode, func(t *testing.T) {
			n, c, m := startOnLayer(t)
			seed(t, c)
			require.NoError(t, n.Kill())
			_, err := m.PowerLoss()
			require.NoError(t, err)
			co, err := m.Corrupt(lazyfs.Corruption{Mode: mode, Seed: 7})
			require.NoError(t, err)
			require.Equal(t, snapshotName, co.File)
			_, err = m.PowerLoss() // drop the layer's cache of the file
			require.NoError(t, err)
			err = n.Restart(false)
			require.ErrorIs(t, err, errCorrupt)
		})
		t.Run("trust-truncated-state/"+mode, func(t *testing.T) {
			n, c, m := startOnLayer(t, TrustTruncatedState)
			seed(t, c)
			require.NoError(t, n.Kill())
			_, err := m.PowerLoss()
			require.NoError(t, err)
			_, err = m.Corrupt(lazyfs.Corruption{Mode: mode, Seed: 7})
			require.NoError(t, err)
			_, err = m.PowerLoss()
			require.NoError(t, err)
			restart(t, n, c, false)
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
