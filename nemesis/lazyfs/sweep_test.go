package lazyfs

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/nemesis/lazyfs/lazyfstest"
)

// serveEnv makes this test binary a process that mounts a layer at the
// given folder and serves it until killed (as a fencecheck run does).
const serveEnv = "LAZYFS_TEST_SERVE"

func TestMain(m *testing.M) {
	if dir := os.Getenv(serveEnv); dir != "" {
		mnt, err := New(filepath.Join(dir, "backing"), filepath.Join(dir, "mnt"), Options{})
		if err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		os.Stdout.WriteString(mnt.Dir() + "\n")
		select {}
	}
	os.Exit(m.Run())
}

// A layer whose server was killed with kill -9 is left mounted and dead;
// SweepDead detaches it (seen from the other side: the folder answers
// again, as an empty folder of the parent filesystem) and leaves a live
// mount alone.
func TestSweepDetachesOnlyDeadMounts(t *testing.T) {
	lazyfstest.Require(t)
	live := mountT(t, false)
	writeFile(t, filepath.Join(live.Dir(), "x"), "kept", false)

	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), serveEnv+"="+dir)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err, "the serving process mounts its layer")
	dead := line[:len(line)-1]
	require.NoError(t, cmd.Process.Kill())
	cmd.Wait()

	var st syscall.Stat_t
	deadline := time.Now().Add(5 * time.Second)
	for err = syscall.Stat(dead, &st); !errors.Is(err, syscall.ENOTCONN) && time.Now().Before(deadline); err = syscall.Stat(dead, &st) {
		time.Sleep(50 * time.Millisecond)
	}
	require.ErrorIs(t, err, syscall.ENOTCONN, "a killed server leaves its mount dead")

	swept, err := SweepDead()
	require.NoError(t, err)
	assert.Contains(t, swept, dead)
	assert.NotContains(t, swept, live.Dir(), "a live mount is not swept")
	assert.NoError(t, syscall.Stat(dead, &st), "the mount point answers again")
	got, ok := content(t, filepath.Join(live.Dir(), "x"))
	assert.True(t, ok)
	assert.Equal(t, "kept", got, "the live mount still serves")
}

func TestMountPointParsesMountinfo(t *testing.T) {
	p, ok := mountPoint(`812 30 0:77 / /tmp/run\040a/mnt/n1 rw,nosuid,nodev,relatime shared:1 - fuse.fencecheck lazyfs rw,user_id=0,group_id=0,allow_other`)
	assert.True(t, ok)
	assert.Equal(t, "/tmp/run a/mnt/n1", p)
	_, ok = mountPoint(`815 30 0:80 / /var/lib/docker/x/merged rw - fuse.fuse-overlayfs fuse-overlayfs rw`)
	assert.False(t, ok, "another FUSE filesystem is never ours")
}
