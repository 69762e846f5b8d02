package docker

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/docker/docker/api/types/container"
	"github.com/stretchr/testify/assert"
)

// A partition whose node another fault kills or restarts while its rules go
// in (nsenter: "cannot open /proc/PID/ns/net", seen under --nemesis all on
// etcd) is not a failed fault: a stopped node gets its rules at its start, a
// restarted one in its new process; only the same process failing is.
func TestAPartitionFollowsTheNodesProcess(t *testing.T) {
	gone := errors.New("nsenter: cannot open /proc/10/ns/net: No such file or directory")
	running := func(pid int, started string) *container.State {
		return &container.State{Running: true, Pid: pid, StartedAt: started}
	}
	var tried []int
	apply := func(fail map[int]bool) func(*container.State) error {
		tried = nil
		return func(st *container.State) error {
			tried = append(tried, st.Pid)
			if fail[st.Pid] {
				return gone
			}
			return nil
		}
	}

	stillThere := func(int) bool { return false }
	err := onTheNodesProcess(running(10, "a"), apply(map[int]bool{10: true}),
		func() (*container.State, error) { return &container.State{}, nil }, stillThere)
	assert.NoError(t, err, "stopped under the partition: its start applies the rules")
	assert.Equal(t, []int{10}, tried)

	err = onTheNodesProcess(running(10, "a"), apply(map[int]bool{10: true}),
		func() (*container.State, error) { return running(11, "b"), nil }, stillThere)
	assert.NoError(t, err)
	assert.Equal(t, []int{10, 11}, tried, "restarted: the rules go into the new process")

	err = onTheNodesProcess(running(10, "a"), apply(map[int]bool{10: true}),
		func() (*container.State, error) { return running(10, "a"), nil }, stillThere)
	assert.ErrorIs(t, err, gone, "the same process failing is a real failure")
	assert.Equal(t, []int{10}, tried)

	// Killed, but the engine still calls it running for a while.
	asked := 0
	err = onTheNodesProcess(running(10, "a"), apply(map[int]bool{10: true}),
		func() (*container.State, error) {
			asked++
			if asked < 3 {
				return running(10, "a"), nil
			}
			return &container.State{}, nil
		}, func(pid int) bool { return pid == 10 })
	assert.NoError(t, err, "its process had died: the engine is asked again until it sees so")
	assert.Equal(t, 3, asked)

	// Gone as this machine sees it, the engine still calling it running
	// past deathLag (under load): stopped, its rules went with it.
	began := time.Now()
	err = onTheNodesProcess(running(10, "a"), apply(map[int]bool{10: true}),
		func() (*container.State, error) { return running(10, "a"), nil }, func(pid int) bool { return pid == 10 })
	assert.NoError(t, err, "its process is gone, whatever the engine says")
	assert.GreaterOrEqual(t, time.Since(began), deathLag, "the engine was given deathLag to see it")

	pid := 10
	err = onTheNodesProcess(running(pid, "a"), apply(map[int]bool{10: true, 11: true, 12: true, 13: true}),
		func() (*container.State, error) { pid++; return running(pid, "x"), nil }, stillThere)
	assert.ErrorIs(t, err, gone, "a node restarting without end: three tries")
	assert.Equal(t, []int{10, 11, 12}, tried)

	err = onTheNodesProcess(&container.State{}, apply(nil), nil, stillThere)
	assert.NoError(t, err)
	assert.Empty(t, tried, "not running: nothing to do now")
}

// hostProcessGone reads this machine's view of a process: this test's own
// is alive, an exited child is gone.
func TestHostProcessGone(t *testing.T) {
	assert.False(t, hostProcessGone(os.Getpid()))
	cmd := exec.Command("true")
	require.NoError(t, cmd.Run())
	assert.True(t, hostProcessGone(cmd.Process.Pid), "exited and reaped")

	zombie := exec.Command("true")
	require.NoError(t, zombie.Start())
	defer zombie.Wait()
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", zombie.Process.Pid))
		return err == nil && bytes.Contains(b, []byte(") Z "))
	}, 5*time.Second, 5*time.Millisecond, "the child exits, unreaped")
	assert.True(t, hostProcessGone(zombie.Process.Pid), "exited, not yet reaped: its namespaces are gone")
}
