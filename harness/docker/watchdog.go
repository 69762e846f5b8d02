package docker

import (
	"context"
	"io"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"
)

// The watchdog is a detached child that sweeps a run's objects the moment
// its harness dies, even by SIGKILL, when no deferred cleanup can run. The
// harness holds the write end of a pipe that is the watchdog's stdin; the
// kernel closes it when the harness dies however it dies, and the watchdog
// sees EOF at once.
//
// The child is the harness's own executable re-run with these variables set
// (the fencecheck CLI and test binaries alike, so no separate program has to
// be found); the init below turns such a process into the watchdog before
// anything else runs.
const (
	watchdogRunEnv    = "FENCECHECK_WATCHDOG_RUN"
	watchdogParentEnv = "FENCECHECK_WATCHDOG_PARENT"
)

func init() {
	run := os.Getenv(watchdogRunEnv)
	if run == "" {
		return
	}
	parent, _ := strconv.Atoi(os.Getenv(watchdogParentEnv))
	Watchdog(context.Background(), run, parent, os.Stdin)
	os.Exit(0)
}

// Watchdog waits until stdin reaches EOF or process parent is gone
// (whichever is first; parent 0 means only stdin), then removes every
// container and network of run. The hidden `fencecheck watchdog` command
// calls it too.
func Watchdog(ctx context.Context, run string, parent int, stdin io.Reader) error {
	done := make(chan struct{})
	go func() {
		io.Copy(io.Discard, stdin)
		close(done)
	}()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
wait:
	for {
		select {
		case <-done:
			break wait
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
			if parent > 0 && !processAlive(strconv.Itoa(parent)) {
				break wait
			}
		}
	}
	cli, err := Connect(ctx)
	if err != nil {
		return err
	}
	defer cli.Close()
	sweepCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	_, err = Sweep(sweepCtx, cli, run)
	return err
}

// startWatchdog re-runs this executable as the watchdog of run, in its own
// session (a Ctrl-C to the harness's process group must not kill it before
// it sweeps). Closing the returned pipe end tells it the harness is done.
func startWatchdog(run string) (io.Closer, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), watchdogRunEnv+"="+run, watchdogParentEnv+"="+strconv.Itoa(os.Getpid()))
	cmd.Stdin = pr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		pr.Close()
		pw.Close()
		return nil, err
	}
	pr.Close()
	// Reap it when it exits so a long-lived harness collects no zombies.
	go cmd.Wait()
	return pw, nil
}
