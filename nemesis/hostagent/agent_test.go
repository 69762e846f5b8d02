package hostagent_test

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencecheck/fencecheck/nemesis/hostagent"
	"github.com/fencecheck/fencecheck/nemesis/lazyfs/lazyfstest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// agentProc runs the real agent (cmd/fencehost) as a child, spoken to over
// its stdin and stdout, as fencecheck does over SSH.
type agentProc struct {
	cmd    *exec.Cmd
	client *hostagent.Client
	dir    string
	exited chan struct{}
}

func buildAgent(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "fencehost")
	cmd := exec.Command("go", "build", "-o", bin, "../../cmd/fencehost")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building fencehost: %v\n%s", err, out)
	}
	return bin
}

func startAgent(t *testing.T, bin string, lease time.Duration, wrap ...string) *agentProc {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "run")
	argv := append(append([]string{}, wrap...), bin, "serve", "--run", "test-1", "--dir", dir, "--lease", lease.String())
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	// Its stdout through a pipe of the test's own: Wait closes a
	// StdoutPipe as the agent exits, and the client's read of the agent's
	// last answer (bye's) then failed with "file already closed".
	out, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	a := &agentProc{cmd: cmd, client: hostagent.NewClient(out, in), dir: dir, exited: make(chan struct{})}
	go func() { cmd.Wait(); close(a.exited) }()
	t.Cleanup(func() { a.client.Close(); _ = cmd.Process.Kill(); <-a.exited; out.Close() })
	return a
}

func call(t *testing.T, c *hostagent.Client, req hostagent.Request) hostagent.Response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := c.Call(ctx, req)
	if err != nil {
		t.Fatalf("%s: %v", req.Op, err)
	}
	return resp
}

// procState reads a process's state letter from /proc: the other side of
// a pause.
func procState(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "gone"
	}
	s := string(b)
	return strings.Fields(s[strings.LastIndexByte(s, ')')+1:])[0]
}

func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	return strings.Fields(s[strings.LastIndexByte(s, ')')+1:])[0] != "Z"
}

func waitGone(t *testing.T, pid int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for alive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("pid %d still alive after %s (state %s)", pid, within, procState(t, pid))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestAgentRunsPausesKillsAndRestarts(t *testing.T) {
	a := startAgent(t, buildAgent(t), 5*time.Second)
	h := call(t, a.client, hostagent.Request{Op: hostagent.OpHello}).Hello
	if h == nil || h.Version != hostagent.Version {
		t.Fatalf("hello: %+v", h)
	}
	prep := call(t, a.client, hostagent.Request{Op: hostagent.OpPrepare, Node: "n1", Files: map[string]string{"myid": "1"}})
	if b, err := os.ReadFile(filepath.Join(prep.Data, "myid")); err != nil || string(b) != "1" {
		t.Fatalf("prepared files: %q %v", b, err)
	}
	pid := call(t, a.client, hostagent.Request{Op: hostagent.OpStart, Node: "n1", Argv: []string{"sleep", "300"}}).PGID
	call(t, a.client, hostagent.Request{Op: hostagent.OpSignal, Node: "n1", Signal: "STOP"})
	if s := procState(t, pid); s != "T" {
		t.Fatalf("paused program's state %s, want T", s)
	}
	call(t, a.client, hostagent.Request{Op: hostagent.OpSignal, Node: "n1", Signal: "CONT"})
	if s := procState(t, pid); s == "T" {
		t.Fatalf("resumed program still stopped")
	}
	call(t, a.client, hostagent.Request{Op: hostagent.OpKill, Node: "n1"})
	waitGone(t, pid, 5*time.Second)
	if r := call(t, a.client, hostagent.Request{Op: hostagent.OpRunning, Node: "n1"}); r.Running || !strings.Contains(r.Status, "killed") {
		t.Fatalf("after kill: running=%v status=%q", r.Running, r.Status)
	}
	pid2 := call(t, a.client, hostagent.Request{Op: hostagent.OpStart, Node: "n1", Argv: []string{"sleep", "300"}}).PGID
	if !alive(pid2) || pid2 == pid {
		t.Fatalf("restart: pid %d (before %d)", pid2, pid)
	}
	if _, err := a.client.Call(context.Background(), hostagent.Request{Op: hostagent.OpStart, Node: "n1", Argv: []string{"sleep", "1"}}); err == nil {
		t.Fatal("a second start of a running node was taken")
	}
	if err := a.client.Bye(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitGone(t, pid2, 5*time.Second)
	select {
	case <-a.exited:
	case <-time.After(5 * time.Second):
		t.Fatal("the agent did not exit after bye")
	}
	if _, err := os.Stat(a.dir); !os.IsNotExist(err) {
		t.Fatalf("the agent's folder is still there after bye: %v", err)
	}
}

// silent wraps an agent's input so that a test can stop every line to it
// (the lease renewals too) while the pipe stays open: a controller on a
// link that dropped without a close.
type silent struct {
	w    io.WriteCloser
	mute chan struct{}
}

func (s *silent) Write(b []byte) (int, error) {
	select {
	case <-s.mute:
		return len(b), nil
	default:
		return s.w.Write(b)
	}
}
func (s *silent) Close() error { return s.w.Close() }

// A controller that goes away (the end of the agent's input) or falls
// silent (a lost network: no close, no renewal) leaves nothing: the paused
// program continued and killed, the folder removed, the agent gone.
func TestAgentHealsWhenItsControllerIsLost(t *testing.T) {
	bin := buildAgent(t)
	for _, how := range []string{"connection closed", "lease ran out"} {
		t.Run(how, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "run")
			cmd := exec.Command(bin, "serve", "--run", "test-2", "--dir", dir, "--lease", "1500ms")
			cmd.Stderr = os.Stderr
			in, _ := cmd.StdinPipe()
			out, _ := cmd.StdoutPipe()
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan struct{})
			go func() { cmd.Wait(); close(exited) }()
			t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
			link := &silent{w: in, mute: make(chan struct{})}
			c := hostagent.NewClient(out, link)
			call(t, c, hostagent.Request{Op: hostagent.OpPrepare, Node: "n1"})
			pid := call(t, c, hostagent.Request{Op: hostagent.OpStart, Node: "n1", Argv: []string{"sleep", "300"}}).PGID
			call(t, c, hostagent.Request{Op: hostagent.OpSignal, Node: "n1", Signal: "STOP"})
			began := time.Now()
			if how == "connection closed" {
				c.Close()
			} else {
				close(link.mute)
			}
			select {
			case <-exited:
			case <-time.After(15 * time.Second):
				t.Fatal("the agent did not end")
			}
			took := time.Since(began)
			t.Logf("%s: the agent ended %.2fs after its controller went", how, took.Seconds())
			if how == "lease ran out" && took < time.Second {
				t.Fatalf("the agent ended %s after the last line, before its 1.5 s lease", took)
			}
			waitGone(t, pid, 2*time.Second)
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Fatalf("the agent's folder is still there: %v", err)
			}
		})
	}
}

