package lazyfs_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/nemesis/lazyfs/lazyfstest"
)

// mountT mounts a layer for t, failing when this machine cannot (the
// layer is what the power-loss nemesis stands on; a machine without FUSE
// must say so, not pass). The layer is served by a child process
// (lazyfstest): these tests are its clients, and prove what they prove from
// the other side of the mount; a test binary killed mid-run leaves neither
// a mount nor a process behind.
func mountT(t *testing.T, strict bool) *lazyfstest.Layer {
	t.Helper()
	return lazyfstest.Mount(t, strict)
}

func writeFile(t *testing.T, path, data string, sync bool) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	require.NoError(t, err)
	_, err = f.WriteString(data)
	require.NoError(t, err)
	if sync {
		require.NoError(t, f.Sync())
	}
	require.NoError(t, f.Close())
}

func syncDir(t *testing.T, dir string) {
	t.Helper()
	f, err := os.Open(dir)
	require.NoError(t, err)
	require.NoError(t, f.Sync())
	require.NoError(t, f.Close())
}

func content(t *testing.T, path string) (string, bool) {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return "", false
	}
	require.NoError(t, err)
	return string(b), true
}

// TestPowerLossDropsWhatIsNotDurable: the fault proven by its effect, seen
// from the other side of the layer (the backing folder, which is the disk)
// and through the mount made again after the loss; folder entries in the
// strict model (durable by their own folder's fsync only).
func TestPowerLossDropsWhatIsNotDurable(t *testing.T) {
	m := mountT(t, true)
	d := m.Dir()

	// Durable: data fsynced, entries fsynced.
	writeFile(t, filepath.Join(d, "kept"), "durable", true)
	require.NoError(t, os.Mkdir(filepath.Join(d, "sub"), 0o755))
	syncDir(t, d)
	writeFile(t, filepath.Join(d, "sub", "state"), "v1", true)
	syncDir(t, filepath.Join(d, "sub"))

	// Not durable: a new file never fsynced (entry made durable by the
	// folder's fsync, data not), an overwrite without fsync, a new file
	// whose folder is never synced, and the classic rename of a fsynced
	// temp file over the state without a fsync of the folder.
	writeFile(t, filepath.Join(d, "nosync"), "lost data", false)
	syncDir(t, d)
	writeFile(t, filepath.Join(d, "kept"), "overwritten, not synced", false)
	writeFile(t, filepath.Join(d, "noentry"), "synced data, entry never synced", true)
	writeFile(t, filepath.Join(d, "sub", "state.tmp"), "v2", true)
	require.NoError(t, os.Rename(filepath.Join(d, "sub", "state.tmp"), filepath.Join(d, "sub", "state")))

	// Before the loss everything is visible through the mount (the page
	// cache), and the disk does not have it.
	got, _ := content(t, filepath.Join(d, "sub", "state"))
	assert.Equal(t, "v2", got)
	got, _ = content(t, filepath.Join(d, "kept"))
	assert.Equal(t, "overwritten, not synced", got)
	got, _ = content(t, filepath.Join(m.Backing(), "kept"))
	assert.Equal(t, "durable", got, "the backing folder holds only what was synced")
	_, ok := content(t, filepath.Join(m.Backing(), "noentry"))
	assert.False(t, ok)

	pending, err := m.Pending()
	require.NoError(t, err)
	loss, err := m.PowerLoss()
	require.NoError(t, err)
	assert.Equal(t, pending, loss)
	assert.Equal(t, 2, loss.Files, "nosync and kept (noentry's data was synced)")
	assert.Equal(t, 2, loss.Entries, "noentry, and state replaced")

	for _, side := range []string{d, m.Backing()} {
		got, ok := content(t, filepath.Join(side, "kept"))
		assert.True(t, ok)
		assert.Equal(t, "durable", got, "%s: the fsynced data is kept, the later overwrite is gone", side)
		got, ok = content(t, filepath.Join(side, "nosync"))
		assert.True(t, ok, "%s: the entry was synced", side)
		assert.Equal(t, "", got, "%s: data never fsynced is gone", side)
		_, ok = content(t, filepath.Join(side, "noentry"))
		assert.False(t, ok, "%s: a file whose folder was never synced is gone", side)
		got, _ = content(t, filepath.Join(side, "sub", "state"))
		assert.Equal(t, "v1", got, "%s: the rename without a folder fsync is reverted", side)
		_, ok = content(t, filepath.Join(side, "sub", "state.tmp"))
		assert.False(t, ok, "%s: the temp file's entry was never durable", side)
	}
	entries, err := os.ReadDir(d)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	assert.ElementsMatch(t, []string{"kept", "nosync", "sub"}, names, "the orphan folder is never shown")

	// The same rename with the folder synced is durable.
	writeFile(t, filepath.Join(d, "sub", "state.tmp"), "v3", true)
	require.NoError(t, os.Rename(filepath.Join(d, "sub", "state.tmp"), filepath.Join(d, "sub", "state")))
	syncDir(t, filepath.Join(d, "sub"))
	loss, err = m.PowerLoss()
	require.NoError(t, err)
	assert.Zero(t, loss.Total())
	got, _ = content(t, filepath.Join(d, "sub", "state"))
	assert.Equal(t, "v3", got)
}

