package main

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/fencing"
	"github.com/fencecheck/fencecheck/history"
)

func noEnv(string) string { return "" }

// serve runs the command until the returned stop is called; stop returns
// the exit code.
func serve(t *testing.T, args ...string) (url string, stop func() int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	addrc := make(chan string, 1)
	codec := make(chan int, 1)
	var stderr bytes.Buffer
	go func() {
		codec <- run(ctx, append([]string{"--addr", "127.0.0.1:0"}, args...), &stderr, noEnv, func(a string) { addrc <- a })
	}()
	select {
	case a := <-addrc:
		return "http://" + a, func() int { cancel(); return <-codec }
	case code := <-codec:
		cancel()
		t.Fatalf("fenced exited %d: %s", code, stderr.String())
	case <-time.After(5 * time.Second):
		cancel()
		t.Fatal("fenced did not start")
	}
	return "", nil
}

func TestMemoryBackendIsDurable(t *testing.T) {
	dir := t.TempDir()
	url, stop := serve(t, "--backend", "memory", "--data", dir)
	c := fencing.NewClient(url, nil)
	ctx := context.Background()
	r := c.Acquire(ctx, "l", "c1", time.Minute)
	require.Equal(t, fencing.Ok, r.Outcome)
	require.Equal(t, fencing.Ok, c.Write(ctx, "k", r.Token, []byte("v1")).Outcome)
	assert.Equal(t, 0, stop(), "SIGTERM is a clean stop")

	url, stop = serve(t, "--backend", "memory", "--data", dir)
	defer stop()
	c = fencing.NewClient(url, nil)
	r = c.Read(ctx, "k")
	assert.Equal(t, "v1", string(r.Value))
	assert.Equal(t, "1", r.Token)
}

func TestSealKeyAndBugFlags(t *testing.T) {
	url, stop := serve(t, "--data", t.TempDir(), "--seal-key", "s3cret", "--bug", "accept-forged")
	defer stop()
	c := fencing.NewClient(url, nil)
	ctx := context.Background()
	r := c.Acquire(ctx, "l", "c1", time.Minute)
	assert.Equal(t, fencing.NewSealer([]byte("s3cret")).Seal(1), r.Token)
	assert.Equal(t, fencing.Ok, c.Write(ctx, "k", "999", []byte("forged")).Outcome, "accept-forged skips the seal check")
}

func TestClockOffsetFile(t *testing.T) {
	clock := filepath.Join(t.TempDir(), "offset")
	url, stop := serve(t, "--data", t.TempDir(), "--clock-offset-file", clock)
	defer stop()
	c := fencing.NewClient(url, nil)
	ctx := context.Background()
	require.Equal(t, fencing.Ok, c.Acquire(ctx, "l", "c1", time.Minute).Outcome)
	require.Equal(t, "held", c.Acquire(ctx, "l", "c2", time.Minute).Error)
	require.NoError(t, fencing.WriteClockOffset(clock, 2*time.Minute))
	time.Sleep(20 * time.Millisecond)
	assert.Equal(t, fencing.Ok, c.Acquire(ctx, "l", "c2", time.Minute).Outcome, "the offset file expired the lease")
}

func TestUsageErrors(t *testing.T) {
	registerBackend("fake-nobugs", Backend{Usage: "test", Flags: func(fs *flag.FlagSet) { fs.String("fake-addr", "", "") },
		Open: func(context.Context, Config) (fencing.Store, fencing.ServerOptions, error) { panic("not reached") }})
	defer delete(backends, "fake-nobugs")
	for _, args := range [][]string{
		{"--backend", "nope"},
		{"--data", "x", "--bug", "nope"},
		{"--backend", "fake-nobugs", "--bug", "accept-equal"},
		{"--no-such-flag"},
		{"--data", "x", "extra"},
	} {
		var stderr bytes.Buffer
		assert.Equal(t, exitUsage, run(context.Background(), args, &stderr, noEnv, nil), "%q", args)
		assert.NotEmpty(t, stderr.String())
	}
	var stderr bytes.Buffer
	assert.Equal(t, exitError, run(context.Background(), []string{"--backend", "memory"}, &stderr, noEnv, nil), "memory needs --data")
	assert.Contains(t, stderr.String(), "--data")
	stderr.Reset()
	assert.Equal(t, exitOK, run(context.Background(), []string{"--help"}, &stderr, noEnv, nil))
	assert.Contains(t, stderr.String(), "memory")
	assert.Contains(t, stderr.String(), "-fake-addr")
}

func TestClockFileFromEnv(t *testing.T) {
	clock := filepath.Join(t.TempDir(), "offset")
	require.NoError(t, os.WriteFile(clock, []byte("3600000000000"), 0o644))
	ctx, cancel := context.WithCancel(context.Background())
	var stderr bytes.Buffer
	addrc := make(chan string, 1)
	done := make(chan int, 1)
	env := func(k string) string {
		if k == fencing.ClockFileEnv {
			return clock
		}
		return ""
	}
	go func() {
		done <- run(ctx, []string{"--addr", "127.0.0.1:0", "--data", t.TempDir(), "--bug", "wallclock-tokens"}, &stderr, env, func(a string) { addrc <- a })
	}()
	url := "http://" + <-addrc
	r := fencing.NewClient(url, nil).Acquire(context.Background(), "l", "c", time.Second)
	n, _, err := history.SplitToken(r.Token)
	require.NoError(t, err)
	assert.InDelta(t, float64(time.Now().Add(time.Hour).UnixMilli()), float64(n), 5000, "wall-clock tokens follow the env's offset file")
	cancel()
	assert.Equal(t, 0, <-done)
}
