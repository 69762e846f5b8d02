package lazyfstest

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fencecheck/fencecheck/nemesis/lazyfs"
)

// A test never serves a layer itself: a test binary killed (kill -9, a
// `go test` timeout) while one of its own accesses to a layer it served was
// in flight would be both the FUSE client and the server, a thread would
// stay in D waiting for an answer no thread is left to give, and the mount
// would be left dead. The layer is served by a child: the test binary re-run
// (the init below turns it into the server before anything else runs),
// in a session of its own (a kill of the test's process group misses it),
// and driven over its standard input and output by JSON lines. When the
// test binary ends, however it ends, the child's standard input ends: it
// aborts its FUSE connection (a request in flight fails, the test's
// included, so nothing waits in D), detaches the mount and exits. It
// removes nothing. The test is a pure client of the layer: what it proves
// it proves from the other side of the mount.

// serveEnv holds the Spec of the layer a re-run test binary serves;
// sweeperEnv makes it the binary's sweeper (SweepOnExit).
const (
	serveEnv   = "FENCECHECK_LAZYFS_TEST_SERVE"
	sweeperEnv = "FENCECHECK_LAZYFS_TEST_SWEEPER"
)

func init() {
	if s, ok := os.LookupEnv(serveEnv); ok {
		os.Unsetenv(serveEnv)
		var spec Spec
		if err := json.Unmarshal([]byte(s), &spec); err != nil {
			fmt.Fprintf(os.Stderr, "lazyfstest: %s: %v\n", serveEnv, err)
			os.Exit(2)
		}
		if err := Serve(spec); err != nil {
			fmt.Fprintf(os.Stderr, "lazyfstest: serving %s: %v\n", spec.Mount, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if _, ok := os.LookupEnv(sweeperEnv); ok {
		os.Unsetenv(sweeperEnv)
		sweep()
		os.Exit(0)
	}
}

// Spec is a layer to serve.
type Spec struct {
	// Backing and Mount are the folders (lazyfs.New).
	Backing string `json:"backing"`
	Mount   string `json:"mount"`
	Strict  bool   `json:"strict,omitempty"`
	// SelfFsync makes the server itself write and fsync files of its own
	// mount in a loop, as an embedded store on a layer served by its own
	// process did: killed, such a server stays stuck in a request to its
	// own mount (what the sweep tests need).
	SelfFsync bool `json:"self_fsync,omitempty"`
}

// request is one line to the server.
type request struct {
	Op         string            `json:"op"` // pending, power-loss, arm-cut, faults, corrupt, unmount
	Crash      lazyfs.CrashState `json:"crash"`
	Window     time.Duration     `json:"window_ns,omitempty"`
	Faults     lazyfs.Faults     `json:"faults"`
	Corruption lazyfs.Corruption `json:"corruption"`
}

// response is the server's answer to one request, and (Ready) its first
// line.
type response struct {
	Error     string           `json:"error,omitempty"`
	Ready     bool             `json:"ready,omitempty"`
	Dir       string           `json:"dir,omitempty"`
	Backing   string           `json:"backing,omitempty"`
	PID       int              `json:"pid,omitempty"`
	Loss      lazyfs.Loss      `json:"loss"`
	Corrupted lazyfs.Corrupted `json:"corrupted"`
}

// Serve mounts the layer spec names and serves it to the parent process,
// which drives it over this process's standard input and output (Start,
// StartCommand). It returns after an unmount the parent asked for (or at
// once, with the error, when the layer cannot be mounted); when the parent
// is gone, the layer is aborted and detached (Mount.Abort) and the process
// exits. A test binary re-run by Start calls it on its own; one re-run to
// play another program that serves a layer (a harness) calls it itself,
// after its own setup, and exits when it returns. Nothing else may write to
// the standard output meanwhile.
func Serve(spec Spec) error {
	// A hang-up or a broken pipe (the parent gone) must not end the server
	// before it lets its layer go.
	signal.Ignore(syscall.SIGHUP, syscall.SIGPIPE, syscall.SIGINT)
	// The parent gone: its end of the pipe closes (below), or, should a
	// dying parent keep it open, it is no longer this process's parent.
	parent := os.Getppid()
	out := json.NewEncoder(os.Stdout)
	m, err := lazyfs.New(spec.Backing, spec.Mount, lazyfs.Options{Strict: spec.Strict})
	if err != nil {
		out.Encode(response{Error: err.Error()})
		return err
	}
	abort := func(why string) {
		if err := m.Abort(); err != nil {
			fmt.Fprintf(os.Stderr, "lazyfstest: %s: aborting %s: %v\n", why, m.Dir(), err)
		}
		os.Exit(0)
	}
	go func() {
		for os.Getppid() == parent {
			time.Sleep(100 * time.Millisecond)
		}
		abort("the test process is gone")
	}()
	if spec.SelfFsync {
		for i := range 8 {
			go func() {
				f, err := os.Create(filepath.Join(m.Dir(), "f"+strconv.Itoa(i)))
				if err != nil {
					return
				}
				for {
					f.WriteString("x")
					f.Sync()
				}
			}()
		}
	}
	out.Encode(response{Ready: true, Dir: m.Dir(), Backing: m.Backing(), PID: os.Getpid()})
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var req request
		var resp response
		if err = json.Unmarshal(sc.Bytes(), &req); err == nil {
			switch req.Op {
			case "pending":
				resp.Loss = m.Pending()
			case "power-loss":
				resp.Loss, err = m.PowerLossAs(req.Crash)
			case "arm-cut":
				err = m.ArmCut(req.Window)
			case "faults":
				m.SetFaults(req.Faults)
			case "corrupt":
				resp.Corrupted, err = m.Corrupt(req.Corruption)
			case "unmount":
				err = m.Unmount()
			default:
				err = fmt.Errorf("no op %q", req.Op)
			}
		}
		if err != nil {
			resp.Error = err.Error()
		}
		out.Encode(resp)
		if req.Op == "unmount" {
			return nil
		}
	}
	abort("its standard input ended")
	return nil
}

// Layer is a layer served by a child process (Serve), seen from the test:
// the operations of a lazyfs.Mount, each carried out by the server.
type Layer struct {
	t            testing.TB
	dir, backing string
	cmd          *exec.Cmd
	pid          int

	mu     sync.Mutex // one request at a time
	in     io.WriteCloser
	out    *bufio.Scanner
	done   bool // unmounted or killed
	killed bool
	exited chan struct{}
}

// Mount is a layer for t over a backing folder and a mount point in a
// fresh t.TempDir ("backing" and "mnt"), strict as lazyfs.Options.Strict,
// taken down when t ends. It fails (or skips: Require) without FUSE.
func Mount(t testing.TB, strict bool) *Layer {
	t.Helper()
	root := t.TempDir()
	return Start(t, Spec{Backing: filepath.Join(root, "backing"), Mount: filepath.Join(root, "mnt"), Strict: strict})
}

// Start serves the layer spec names from this test binary re-run, and
// takes it down when t ends.
func Start(t testing.TB, spec Spec) *Layer {
	t.Helper()
	Require(t)
	b, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), serveEnv+"="+string(b))
	return StartCommand(t, cmd)
}

