package redis

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/harness/docker/dockertest"
)

// requireTool finds a program the test needs. Missing it is a failure in CI
// (the CI script installs it) and a skip only on a developer's machine.
func requireTool(t *testing.T, name, pkg string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err == nil {
		return path
	}
	if dockertest.Required() {
		t.Fatalf("%s not found: CI must install it (apt-get install -y %s)", name, pkg)
	}
	t.Skipf("%s not found; install it with: apt-get install -y %s", name, pkg)
	return ""
}

// localRedis is a redis-server the test started on a free loopback port.
type localRedis struct {
	Addr   string
	Dir    string
	cmd    *exec.Cmd
	output *lockedBuffer
}

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

func freeLoopbackPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	return port
}

// startLocalRedis runs redis-server with no persistence in a temp dir, plus
// extra config arguments and environment, and waits until it answers PING.
// It is killed when the test ends.
func startLocalRedis(t *testing.T, env []string, extra ...string) *localRedis {
	t.Helper()
	bin := requireTool(t, "redis-server", "redis-server")
	dir := t.TempDir()
	port := freeLoopbackPort(t)
	args := []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir,
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--loglevel", "notice"}
	args = append(args, extra...)
	out := &lockedBuffer{}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = out, out
	require.NoError(t, cmd.Start())
	r := &localRedis{Addr: "127.0.0.1:" + strconv.Itoa(port), Dir: dir, cmd: cmd, output: out}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("redis-server output:\n%s", out.String())
		}
	})
	client := goredis.NewClient(&goredis.Options{Addr: r.Addr, MaxRetries: -1})
	defer client.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		err := client.Ping(ctx).Err()
		cancel()
		if err == nil {
			return r
		}
		select {
		case <-exited:
			t.Fatalf("redis-server exited before answering: %s", out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server on %s did not answer PING within 10 s: %v\n%s", r.Addr, err, out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (r *localRedis) client(t *testing.T) *goredis.Client {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: r.Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func tempFile(t *testing.T, name string) string {
	t.Helper()
	return filepath.Join(t.TempDir(), name)
}

func writeRaw(path, content string) error { return os.WriteFile(path, []byte(content), 0o644) }

func removeFile(path string) error { return os.Remove(path) }
