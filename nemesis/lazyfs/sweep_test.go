package lazyfs_test

import (
	"errors"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/nemesis/lazyfs"
	"github.com/fencecheck/fencecheck/nemesis/lazyfs/lazyfstest"
)

// killedServer serves a layer under a fresh folder from a child process
// (lazyfstest), which with selfFsync fsyncs files of its own mount in a loop
// (as the embedded reference did on a layer served by fencecheck's own
// process), and returns it with the folder.
func killedServer(t *testing.T, selfFsync bool) (*lazyfstest.Layer, string) {
	t.Helper()
	dir := t.TempDir()
	return lazyfstest.Start(t, lazyfstest.Spec{Backing: filepath.Join(dir, "backing"), Mount: filepath.Join(dir, "mnt"), SelfFsync: selfFsync}), dir
}

// A layer whose server was killed with kill -9 is left mounted and dead;
// SweepDead detaches it (seen from the other side: the folder answers
// again, as an empty folder of the parent filesystem) and leaves a live
// mount alone.
func TestSweepDetachesOnlyDeadMounts(t *testing.T) {
	live := mountT(t, false)
	writeFile(t, filepath.Join(live.Dir(), "x"), "kept", false)

	server, _ := killedServer(t, false)
	dead := server.Dir()
	server.Kill()
	select {
	case <-server.Exited():
	case <-time.After(10 * time.Second):
		t.Fatal("the killed server did not end")
	}

	var st syscall.Stat_t
	var err error
	deadline := time.Now().Add(5 * time.Second)
	for err = syscall.Stat(dead, &st); !errors.Is(err, syscall.ENOTCONN) && time.Now().Before(deadline); err = syscall.Stat(dead, &st) {
		time.Sleep(50 * time.Millisecond)
	}
	require.ErrorIs(t, err, syscall.ENOTCONN, "a killed server leaves its mount dead")

	swept, err := lazyfs.SweepDead()
	require.NoError(t, err)
	assert.Contains(t, swept, dead)
	assert.NotContains(t, swept, live.Dir(), "a live mount is not swept")
	assert.NoError(t, syscall.Stat(dead, &st), "the mount point answers again")
	got, ok := content(t, filepath.Join(live.Dir(), "x"))
	assert.True(t, ok)
	assert.Equal(t, "kept", got, "the live mount still serves")
}

// A server killed with kill -9 while one of its own threads waited in a
// request to its mount (the embedded reference fsyncing its data on the
// layer: 2 of 5 kill -9s of `fencecheck test --target memory --nemesis
// power-loss`) does not die: that thread waits for an answer no thread is
// left to give, the process stays (a zombie, or in D with SIGKILL pending)
// and its mount stays connected, and every access to it hangs (before,
// `fencecheck clean`'s own stat of it hung for good, in D). The sweep knows
// the mount's server from its source, aborts the connection without
// touching the mount, and the process ends.
func TestSweepLetsGoAKilledServerStuckOnItsOwnMount(t *testing.T) {
	live := mountT(t, false)
	for attempt := 1; ; attempt++ {
		server, dir := killedServer(t, true)
		point := server.Dir()
		time.Sleep(200 * time.Millisecond)
		server.Kill()
		select {
		case <-server.Exited():
			// The kill found no thread inside a request: an ordinary dead
			// mount (the test above). Try again.
			_, err := lazyfs.SweepDeadUnder(dir)
			require.NoError(t, err)
			require.Less(t, attempt, 20, "no kill in 20 found a thread in a request to its own mount")
			continue
		case <-time.After(2 * time.Second):
		}
		require.True(t, lazyfs.Killed(server.PID()), "the killed server is still there, dying")

		swept, err := lazyfs.SweepDeadUnder(dir)
		require.NoError(t, err)
		assert.Equal(t, []string{point}, swept)
		swept, err = lazyfs.SweepDeadUnder(filepath.Dir(live.Dir()))
		require.NoError(t, err)
		assert.Empty(t, swept, "a live mount is not swept")
		select {
		case <-server.Exited():
		case <-time.After(5 * time.Second):
			t.Fatal("the killed server still did not end")
		}
		var st syscall.Stat_t
		assert.NoError(t, syscall.Stat(point, &st), "the mount point answers again")
		t.Logf("attempt %d: the killed server was stuck; swept %s", attempt, point)
		return
	}
}