// StartCommand starts cmd, a program that calls Serve (a test binary re-run
// to play one), in a session of its own, and waits until it serves its
// layer; the layer is taken down when t ends.
func StartCommand(t testing.TB, cmd *exec.Cmd) *Layer {
	t.Helper()
	Require(t)
	// Its own session: a kill of the test's process group (a cancelled CI
	// job) must leave the server to let its layer go.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if cmd.Stderr == nil {
		cmd.Stderr = os.Stderr
	}
	// Pipes of its own, not cmd's: cmd.Wait closes those as soon as the
	// server ends, an answer it wrote last (to an unmount) unread.
	inR, in, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	out, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdin, cmd.Stdout = inR, outW
	err = cmd.Start()
	inR.Close()
	outW.Close()
	if err != nil {
		in.Close()
		out.Close()
		t.Fatalf("starting a layer server: %v", err)
	}
	l := &Layer{t: t, cmd: cmd, pid: cmd.Process.Pid, in: in, out: bufio.NewScanner(out), exited: make(chan struct{})}
	l.out.Buffer(make([]byte, 64<<10), 1<<20)
	go func() { cmd.Wait(); close(l.exited) }()
	t.Cleanup(func() { l.close(); out.Close() })
	var hello response
	if err := l.read(&hello); err != nil || !hello.Ready {
		l.Kill()
		t.Fatalf("the layer server did not serve: %v %s", err, hello.Error)
	}
	l.dir, l.backing = hello.Dir, hello.Backing
	return l
}

