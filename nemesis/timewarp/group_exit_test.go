//go:build linux

package timewarp

import (
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A process that was live when the scope was listed and is a zombie now
// (ptrace refuses it with EPERM) counts as exited, not as a failure to move
// its clock: its pid and start time are still readable.
func TestAZombieHasExited(t *testing.T) {
	cmd := exec.Command("sleep", "0.2")
	require.NoError(t, cmd.Start())
	pid := cmd.Process.Pid
	st, err := startTime(pid)
	require.NoError(t, err)
	assert.False(t, exitedSince(pid, st), "running")
	require.Eventually(t, func() bool { return !live(pid) }, 5*time.Second, 10*time.Millisecond)
	st2, err := startTime(pid)
	require.NoError(t, err, "not reaped yet: a zombie")
	assert.Equal(t, st, st2)
	assert.True(t, exitedSince(pid, st), "a zombie has exited")
	require.NoError(t, cmd.Wait())
	assert.True(t, exitedSince(pid, st))
}
