// Package durable writes files all or nothing, durably: the one atomic write
// of the project. A store's state (the reference's snapshot), clock offset
// files read by other processes, built binaries, a run's config.json and
// schedule.json, and every report file go through it.
package durable

import (
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/renameio/v2"
)

// WriteFile replaces path with data, all or nothing: a reader, or a process
// restarted after a crash or a power loss, sees the old contents or the new,
// never a part.
func WriteFile(path string, data []byte, perm os.FileMode) error {
	return WriteFileFrom(path, perm, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// WriteFileFrom is WriteFile for contents that are streamed (a copy of a
// large file, a rendered page): fill writes them. The contents go to a
// temporary file beside path (so the rename never crosses file systems),
// which is fsynced, given perm (whatever the umask: other processes, e.g. a
// container under another uid, may read it), renamed over path, and the
// folder is fsynced, so the new contents are durable once it returns. A
// temporary file that a crash left behind is named by TempFiles.
func WriteFileFrom(path string, perm os.FileMode, fill func(io.Writer) error) error {
	dir := filepath.Dir(path)
	f, err := renameio.NewPendingFile(path, renameio.WithTempDir(dir), renameio.WithStaticPermissions(perm))
	if err != nil {
		return err
	}
	defer f.Cleanup()
	if err := fill(f); err != nil {
		return err
	}
	if err := f.CloseAtomicallyReplace(); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Copy replaces dst with the contents of src, as WriteFileFrom does.
func Copy(src, dst string, perm os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	return WriteFileFrom(dst, perm, func(w io.Writer) error {
		_, err := io.Copy(w, in)
		return err
	})
}

// TempFiles lists the temporary files of writes to path that never
// completed (the process died mid-write): they were never renamed, so
// nothing ever read them, and they can be removed.
func TempFiles(path string) []string {
	dir, base := filepath.Split(path)
	entries, err := os.ReadDir(filepath.Clean(dir))
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		if rest, ok := strings.CutPrefix(e.Name(), "."+base); ok && rest != "" && strings.Trim(rest, "0123456789") == "" {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	return out
}