func (l *Layer) read(resp *response) error {
	if !l.out.Scan() {
		if err := l.out.Err(); err != nil {
			return err
		}
		return errors.New("the layer server is gone")
	}
	return json.Unmarshal(l.out.Bytes(), resp)
}

// call sends one request and reads its answer; an error of the operation
// comes back as the error, as from a lazyfs.Mount.
func (l *Layer) call(req request) (response, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done {
		return response{}, errors.New("lazyfstest: the layer is down")
	}
	b, err := json.Marshal(req)
	if err != nil {
		return response{}, err
	}
	if _, err := l.in.Write(append(b, '\n')); err != nil {
		return response{}, fmt.Errorf("lazyfstest: the layer server is gone: %w", err)
	}
	var resp response
	if err := l.read(&resp); err != nil {
		return response{}, fmt.Errorf("lazyfstest: %s: %w", req.Op, err)
	}
	if resp.Error != "" {
		return resp, errors.New(resp.Error)
	}
	return resp, nil
}

// Dir is the mount point: the folder programs use.
func (l *Layer) Dir() string { return l.dir }

// Backing is the folder that holds what is durable.
func (l *Layer) Backing() string { return l.backing }

// PID is the server's process id.
func (l *Layer) PID() int { return l.pid }

// Exited is closed once the server has ended.
func (l *Layer) Exited() <-chan struct{} { return l.exited }

// Pending is what a power loss would drop now.
func (l *Layer) Pending() (lazyfs.Loss, error) {
	resp, err := l.call(request{Op: "pending"})
	return resp.Loss, err
}

// PowerLoss drops everything not durable (lazyfs.Mount.PowerLoss).
func (l *Layer) PowerLoss() (lazyfs.Loss, error) { return l.PowerLossAs(lazyfs.CrashState{}) }

// PowerLossAs is a power loss in crash state cs (lazyfs.Mount.PowerLossAs).
func (l *Layer) PowerLossAs(cs lazyfs.CrashState) (lazyfs.Loss, error) {
	resp, err := l.call(request{Op: "power-loss", Crash: cs})
	return resp.Loss, err
}

// ArmCut arms a power cut for the next fsync within window
// (lazyfs.Mount.ArmCut).
func (l *Layer) ArmCut(window time.Duration) error {
	_, err := l.call(request{Op: "arm-cut", Window: window})
	return err
}

// SetFaults sets the disk's faults (lazyfs.Mount.SetFaults).
func (l *Layer) SetFaults(f lazyfs.Faults) error {
	_, err := l.call(request{Op: "faults", Faults: f})
	return err
}

// Corrupt damages one durable file (lazyfs.Mount.Corrupt).
func (l *Layer) Corrupt(c lazyfs.Corruption) (lazyfs.Corrupted, error) {
	resp, err := l.call(request{Op: "corrupt", Corruption: c})
	return resp.Corrupted, err
}

