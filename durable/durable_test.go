package durable

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A write replaces the file whole, with the mode asked for whatever the
// umask, and leaves nothing beside it.
func TestWriteFileReplacesWhole(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	require.NoError(t, WriteFile(path, []byte("one"), 0o644))
	require.NoError(t, WriteFile(path, []byte("two"), 0o644))
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, "two", string(b))
	st, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o644), st.Mode().Perm(), "the mode asked for, not the umask's")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, entries, 1, "no temporary file left")
}

// A write that fails half-way leaves the old contents and no temporary
// file: a reader never sees a part.
func TestAFailedWriteLeavesTheOldContents(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "report.html")
	require.NoError(t, WriteFile(path, []byte("old"), 0o644))
	err := WriteFileFrom(path, 0o644, func(w io.Writer) error {
		_, _ = w.Write([]byte("half of the new"))
		return errors.New("render failed")
	})
	require.Error(t, err)
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, "old", string(b))
	assert.Empty(t, TempFiles(path))
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, entries, 1)
}

// Copy is a write of another file's contents; TempFiles names what a
// writer killed mid-write left, and only that.
func TestCopyAndTempFiles(t *testing.T) {
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "junit.xml"), filepath.Join(dir, "ci", "junit.xml")
	require.NoError(t, os.WriteFile(src, []byte("<testsuite/>"), 0o600))
	require.NoError(t, os.Mkdir(filepath.Dir(dst), 0o755))
	require.NoError(t, Copy(src, dst, 0o644))
	b, err := os.ReadFile(dst)
	require.NoError(t, err)
	assert.Equal(t, "<testsuite/>", string(b))
	assert.Error(t, Copy(filepath.Join(dir, "missing"), dst, 0o644))

	left := filepath.Join(dir, ".snapshot.json123456")
	require.NoError(t, os.WriteFile(left, nil, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, ".snapshot.json.bak"), nil, 0o644))
	assert.Equal(t, []string{left}, TempFiles(filepath.Join(dir, "snapshot.json")))
}
