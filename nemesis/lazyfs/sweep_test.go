package lazyfs

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
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

// fsyncEnv makes the serving process also fsync files of its own mount in
// a loop.
const fsyncEnv = "LAZYFS_TEST_FSYNC"

func TestMain(m *testing.M) {
	if dir := os.Getenv(serveEnv); dir != "" {
		mnt, err := New(filepath.Join(dir, "backing"), filepath.Join(dir, "mnt"), Options{})
		if err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		if os.Getenv(fsyncEnv) != "" {
			// As the embedded reference does on its layer: fsync, in a
			// loop, files of the mount this process serves.
			for i := range 8 {
				go func() {
					f, err := os.Create(filepath.Join(mnt.Dir(), "f"+strconv.Itoa(i)))
					if err != nil {
						os.Exit(1)
					}
					for {
						f.WriteString("x")
						f.Sync()
					}
				}()
			}
		}
		os.Stdout.WriteString(mnt.Dir() + "\n")
		// A test binary killed mid-run must not leave this server behind:
		// it ends with its parent (its mount then dies with it, and the next
		// run's sweep below takes it down).
		for parent := os.Getppid(); os.Getppid() == parent; {
			time.Sleep(100 * time.Millisecond)
		}
		os.Exit(0)
	}
	// These tests serve layers from their own process: one killed while a
	// test's access to such a layer was in flight leaves it dead, and the
	// process dying for good only once the connection is aborted. The next
	// run lets such leftovers go before it mounts anything.
	if swept, err := SweepDead(); err != nil || len(swept) > 0 {
		fmt.Fprintf(os.Stderr, "lazyfs tests: swept dead layers left by a killed run: %v %v\n", swept, err)
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
	lazyfstest.Require(t)
	live := mountT(t, false)
	for attempt := 1; ; attempt++ {
		dir := t.TempDir()
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), serveEnv+"="+dir, fsyncEnv+"=1")
		out, err := cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		line, err := bufio.NewReader(out).ReadString('\n')
		require.NoError(t, err, "the serving process mounts its layer")
		point := line[:len(line)-1]
		time.Sleep(200 * time.Millisecond)
		require.NoError(t, cmd.Process.Kill())
		exited := make(chan struct{})
		go func() { cmd.Wait(); close(exited) }()
		select {
		case <-exited:
			// The kill found no thread inside a request: an ordinary dead
			// mount (the test above). Try again.
			_, err := SweepDeadUnder(dir)
			require.NoError(t, err)
			require.Less(t, attempt, 20, "no kill in 20 found a thread in a request to its own mount")
			continue
		case <-time.After(2 * time.Second):
		}
		require.True(t, killed(cmd.Process.Pid), "the killed server is still there, dying")

		swept, err := SweepDeadUnder(dir)
		require.NoError(t, err)
		assert.Equal(t, []string{point}, swept)
		swept, err = SweepDeadUnder(filepath.Dir(live.Dir()))
		require.NoError(t, err)
		assert.Empty(t, swept, "a live mount is not swept")
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			t.Fatal("the killed server still did not end")
		}
		var st syscall.Stat_t
		assert.NoError(t, syscall.Stat(point, &st), "the mount point answers again")
		t.Logf("attempt %d: the killed server was stuck; swept %s", attempt, point)
		return
	}
}

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