// Unmount takes the layer down (lazyfs.Mount.Unmount) and waits for the
// server to end. Safe to call twice.
func (l *Layer) Unmount() error {
	l.mu.Lock()
	done := l.done
	l.mu.Unlock()
	if done {
		return nil
	}
	_, err := l.call(request{Op: "unmount"})
	l.mu.Lock()
	l.done = true
	l.in.Close()
	l.mu.Unlock()
	select {
	case <-l.exited:
	case <-time.After(30 * time.Second):
		l.cmd.Process.Kill()
		return errors.Join(err, errors.New("lazyfstest: the layer server did not end"))
	}
	return err
}

// Kill kills the server with SIGKILL and returns at once: its mount is
// left dead (a process of its own stuck in a request to it keeps it from
// ending: Spec.SelfFsync). The mount's folder is swept (lazyfs.SweepDeadUnder)
// when t ends, and by SweepOnExit should the test binary die first.
func (l *Layer) Kill() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done {
		return
	}
	SweepOnExit(l.t, filepath.Dir(l.dir))
	l.done, l.killed = true, true
	l.cmd.Process.Kill()
	l.in.Close()
}

// close is t's cleanup: the layer is taken down, or, killed, swept.
func (l *Layer) close() {
	l.mu.Lock()
	killed, dir := l.killed, l.dir
	l.mu.Unlock()
	if !killed {
		if err := l.Unmount(); err != nil {
			l.t.Errorf("taking the layer %s down: %v", dir, err)
		}
		return
	}
	if dir != "" {
		if _, err := lazyfs.SweepDeadUnder(filepath.Dir(dir)); err != nil {
			l.t.Errorf("sweeping %s: %v", dir, err)
		}
	}
	select {
	case <-l.exited:
	case <-time.After(10 * time.Second):
		l.t.Errorf("the killed layer server %d did not end", l.pid)
	}
}

var sweeper struct {
	once sync.Once
	in   io.WriteCloser
	err  error
	mu   sync.Mutex
}

// SweepOnExit has the dead layers under dir swept (lazyfs.SweepDeadUnder)
// when this test binary ends, however it ends, by a child of its own that
// outlives it: a test that kills a server on purpose leaves its mount dead
// until the test sweeps it, and the test binary may be killed meanwhile.
func SweepOnExit(t testing.TB, dir string) {
	sweeper.once.Do(func() {
		exe, err := os.Executable()
		if err != nil {
			sweeper.err = err
			return
		}
		cmd := exec.Command(exe)
		cmd.Env = append(os.Environ(), sweeperEnv+"=1")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		cmd.Stderr = os.Stderr
		if sweeper.in, err = cmd.StdinPipe(); err == nil {
			err = cmd.Start()
		}
		sweeper.err = err
	})
	sweeper.mu.Lock()
	defer sweeper.mu.Unlock()
	err := sweeper.err
	if err == nil {
		_, err = io.WriteString(sweeper.in, dir+"\n")
	}
	if err != nil {
		t.Errorf("lazyfstest: no sweeper for %s: %v", dir, err)
	}
}

// sweep is the sweeper: it reads folders until its standard input ends
// (the test binary ended) and sweeps each.
func sweep() {
	signal.Ignore(syscall.SIGHUP, syscall.SIGPIPE, syscall.SIGINT)
	var dirs []string
	parent := os.Getppid()
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
wait:
	for {
		select {
		case d, ok := <-lines:
			if !ok {
				break wait
			}
			dirs = append(dirs, d)
		case <-time.After(100 * time.Millisecond):
			if os.Getppid() != parent {
				break wait
			}
		}
	}
	for _, d := range dirs {
		if _, err := lazyfs.SweepDeadUnder(d); err != nil {
			fmt.Fprintf(os.Stderr, "lazyfstest: sweeping %s: %v\n", d, err)
		}
	}
}
