package timewarp

import (
	"os"
	"testing"
)

// TestMain removes the test programs built for this run.
func TestMain(m *testing.M) {
	code := m.Run()
	if builtDir != "" {
		os.RemoveAll(builtDir)
	}
	os.Exit(code)
}