// TestKillKeepsWhatIsNotDurable: a process killed with SIGKILL after writing
// without fsync leaves its writes visible (the layer is the page cache, and
// a kill is not a power loss), until the power goes.
func TestKillKeepsWhatIsNotDurable(t *testing.T) {
	m := mountT(t, false)
	path := filepath.Join(m.Dir(), "counter")
	cmd := exec.Command("sh", "-c", `printf 41 > "$1"; mv "$1" "$1.x"; printf 42 > "$1"; kill -9 $$`, "sh", path)
	err := cmd.Run()
	require.Error(t, err, "the writer is killed")
	got, ok := content(t, path)
	require.True(t, ok)
	assert.Equal(t, "42", got)
	got, _ = content(t, path+".x")
	assert.Equal(t, "41", got)

	_, err = m.PowerLoss()
	require.NoError(t, err)
	_, ok = content(t, path)
	assert.False(t, ok, "nothing was synced")
	_, ok = content(t, path+".x")
	assert.False(t, ok)
}

// TestFolders: mkdir, rmdir and a folder's rename follow the folder fsync
// of their parent, and what was synced inside a new folder arrives with it.
func TestFolders(t *testing.T) {
	m := mountT(t, true)
	d := m.Dir()
	require.NoError(t, os.Mkdir(filepath.Join(d, "a"), 0o755))
	writeFile(t, filepath.Join(d, "a", "f"), "in a", true)
	syncDir(t, filepath.Join(d, "a"))
	require.NoError(t, os.Mkdir(filepath.Join(d, "gone"), 0o755))
	_, err := m.PowerLoss()
	require.NoError(t, err)
	_, ok := content(t, filepath.Join(d, "a", "f"))
	assert.False(t, ok, "the folder a was never made durable in the root")
	_, err = os.Stat(filepath.Join(d, "gone"))
	assert.True(t, os.IsNotExist(err))

	require.NoError(t, os.Mkdir(filepath.Join(d, "a"), 0o755))
	writeFile(t, filepath.Join(d, "a", "f"), "in a", true)
	syncDir(t, filepath.Join(d, "a"))
	syncDir(t, d)
	require.NoError(t, os.Rename(filepath.Join(d, "a"), filepath.Join(d, "b")))
	require.NoError(t, os.Mkdir(filepath.Join(d, "c"), 0o755))
	syncDir(t, d)
	require.NoError(t, os.Remove(filepath.Join(d, "c")))
	_, err = m.PowerLoss()
	require.NoError(t, err)
	got, _ := content(t, filepath.Join(d, "b", "f"))
	assert.Equal(t, "in a", got, "the synced rename of a folder keeps what it holds")
	_, err = os.Stat(filepath.Join(d, "a"))
	assert.True(t, os.IsNotExist(err))
	st, err := os.Stat(filepath.Join(d, "c"))
	require.NoError(t, err, "the rmdir was never synced")
	assert.True(t, st.IsDir())

	assert.Error(t, os.Remove(filepath.Join(d, "b")), "a folder with a file in it is not removed")
}

// TestJournalCommit: in the default model any fsync commits every pending
// folder entry (as ext4's journal does), never another file's data; a
// rename followed by no fsync at all is still reverted.
func TestJournalCommit(t *testing.T) {
	m := mountT(t, false)
	d := m.Dir()
	writeFile(t, filepath.Join(d, "state"), "v1", true)
	require.NoError(t, os.Mkdir(filepath.Join(d, "aof"), 0o755))
	writeFile(t, filepath.Join(d, "aof", "log"), "synced", true) // commits aof/ and aof/log
	writeFile(t, filepath.Join(d, "unsynced"), "data never synced", false)
	writeFile(t, filepath.Join(d, "other"), "x", true) // commits unsynced's entry, not its data
	writeFile(t, filepath.Join(d, "state.tmp"), "v2", true)
	require.NoError(t, os.Rename(filepath.Join(d, "state.tmp"), filepath.Join(d, "state")))
	// No fsync after the rename.
	_, err := m.PowerLoss()
	require.NoError(t, err)
	for _, side := range []string{d, m.Backing()} {
		got, _ := content(t, filepath.Join(side, "aof", "log"))
		assert.Equal(t, "synced", got, "%s: a folder made durable by another file's fsync", side)
		got, ok := content(t, filepath.Join(side, "unsynced"))
		assert.True(t, ok, "%s: the entry was committed", side)
		assert.Equal(t, "", got, "%s: the data was not", side)
		got, _ = content(t, filepath.Join(side, "state"))
		assert.Equal(t, "v1", got, "%s: the rename that no fsync followed is reverted", side)
		_, ok = content(t, filepath.Join(side, "state.tmp"))
		assert.True(t, ok, "%s: the temp file's name was committed by its own fsync", side)
	}
}

// TestRangesAndSizes: an fsync writes only what changed to the disk, and
// the durable content is what the program saw at its fsync: appends, writes
// in the middle, holes, truncation; what changed after it is dropped.
func TestRangesAndSizes(t *testing.T) {
	m := mountT(t, false)
	p := filepath.Join(m.Dir(), "log")
	writeFile(t, p, "0123456789", true)
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	require.NoError(t, err)
	_, err = f.WriteAt([]byte("ab"), 3)
	require.NoError(t, err)
	_, err = f.WriteAt([]byte("Z"), 12) // a hole at 10 and 11
	require.NoError(t, err)
	require.NoError(t, f.Sync())
	_, err = f.WriteAt([]byte("lost"), 0)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	_, err = m.PowerLoss()
	require.NoError(t, err)
	got, _ := content(t, p)
	assert.Equal(t, "012ab56789\x00\x00Z", got)

	require.NoError(t, os.Truncate(p, 4))
	f, err = os.OpenFile(p, os.O_RDWR, 0)
	require.NoError(t, err)
	require.NoError(t, f.Sync())
	require.NoError(t, f.Truncate(2))
	require.NoError(t, f.Close())
	got, _ = content(t, p)
	assert.Equal(t, "01", got)
	_, err = m.PowerLoss()
	require.NoError(t, err)
	got, _ = content(t, p)
	assert.Equal(t, "012a", got, "the truncation synced is kept, the later one is not")
}
