package timewarp

import (
	"errors"
	"os/exec"
	"time"

	"golang.org/x/sys/unix"
)

// Wait waits for a child started by cmd to exit, like cmd.Wait, but is not
// fooled by the ptrace stops of Inject. While a thread of this process
// traces the child, the kernel reports the child's ptrace stops to every
// thread of this process that waits for it, and os/exec's Wait would take
// such a stop for the end of the child (and steal it from the tracer). A
// caller that lets timewarp patch its own child must wait with Wait.
func Wait(cmd *exec.Cmd) error {
	const (
		cldExited = 1 // CLD_EXITED, CLD_KILLED, CLD_DUMPED: the child is gone
		cldDumped = 3
	)
	for {
		var info unix.Siginfo
		// WNOWAIT leaves every state to be seen again: the tracer still
		// gets its stop, and cmd.Wait the exit.
		err := unix.Waitid(unix.P_PID, cmd.Process.Pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || (info.Code >= cldExited && info.Code <= cldDumped) {
			break
		}
		time.Sleep(time.Millisecond) // stopped by its tracer: look again
	}
	return cmd.Wait()
}
