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

// A slow disk: each fsync takes the delay longer, and reads go on meanwhile.
func TestFaultsSlowFsync(t *testing.T) {
	m := mountT(t, false)
	path := filepath.Join(m.Dir(), "f")
	writeFile(t, path, "data", true)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	require.NoError(t, err)
	defer f.Close()
	start := time.Now()
	require.NoError(t, f.Sync())
	healthy := time.Since(start)

	require.NoError(t, m.SetFaults(lazyfs.Faults{FsyncDelay: 200 * time.Millisecond}))
	done := make(chan time.Duration)
	go func() {
		start := time.Now()
		f.Sync()
		done <- time.Since(start)
	}()
	time.Sleep(20 * time.Millisecond)
	readStart := time.Now()
	got, _ := content(t, path)
	assert.Equal(t, "data", got)
	assert.Less(t, time.Since(readStart), 150*time.Millisecond, "a read is not held behind the slow fsync")
	slow := <-done
	t.Logf("fsync %s healthy, %s slow", healthy, slow)
	assert.GreaterOrEqual(t, slow, 200*time.Millisecond)

	require.NoError(t, m.SetFaults(lazyfs.Faults{}))
	start = time.Now()
	require.NoError(t, f.Sync())
	assert.Less(t, time.Since(start), 150*time.Millisecond, "healed")
}

// A full disk: what needs new space fails with ENOSPC, overwriting in place
// and freeing space succeed, and the fault outlives a power loss.
func TestFaultsFullDisk(t *testing.T) {
	m := mountT(t, false)
	d := m.Dir()
	writeFile(t, filepath.Join(d, "f"), "0123456789", true)
	writeFile(t, filepath.Join(d, "g"), "gone soon", true)
	require.NoError(t, m.SetFaults(lazyfs.Faults{Full: true}))

	f, err := os.OpenFile(filepath.Join(d, "f"), os.O_RDWR, 0)
	require.NoError(t, err)
	_, err = f.WriteAt([]byte("abc"), 2)
	assert.NoError(t, err, "in place needs no space")
	_, err = f.WriteAt([]byte("more"), 9)
	assert.True(t, errors.Is(err, syscall.ENOSPC), "past the end: %v", err)
	assert.True(t, errors.Is(f.Truncate(100), syscall.ENOSPC), "growing")
	require.NoError(t, f.Truncate(5), "shrinking frees space")
	require.NoError(t, f.Sync())
	require.NoError(t, f.Close())
	_, err = os.Create(filepath.Join(d, "new"))
	assert.True(t, errors.Is(err, syscall.ENOSPC), "a new file: %v", err)
	assert.True(t, errors.Is(os.Mkdir(filepath.Join(d, "sub"), 0o755), syscall.ENOSPC))
	require.NoError(t, os.Remove(filepath.Join(d, "g")), "unlink frees space")
	got, _ := content(t, filepath.Join(m.Backing(), "f"))
	assert.Equal(t, "01abc", got, "the disk has what was synced")

	_, err = m.PowerLoss()
	require.NoError(t, err)
	_, err = os.Create(filepath.Join(d, "new"))
	assert.True(t, errors.Is(err, syscall.ENOSPC), "still full after a power loss")
	require.NoError(t, m.SetFaults(lazyfs.Faults{}))
	writeFile(t, filepath.Join(d, "new"), "room again", true)
}

