package spec

import (
	"os"
	"path/filepath"
	"testing"
)

// TestMain removes the test programs built for this run.
func TestMain(m *testing.M) {
	code := m.Run()
	if goprobePath != "" {
		os.RemoveAll(filepath.Dir(goprobePath))
	}
	os.Exit(code)
}
