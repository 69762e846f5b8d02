package docker

import (
	"errors"
	"testing"

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

	err := onTheNodesProcess(running(10, "a"), apply(map[int]bool{10: true}),
		func() (*container.State, error) { return &container.State{}, nil })
	assert.NoError(t, err, "stopped under the partition: its start applies the rules")
	assert.Equal(t, []int{10}, tried)

	err = onTheNodesProcess(running(10, "a"), apply(map[int]bool{10: true}),
		func() (*container.State, error) { return running(11, "b"), nil })
	assert.NoError(t, err)
	assert.Equal(t, []int{10, 11}, tried, "restarted: the rules go into the new process")

	err = onTheNodesProcess(running(10, "a"), apply(map[int]bool{10: true}),
		func() (*container.State, error) { return running(10, "a"), nil })
	assert.ErrorIs(t, err, gone, "the same process failing is a real failure")
	assert.Equal(t, []int{10}, tried)

	pid := 10
	err = onTheNodesProcess(running(pid, "a"), apply(map[int]bool{10: true, 11: true, 12: true, 13: true}),
		func() (*container.State, error) { pid++; return running(pid, "x"), nil })
	assert.ErrorIs(t, err, gone, "a node restarting without end: three tries")
	assert.Equal(t, []int{10, 11, 12}, tried)

	err = onTheNodesProcess(&container.State{}, apply(nil), nil)
	assert.NoError(t, err)
	assert.Empty(t, tried, "not running: nothing to do now")
}