// An agent killed on its host (kill -9: it cannot heal) leaves its layer
// mounted and dead and its folder; the next agent on the host, of another
// run, sweeps both.
func TestTheNextAgentSweepsWhatAKilledAgentLeft(t *testing.T) {
	lazyfstest.Require(t)
	bin := buildAgent(t)
	root := t.TempDir()
	dead := filepath.Join(root, "fencecheck-run-a")
	cmd := exec.Command(bin, "serve", "--run", "run-a", "--dir", dead)
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	require.NoError(t, cmd.Start())
	c := hostagent.NewClient(out, in)
	defer c.Close()
	call(t, c, hostagent.Request{Op: hostagent.OpPrepare, Node: "n1"})
	mnt := call(t, c, hostagent.Request{Op: hostagent.OpLayer, Node: "n1"}).Data
	pid := call(t, c, hostagent.Request{Op: hostagent.OpStart, Node: "n1", Argv: []string{"sleep", "300"}}).PGID
	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()
	waitGone(t, pid, 5*time.Second) // its parent-death signal
	require.True(t, mounted(t, mnt), "the killed agent's layer is still mounted")

	next := exec.Command(bin, "serve", "--run", "run-b", "--dir", filepath.Join(root, "fencecheck-run-b"))
	nin, _ := next.StdinPipe()
	nout, _ := next.StdoutPipe()
	var said strings.Builder
	next.Stderr = &said
	require.NoError(t, next.Start())
	nc := hostagent.NewClient(nout, nin)
	call(t, nc, hostagent.Request{Op: hostagent.OpHello})
	assert.False(t, mounted(t, mnt), "the dead layer is detached")
	_, err := os.Stat(dead)
	assert.True(t, os.IsNotExist(err), "the killed agent's folder is removed: %v", err)
	require.NoError(t, nc.Bye(context.Background()))
	_ = next.Wait()
	assert.Contains(t, said.String(), "swept "+dead)
}

// mounted says whether a mount point is in this machine's mount table.
func mounted(t *testing.T, point string) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	require.NoError(t, err)
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == point {
			return true
		}
	}
	return false
}
