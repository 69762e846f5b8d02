package hostagent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"
)

// The local agent serves this machine's power-loss layers. A FUSE server
// inside fencecheck's own process can leave that process unkillable: killed
// while one of its threads waits in a request to a layer it serves itself
// (the embedded reference's fsync), the thread waits for an answer no thread
// is left to give, the process stays a zombie with a thread in D, and every
// access to the mount hangs. Served from this helper, a request in flight is
// answered whatever happens to fencecheck; when fencecheck dies (its pipe
// ends, or its lease runs out: a dying process may keep the pipe open),
// the agent takes its layers down, removes their mount points and its
// folder, and exits, which closes its FUSE connections for good.
//
// The agent is fencecheck's own executable (or a test binary) re-run with
// localRunEnv set: the init below turns such a process into the agent
// before anything else runs, as the process reaper and the Docker watchdog
// do.
const (
	localRunEnv   = "FENCECHECK_LAYER_AGENT_RUN"
	localDirEnv   = "FENCECHECK_LAYER_AGENT_DIR"
	localLeaseEnv = "FENCECHECK_LAYER_AGENT_LEASE"
)

func init() {
	run := os.Getenv(localRunEnv)
	if run == "" {
		return
	}
	dir, lease := os.Getenv(localDirEnv), os.Getenv(localLeaseEnv)
	for _, v := range []string{localRunEnv, localDirEnv, localLeaseEnv} {
		os.Unsetenv(v)
	}
	opts := Options{Run: run, Dir: dir, Remove: true, Log: os.Stderr}
	opts.Lease, _ = time.ParseDuration(lease)
	// Its own session already keeps a terminal's Ctrl-C away; a hang-up or
	// a broken pipe must not end it before it takes its layers down.
	signal.Ignore(syscall.SIGHUP, syscall.SIGPIPE, syscall.SIGINT)
	if err := Serve(os.Stdin, os.Stdout, opts); err != nil {
		fmt.Fprintf(os.Stderr, "fencecheck layer agent: %v\n", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// Local is a local agent seen from the harness.
type Local struct {
	*Client
	cmd    *exec.Cmd
	exited chan struct{}
}

// LocalOptions configure StartLocal.
type LocalOptions struct {
	// Run is the run's id; Dir the agent's own folder (removed when it
	// ends); Log receives what it says (its standard error).
	Run string
	Dir string
	Log io.Writer
	// Lease is how long it waits for the next renewal (DefaultLease).
	Lease time.Duration
	_     struct{}
}

// StartLocal starts a local agent and waits for its hello.
func StartLocal(ctx context.Context, opts LocalOptions) (*Local, error) {
	if opts.Run == "" || opts.Dir == "" {
		return nil, errors.New("hostagent: a local agent needs a run id and a folder")
	}
	if opts.Lease <= 0 {
		opts.Lease = DefaultLease
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), localRunEnv+"="+opts.Run, localDirEnv+"="+opts.Dir, localLeaseEnv+"="+opts.Lease.String())
	// Its own session: a Ctrl-C to fencecheck's group must not end it
	// while fencecheck still heals and reports.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if opts.Log != nil {
		cmd.Stderr = opts.Log
	}
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	// Its output through a pipe of our own, not StdoutPipe: Wait closes
	// that as soon as the agent exits, and an answer the agent wrote just
	// before (bye's) was then lost to a read of a closed file. This end
	// is read to the end and closed by the client's reader.
	out, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout = w
	err = cmd.Start()
	w.Close()
	if err != nil {
		out.Close()
		return nil, fmt.Errorf("starting the layer agent: %w", err)
	}
	l := &Local{Client: NewClient(out, in), cmd: cmd, exited: make(chan struct{})}
	go func() { cmd.Wait(); close(l.exited) }()
	go func() {
		// A process the agent started that kept the pipe open must not
		// keep the reader waiting long after the agent itself is gone.
		<-l.exited
		select {
		case <-l.Done():
		case <-time.After(2 * time.Second):
		}
		out.Close()
	}()
	hctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	resp, err := l.Call(hctx, Request{Op: OpHello})
	if err == nil && (resp.Hello == nil || resp.Hello.Version != Version) {
		err = fmt.Errorf("it answered %+v, not %s", resp.Hello, Version)
	}
	if err != nil {
		l.Kill()
		return nil, fmt.Errorf("the layer agent did not answer: %w", err)
	}
	return l, nil
}

// PID is the agent's process id.
func (l *Local) PID() int { return l.cmd.Process.Pid }

// Stop asks the agent to take its layers down and exit, and waits for it
// (killing it past ctx: its connections close with it).
func (l *Local) Stop(ctx context.Context) error {
	err := l.Bye(ctx)
	l.Close()
	select {
	case <-l.exited:
	case <-ctx.Done():
		l.Kill()
	}
	return err
}

// Kill ends the agent at once: its FUSE connections close with its last
// descriptor, so no access to its layers can hang after it.
func (l *Local) Kill() {
	l.Close()
	_ = l.cmd.Process.Kill()
	<-l.exited
}
