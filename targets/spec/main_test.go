package spec

import (
	"os"
	"path/filepath"
	"testing"
)

// TestMain removes the test programs built for this run.
func TestMain(m *testing.M) {
	code := m.Run()
	for _, built := range []string{goprobePath, fencedPath} {
		if built != "" {
			os.RemoveAll(filepath.Dir(built))
		}
	}
	os.Exit(code)
}
