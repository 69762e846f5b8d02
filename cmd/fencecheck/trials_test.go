package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/analysis"
	"github.com/fencecheck/fencecheck/checkers/historytest"
	"github.com/fencecheck/fencecheck/harness/docker"
	"github.com/fencecheck/fencecheck/harness/docker/dockertest"
	"github.com/fencecheck/fencecheck/harness/sweep"
	"github.com/fencecheck/fencecheck/history"
	"github.com/fencecheck/fencecheck/reports"
)

// The trials run the fencecheck command itself, as a user's terminal or CI
// would, and hurt it (signals, kill -9) at a chosen phase: this test binary
// re-run with cliEnv set is the command (TestMain).
const cliEnv = "FENCECHECK_TEST_CLI"

func TestMain(m *testing.M) {
	if os.Getenv(cliEnv) == "1" {
		main()
		return
	}
	// A run of these tests killed at any moment leaves nothing the next
	// trips on: what it left is swept first (the runs sweep too).
	if swept, err := sweep.Leftovers(); err != nil || !swept.Empty() {
		fmt.Fprintf(os.Stderr, "fencecheck tests: swept what a killed run left: %v %v\n", swept.Lines(), err)
	}
	os.Exit(m.Run())
}

// cliRun is one started fencecheck command.
type cliRun struct {
	cmd            *exec.Cmd
	stdout, stderr *lockedBuffer
	done           chan struct{}
	code           int
}

func startCLI(t *testing.T, args ...string) *cliRun {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	return startCommand(t, exec.Command(exe, args...))
}

// startCommand starts cmd, a fencecheck command (perhaps behind a wrapper
// that execs it in place, as nsenter does), as startCLI does.
func startCommand(t *testing.T, cmd *exec.Cmd) *cliRun {
	t.Helper()
	c := &cliRun{cmd: cmd, stdout: &lockedBuffer{}, stderr: &lockedBuffer{}, done: make(chan struct{})}
	c.cmd.Env = append(os.Environ(), cliEnv+"=1")
	c.cmd.Stdout, c.cmd.Stderr = c.stdout, c.stderr
	require.NoError(t, c.cmd.Start())
	go func() {
		err := c.cmd.Wait()
		c.code = c.cmd.ProcessState.ExitCode()
		var ee *exec.ExitError
		if errors.As(err, &ee) && ee.ProcessState.ExitCode() == -1 {
			c.code = -1 // killed by a signal
		}
		close(c.done)
	}()
	t.Cleanup(func() {
		select {
		case <-c.done:
		default:
			_ = c.cmd.Process.Kill()
			<-c.done
		}
	})
	return c
}

// wait returns the exit code, failing the test past limit.
func (c *cliRun) wait(t *testing.T, limit time.Duration) int {
	t.Helper()
	select {
	case <-c.done:
		return c.code
	case <-time.After(limit):
		t.Fatalf("fencecheck still running after %s\nstderr:\n%s", limit, c.stderr.String())
		return 0
	}
}

// waitFor polls until cond holds, failing past limit.
func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// runDir is the one run folder under store (empty while there is none).
func runDir(store string) string {
	dirs, _ := filepath.Glob(filepath.Join(store, "*", "2*"))
	if len(dirs) != 1 {
		return ""
	}
	return dirs[0]
}

// inMainPhase reports whether the run's history has begun its main phase
// and recorded some operations.
func inMainPhase(store string) bool {
	dir := runDir(store)
	if dir == "" {
		return false
	}
	events, err := history.ReadFile(filepath.Join(dir, reports.HistoryFile))
	return err == nil && len(events) > 50
}

func readResults(t *testing.T, dir string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, reports.ResultsFile))
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	return m
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// memoryRun are the flags of a long run on the embedded reference that a
// trial cuts short.
func memoryRun(store string, extra ...string) []string {
	return append([]string{"test", "--target", "memory", "--time", "2m", "--nemesis", "none", "--seed", "3",
		"--quiet", "--store", store}, extra...)
}

