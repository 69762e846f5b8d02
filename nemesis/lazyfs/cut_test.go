package lazyfs_test

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/nemesis/lazyfs"
)

// TestArmedCutLandsOnTheNextFsync: a cut armed on the layer takes the power
// the instant the next fsync is asked for. The fsync fails, nothing after
// it reaches the disk, and the power loss drops what that fsync was to
// make durable, seen on the disk (the backing folder) and through the
// mount made again. What an earlier fsync made durable stays.
func TestArmedCutLandsOnTheNextFsync(t *testing.T) {
	m := mountT(t, true)
	d := m.Dir()
	state := filepath.Join(d, "state")
	writeFile(t, state, "v1", true)
	syncDir(t, d)

	require.NoError(t, m.ArmCut(5*time.Second))
	f, err := os.OpenFile(state, os.O_WRONLY|os.O_TRUNC, 0o644)
	require.NoError(t, err)
	_, err = f.WriteString("v2, answered before its fsync")
	require.NoError(t, err)
	err = f.Sync()
	assert.True(t, errors.Is(err, syscall.EIO), "the fsync met by the cut fails: %v", err)
	// After the cut the disk is gone, as at any power loss.
	_, err = f.WriteString(" and more")
	assert.Error(t, err, "the power is out")
	assert.Error(t, f.Sync(), "every fsync after the cut fails")
	require.NoError(t, f.Close())
	got, _ := content(t, filepath.Join(m.Backing(), "state"))
	assert.Equal(t, "v1", got, "the disk never got v2")

	loss, err := m.PowerLoss()
	require.NoError(t, err)
	assert.True(t, loss.AtFsync, "the loss says the cut met an fsync")
	assert.Equal(t, 1, loss.Files)
	for _, side := range []string{d, m.Backing()} {
		got, _ := content(t, filepath.Join(side, "state"))
		assert.Equal(t, "v1", got, "%s: what the cut fsync was to make durable is gone", side)
	}
	// The mount made again is a healthy disk: the cut is spent.
	writeFile(t, state, "v3", true)
	got, _ = content(t, filepath.Join(m.Backing(), "state"))
	assert.Equal(t, "v3", got)
}

// TestArmedCutKeepsWhatAnEarlierFsyncMadeDurable: a system that answers
// only after its fsync returns loses nothing it answered to a cut on its
// next fsync: the data answered for is on the disk after the loss.
func TestArmedCutKeepsWhatAnEarlierFsyncMadeDurable(t *testing.T) {
	m := mountT(t, true)
	d := m.Dir()
	writeFile(t, filepath.Join(d, "answered"), "synced, then answered", true)
	syncDir(t, d)
	require.NoError(t, m.ArmCut(5*time.Second))
	f, err := os.OpenFile(filepath.Join(d, "next"), os.O_WRONLY|os.O_CREATE, 0o644)
	require.NoError(t, err)
	_, err = f.WriteString("not answered yet")
	require.NoError(t, err)
	assert.Error(t, f.Sync())
	require.NoError(t, f.Close())
	loss, err := m.PowerLoss()
	require.NoError(t, err)
	assert.True(t, loss.AtFsync)
	got, ok := content(t, filepath.Join(m.Backing(), "answered"))
	assert.True(t, ok)
	assert.Equal(t, "synced, then answered", got)
	_, ok = content(t, filepath.Join(d, "next"))
	assert.False(t, ok, "the file whose first fsync met the cut never existed on the disk")
}

// TestArmedCutExpires: past its window an armed cut is no cut; the loss
// that follows says so.
func TestArmedCutExpires(t *testing.T) {
	m := mountT(t, true)
	d := m.Dir()
	require.NoError(t, m.ArmCut(20*time.Millisecond))
	time.Sleep(60 * time.Millisecond)
	writeFile(t, filepath.Join(d, "state"), "synced after the window", true)
	syncDir(t, d)
	got, _ := content(t, filepath.Join(m.Backing(), "state"))
	assert.Equal(t, "synced after the window", got)
	loss, err := m.PowerLoss()
	require.NoError(t, err)
	assert.False(t, loss.AtFsync)
}

// An fsync under way on a slow disk has not completed: a cut armed while it
// waits lands on it, and what it was to make durable is lost.
func TestArmedCutLandsOnAnFsyncUnderWay(t *testing.T) {
	m := mountT(t, true)
	d := m.Dir()
	state := filepath.Join(d, "state")
	writeFile(t, state, "v1", true)
	syncDir(t, d)
	require.NoError(t, m.SetFaults(lazyfs.Faults{FsyncDelay: 400 * time.Millisecond}))
	f, err := os.OpenFile(state, os.O_WRONLY|os.O_TRUNC, 0o644)
	require.NoError(t, err)
	_, err = f.WriteString("v2, its fsync slow")
	require.NoError(t, err)
	synced := make(chan error, 1)
	go func() { synced <- f.Sync() }()
	time.Sleep(100 * time.Millisecond) // the fsync is in the disk's delay
	require.NoError(t, m.ArmCut(5*time.Second))
	assert.Error(t, <-synced, "the fsync under way met the cut")
	require.NoError(t, f.Close())
	loss, err := m.PowerLoss()
	require.NoError(t, err)
	assert.True(t, loss.AtFsync)
	got, _ := content(t, filepath.Join(m.Backing(), "state"))
	assert.Equal(t, "v1", got)
}
