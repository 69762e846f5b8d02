package hostagent

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
)

// The node folder operations, the same on a host and on the control
// machine (harness/nodes uses them for its own nodes).

// WriteFiles writes each named file into dir.
func WriteFiles(dir string, files map[string]string) error {
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// Wipe empties dir, durably (a wipe is meant to last), and writes files
// into it again: a node starts on it as on its first start.
func Wipe(dir string, files map[string]string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	if err := WriteFiles(dir, files); err != nil {
		return err
	}
	f, err := os.Open(dir)
	if err == nil {
		err = errors.Join(f.Sync(), f.Close())
	}
	return err
}

// Tail returns the last n lines of a log file ("" when it cannot be read),
// for errors that should show why a node did not come up.
func Tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	if n <= 0 {
		n = 10
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