// First Ctrl-C (or SIGTERM) in the main phase: the run heals, reads, checks
// and writes every report, marked cut short, and exits with the verdict's
// code (unknown: a run cut short cannot pass).
func TestTrialInterruptInMainPhaseReports(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			store := t.TempDir()
			c := startCLI(t, memoryRun(store)...)
			waitFor(t, 60*time.Second, "the main phase", func() bool { return inMainPhase(store) })
			require.NoError(t, c.cmd.Process.Signal(sig))
			code := c.wait(t, 60*time.Second)
			assert.Equal(t, analysis.ExitUnknown, code, "stderr:\n%s", c.stderr.String())
			dir := runDir(store)
			for _, f := range []string{reports.ResultsFile, reports.ReportFile, reports.JUnitFile} {
				assert.FileExists(t, filepath.Join(dir, f))
			}
			res := readResults(t, dir)
			completion, _ := res["completion"].(map[string]any)
			assert.Equal(t, true, completion["cut_short"], "%v", completion)
			assert.Equal(t, true, completion["ended"])
			assert.Contains(t, c.stdout.String(), "gate: the run was cut short")
			assert.Contains(t, c.stdout.String(), "run: cut short (interrupted): the main phase ended early; the final heal and reads were done")
			page, err := os.ReadFile(filepath.Join(dir, reports.ReportFile))
			require.NoError(t, err)
			assert.Contains(t, string(page), "run cut short (interrupted)")
			assert.Contains(t, c.stderr.String(), "cutting the run short")
		})
	}
}

// A second signal tears down at once: no check, no report, exit 3; the
// history is left as it was (no end event: a later `report` says the run
// did not finish).
func TestTrialSecondInterruptTearsDownAtOnce(t *testing.T) {
	store := t.TempDir()
	// 10000 keys: the final reads and the check take seconds, the window
	// in which the second signal arrives.
	c := startCLI(t, memoryRun(store, "--keys", "10000")...)
	waitFor(t, 60*time.Second, "the main phase", func() bool { return inMainPhase(store) })
	require.NoError(t, c.cmd.Process.Signal(syscall.SIGINT))
	// Signals do not queue: the second must come after the first was taken.
	waitFor(t, 30*time.Second, "the final phase", func() bool { return strings.Contains(c.stderr.String(), "final phase:") })
	require.NoError(t, c.cmd.Process.Signal(syscall.SIGINT))
	code := c.wait(t, 30*time.Second)
	assert.Equal(t, analysis.ExitCannot, code, "stderr:\n%s", c.stderr.String())
	assert.Contains(t, c.stderr.String(), "tearing down at once")
	assert.Contains(t, c.stderr.String(), "aborted")
	dir := runDir(store)
	assert.NoFileExists(t, filepath.Join(dir, reports.ResultsFile))

	r := startCLI(t, "report", dir)
	assert.Equal(t, analysis.ExitUnknown, r.wait(t, 60*time.Second), "stderr:\n%s", r.stderr.String())
	assert.Contains(t, r.stdout.String(), "the run did not finish")
}

// kill -9 of the harness in the main phase leaves a checkable history;
// `report` on it says the run did not finish and gives unknown, never
// valid.
func TestTrialKillInMainPhaseIsUnknownOnReport(t *testing.T) {
	store := t.TempDir()
	c := startCLI(t, memoryRun(store)...)
	waitFor(t, 60*time.Second, "the main phase", func() bool { return inMainPhase(store) })
	require.NoError(t, c.cmd.Process.Kill())
	assert.Equal(t, -1, c.wait(t, 10*time.Second))
	dir := runDir(store)

	r := startCLI(t, "report", dir)
	assert.Equal(t, analysis.ExitUnknown, r.wait(t, 60*time.Second), "stderr:\n%s", r.stderr.String())
	assert.Contains(t, r.stdout.String(), "the run did not finish: the history has no end event")
	assert.Contains(t, r.stdout.String(), "run: did not finish: the final heal and reads never happened")
	res := readResults(t, dir)
	completion, _ := res["completion"].(map[string]any)
	assert.Equal(t, false, completion["ended"], "%v", completion)
	assert.Equal(t, false, completion["complete"], "%v", completion)
	assert.Equal(t, "unknown", res["verdict"])
}

