package lazyfs

import (
	"os"
	"os/exec"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Killed is killed, for the external tests (sweep_test.go).
func Killed(pid int) bool { return killed(pid) }

func TestMountPointParsesMountinfo(t *testing.T) {
	p, src, ok := mountOf(`812 30 0:77 / /tmp/run\040a/mnt/n1 rw,nosuid,nodev,relatime shared:1 - fuse.fencecheck lazyfs:4242:987 rw,user_id=0,group_id=0,allow_other`)
	assert.True(t, ok)
	assert.Equal(t, "/tmp/run a/mnt/n1", p)
	assert.Equal(t, "lazyfs:4242:987", src)
	_, _, ok = mountOf(`815 30 0:80 / /var/lib/docker/x/merged rw - fuse.fuse-overlayfs fuse-overlayfs rw`)
	assert.False(t, ok, "another FUSE filesystem is never ours")
}

func TestServerGone(t *testing.T) {
	assert.False(t, serverGone(serverSource()), "this process serves its own mounts")
	assert.False(t, serverGone("lazyfs"), "a source that names no process says nothing")
	cmd := exec.Command("true")
	require.NoError(t, cmd.Run())
	assert.True(t, serverGone(sourcePrefix+strconv.Itoa(cmd.Process.Pid)+":1"), "an ended process")
	self, _ := startTime(os.Getppid())
	require.NotEmpty(t, self)
	assert.False(t, serverGone(sourcePrefix+strconv.Itoa(os.Getppid())+":"+self))
	assert.True(t, serverGone(sourcePrefix+strconv.Itoa(os.Getppid())+":1"+self), "a reused pid")
}