// lazyfs.Corruption of the disk: one bit of one durable file, or the file cut;
// hidden by the page cache until the layer reads the disk again.
func TestFaultsCorrupt(t *testing.T) {
	m := mountT(t, false)
	d := m.Dir()
	want := "a durable state file of some length"
	writeFile(t, filepath.Join(d, "state"), want, true)
	syncDir(t, d)
	got, _ := content(t, filepath.Join(d, "state")) // in the page cache now
	require.Equal(t, want, got)

	c, err := m.Corrupt(lazyfs.Corruption{Mode: lazyfs.BitFlip, Seed: 3})
	require.NoError(t, err)
	assert.Equal(t, "state", c.File)
	disk, _ := content(t, filepath.Join(m.Backing(), "state"))
	require.Len(t, disk, len(want))
	diff := 0
	for i := range want {
		if x := disk[i] ^ want[i]; x != 0 {
			assert.Equal(t, int64(i), c.Offset)
			assert.Equal(t, 1, popcount(x), "one bit")
			diff++
		}
	}
	assert.Equal(t, 1, diff)
	got, _ = content(t, filepath.Join(d, "state"))
	assert.Equal(t, want, got, "the page cache hides it")
	_, err = m.PowerLoss()
	require.NoError(t, err)
	got, _ = content(t, filepath.Join(d, "state"))
	assert.Equal(t, disk, got, "read from the disk again, it is there")

	c, err = m.Corrupt(lazyfs.Corruption{Mode: lazyfs.Truncate, Seed: 3})
	require.NoError(t, err)
	again, err := m.Corrupt(lazyfs.Corruption{Mode: lazyfs.Truncate, Seed: 3})
	require.NoError(t, err)
	assert.Equal(t, c.File, again.File, "the seed picks the file")
	disk, _ = content(t, filepath.Join(m.Backing(), "state"))
	assert.Len(t, disk, int(again.Offset))
	assert.Less(t, again.Offset, int64(len(want)))

	empty := mountT(t, false)
	_, err = empty.Corrupt(lazyfs.Corruption{Mode: lazyfs.BitFlip})
	assert.ErrorContains(t, err, "no durable file")
	_, err = empty.Corrupt(lazyfs.Corruption{Mode: "melt"})
	assert.Error(t, err)
}

func popcount(b byte) int {
	n := 0
	for ; b != 0; b &= b - 1 {
		n++
	}
	return n
}

// A slow log beside a fast disk: with FsyncDelayOnly the delay is for the
// fsyncs of what is under those paths (a file, its folder), every other
// fsync is at full speed; and a cut armed while the log's fsync waits
// lands on it, while a fast fsync that returned before keeps its data.
func TestFaultsSlowFsyncOnly(t *testing.T) {
	m := mountT(t, false)
	d := m.Dir()
	require.NoError(t, os.MkdirAll(filepath.Join(d, "member", "wal"), 0o755))
	wal := filepath.Join(d, "member", "wal", "0.wal")
	db := filepath.Join(d, "member", "db")
	writeFile(t, wal, "entry 1", true)
	writeFile(t, db, "state 1", true)
	syncDir(t, d)
	const delay = 300 * time.Millisecond
	require.NoError(t, m.SetFaults(lazyfs.Faults{FsyncDelay: delay, FsyncDelayOnly: []string{"/member/wal/"}}))

	timed := func(path string) time.Duration {
		start := time.Now()
		syncDir(t, path)
		return time.Since(start)
	}
	assert.GreaterOrEqual(t, timed(wal), delay, "the log's fsync is slow")
	assert.GreaterOrEqual(t, timed(filepath.Join(d, "member", "wal")), delay, "so is its folder's")
	assert.Less(t, timed(db), delay/2, "the rest of the disk is fast")
	assert.Less(t, timed(d), delay/2)

	w, err := os.OpenFile(wal, os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	defer w.Close()
	_, err = w.WriteString(", entry 2")
	require.NoError(t, err)
	synced := make(chan error, 1)
	go func() { synced <- w.Sync() }()
	time.Sleep(50 * time.Millisecond) // the log's fsync is in its delay
	writeFile(t, db, "state 2", true) // fast: done before the cut
	require.NoError(t, m.ArmCut(5*time.Second))
	assert.Error(t, <-synced, "the log's fsync under way met the cut")
	loss, err := m.PowerLoss()
	require.NoError(t, err)
	assert.True(t, loss.AtFsync)
	got, _ := content(t, filepath.Join(m.Backing(), "member", "wal", "0.wal"))
	assert.Equal(t, "entry 1", got, "what the cut fsync was to make durable is gone")
	got, _ = content(t, filepath.Join(m.Backing(), "member", "db"))
	assert.Equal(t, "state 2", got, "what a fast fsync made durable before the cut stays")
}