// A run killed during setup leaves a folder with config.json and no
// history: `report` and `check` say so (exit 3), not "usage".
func TestTrialKilledInSetupSaysWhatIsMissing(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "memory", "20261201T100000.000Z")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"target":"memory","config_version":2}`), 0o644))
	for _, args := range [][]string{{"report", dir}, {"check", dir}, {"check", filepath.Join(dir, reports.HistoryFile)}} {
		r := startCLI(t, args...)
		assert.Equal(t, analysis.ExitCannot, r.wait(t, 30*time.Second), "%v: %s", args, r.stderr.String())
		assert.Contains(t, r.stderr.String(), "has no history.jsonl: the run stopped during setup", "%v", args)
		assert.NotContains(t, r.stderr.String(), "not a run folder")
	}
	// A folder that is no run at all is still a usage error.
	r := startCLI(t, "report", t.TempDir())
	assert.Equal(t, analysis.ExitUsage, r.wait(t, 30*time.Second), r.stderr.String())
}

// lockedBuffer is a bytes.Buffer safe for the command's writes and the
// test's reads.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// wrapperSpec is the Python example behind a shell wrapper: the server is
// the harness's grandchild, which the parent-death signal does not reach.
func wrapperSpec(t *testing.T) string {
	t.Helper()
	fence, err := filepath.Abs("../../examples/python-fence/fence.py")
	require.NoError(t, err)
	spec := fmt.Sprintf(`{"name":"wrapped","fencing_api":"v1","start_timeout":"20s",
  "nodes":[{"name":"n1","roles":["issuer","resource"],
    "command":["sh","-c","python3 %s --port {port} --data {data} & wait"]}]}`, fence)
	path := filepath.Join(t.TempDir(), "wrapped.json")
	require.NoError(t, os.WriteFile(path, []byte(spec), 0o644))
	return path
}

// listening returns the port the node's log says it listens on.
func listeningPort(dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, "logs", "n1.log"))
	if err != nil {
		return ""
	}
	_, rest, ok := strings.Cut(string(b), "listening on 127.0.0.1:")
	if !ok {
		return ""
	}
	port, _, _ := strings.Cut(rest, ",")
	return strings.TrimSpace(port)
}

func portOpen(port string) bool {
	c, err := net.DialTimeout("tcp", "127.0.0.1:"+port, 200*time.Millisecond)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// kill -9 of the harness while a command node runs behind a shell wrapper:
// the reaper kills the node's whole process group, the grandchild server
// included, within seconds.
func TestTrialKillLeavesNoCommandNodeRunning(t *testing.T) {
	store := t.TempDir()
	c := startCLI(t, "test", "--target", "spec:"+wrapperSpec(t), "--time", "2m", "--nemesis", "none",
		"--quiet", "--store", store)
	waitFor(t, 90*time.Second, "the main phase", func() bool { return inMainPhase(store) })
	port := listeningPort(runDir(store))
	require.NotEmpty(t, port, "stderr:\n%s", c.stderr.String())
	require.True(t, portOpen(port))
	require.NoError(t, c.cmd.Process.Kill())
	c.wait(t, 10*time.Second)
	killed := time.Now()
	waitFor(t, 10*time.Second, "the grandchild server to die", func() bool { return !portOpen(port) })
	t.Logf("port %s closed %.1fs after kill -9", port, time.Since(killed).Seconds())
}

// Bad numbers are usage errors (exit 64) that name the flag: negative
// minimums and timeouts (which used to mean "none" or "no limit"), and
// client counts past what the machine can hold.
func TestFlagBounds(t *testing.T) {
	store := t.TempDir()
	hist := filepath.Join(t.TempDir(), "h.jsonl")
	require.NoError(t, os.WriteFile(hist, nil, 0o644))
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"test", "--min-ops", "-1", "--time", "1ns"}, "--min-ops"},
		{[]string{"test", "--check-timeout", "-1s"}, "--check-timeout must be positive, got -1s"},
		{[]string{"test", "--readers", "100000"}, "--readers must be 0..1000, got 100000"},
		{[]string{"test", "--concurrency", "100000"}, "--concurrency must be 1..1000, got 100000"},
		{[]string{"test", "--time", "-1s"}, "--time must be positive, got -1s"},
		{[]string{"test", "--recovery", "-1s"}, "--recovery must be positive, got -1s"},
		{[]string{"test", "--op-timeout", "-1s"}, "--op-timeout must be positive, got -1s"},
		{[]string{"check", "--min-ops", "-1", hist}, "--min-ops must be 0 (no minimum) or more, got -1"},
		{[]string{"check", "--timeout", "-1s", hist}, "--timeout must be positive, got -1s"},
		{[]string{"check", "--ttl", "-1s", hist}, "--ttl must be positive, got -1s"},
		{[]string{"report", "--min-ops", "-5", store}, "--min-ops must be 0 (no minimum) or more, got -5"},
	} {
		args := tc.args
		if args[0] == "test" {
			args = append(args, "--store", store)
		}
		c := startCLI(t, args...)
		assert.Equal(t, analysis.ExitUsage, c.wait(t, 30*time.Second), "%v: %s", tc.args, c.stderr.String())
		assert.Contains(t, c.stderr.String(), tc.want, "%v", tc.args)
	}
}

// Values from the system under test reach the terminal escaped: a read that
// returned an escape sequence (clear screen, window title) shows up in the
// anomaly lines as text, and no control byte is printed.
func TestCheckOutputEscapesTheSystemsBytes(t *testing.T) {
	evil := "\x1b]0;owned\x07\x1b[2J\u009b31m"
	b := historytest.New()
	for i := 1; i <= 6; i++ {
		tok := fmt.Sprint(i)
		at := int64(i * 100)
		b.Acquire("k1", at, at+5, tok).Write("k1", tok, "v"+tok, at+10, at+20)
	}
	b.Read("k1", 700, 710, evil, "6").WriteFail("k1", "7", "x", 720, 730, "\x1b[2Jstale")
	path := filepath.Join(t.TempDir(), "h.jsonl")
	f, err := os.Create(path)
	require.NoError(t, err)
	for _, e := range b.Events() {
		line, err := json.Marshal(e)
		require.NoError(t, err)
		f.Write(append(line, '\n'))
	}
	require.NoError(t, f.Close())

	c := startCLI(t, "check", path)
	assert.Equal(t, analysis.ExitInvalid, c.wait(t, 60*time.Second), c.stderr.String())
	out := c.stdout.String() + c.stderr.String()
	assert.Contains(t, out, `\x1b]0;owned\x07\x1b[2J\u009b31m`, "the value is shown, escaped:\n%s", out)
	for _, bad := range []string{"\x1b", "\x07", "\u009b"} {
		assert.NotContains(t, out, bad)
	}
}

// runIDOf is the run id config.json records.
func runIDOf(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, reports.ConfigFile))
	require.NoError(t, err)
	var c struct {
		RunID string `json:"run_id"`
	}
	require.NoError(t, json.Unmarshal(b, &c))
	require.NotEmpty(t, c.RunID)
	return c.RunID
}

// The first trial, on the Redis target: the run's containers are
// removed under it in the main phase (as `clean --all` would). The system
// stopped serving and never came back: the run must end unknown (exit 2)
// with both reasons, write its reports, and leave nothing behind.
func TestTrialDockerContainersRemovedUnderALiveRunIsUnknown(t *testing.T) {
	dockertest.Require(t)
	store := t.TempDir()
	c := startCLI(t, "test", "--target", "redis", "--time", "8s", "--nemesis", "none", "--recovery", "2s",
		"--quiet", "--store", store)
	// Setup may build the images (once per content: shared with the other
	// Docker tests).
	waitFor(t, 8*time.Minute, "the main phase", func() bool {
		return inMainPhase(store) || strings.Contains(c.stderr.String(), "final phase:")
	})
	dir := runDir(store)
	id := runIDOf(t, dir)
	cli, err := docker.Connect(context.Background())
	require.NoError(t, err)
	defer cli.Close()
	_, err = docker.Sweep(context.Background(), cli, id)
	require.NoError(t, err)

	code := c.wait(t, 2*time.Minute)
	assert.Equal(t, analysis.ExitUnknown, code, "stdout:\n%s\nstderr:\n%s", c.stdout.String(), c.stderr.String())
	out := c.stdout.String()
	t.Logf("summary:\n%s", out)
	assert.Contains(t, out, "gate: node ")
	assert.Contains(t, out, "the system stopped serving")
	assert.Contains(t, out, "final: recovery:")
	assert.Contains(t, out, "run: did not complete: its final phase failed")
	assert.FileExists(t, filepath.Join(dir, reports.ReportFile))
	cs, ns := dockertest.Leftovers(t, id)
	assert.Zero(t, cs+ns, "containers or networks of run %s left behind", id)
}
