package main

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/analysis"
)

func exitCodeOf(err error) int {
	if err == nil {
		return analysis.ExitValid
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return -1
}

// fencecheck conform's exit codes: 0 conformant, 1 deviations, 3 the target
// did not start, 64 a bad target or spec.
func TestConformExitCodes(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir()) // the logs of a target that did not start are kept
	base := conformFlags{target: "memory", timeout: 5 * time.Second}
	assert.Equal(t, analysis.ExitValid, exitCodeOf(runConform(&base)))

	buggy := base
	buggy.bugs = []string{"accept-equal"}
	assert.Equal(t, analysis.ExitInvalid, exitCodeOf(runConform(&buggy)))

	dir := t.TempDir()
	hangs := filepath.Join(dir, "hangs.json")
	require.NoError(t, os.WriteFile(hangs, []byte(`{"name":"x","start_timeout":"1s","nodes":[
		{"name":"n1","roles":["issuer","resource"],"command":["sleep","30","{port}"]}]}`), 0o644))
	cannot := base
	cannot.target = "spec:" + hangs
	assert.Equal(t, analysis.ExitCannot, exitCodeOf(runConform(&cannot)))

	bad := filepath.Join(dir, "bad.json")
	require.NoError(t, os.WriteFile(bad, []byte(`{"name":"x"}`), 0o644))
	usage := base
	usage.target = "spec:" + bad
	assert.Equal(t, analysis.ExitUsage, exitCodeOf(runConform(&usage)))
}
