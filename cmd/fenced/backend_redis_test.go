package main

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/harness/docker/dockertest"
)

func TestRedisBackendNeedsAddr(t *testing.T) {
	var stderr bytes.Buffer
	code := run(context.Background(), []string{"--addr", "127.0.0.1:0", "--backend", "redis"}, &stderr, noEnv, nil)
	assert.Equal(t, exitError, code)
	assert.Contains(t, stderr.String(), "--redis-addr")
}

func TestRedisBackendUnhealthyWithoutRedis(t *testing.T) {
	url, stop := serve(t, "--backend", "redis", "--redis-addr", "127.0.0.1:1", "--redis-timeout", "200ms")
	resp, err := http.Get(url + "/v1/health")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	assert.Equal(t, exitOK, stop())
}

// A round trip through the adapter to a real redis-server.
func TestRedisBackendServesTheAPI(t *testing.T) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if dockertest.Required() {
			t.Fatal("redis-server not found: CI must install it (apt-get install -y redis-server)")
		}
		t.Skip("redis-server not found; apt-get install -y redis-server")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	srv := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", t.TempDir(),
		"--save", "", "--appendonly", "no")
	require.NoError(t, srv.Start())
	t.Cleanup(func() { _ = srv.Process.Kill(); _ = srv.Wait() })

	url, stop := serve(t, "--backend", "redis", "--redis-addr", "127.0.0.1:"+strconv.Itoa(port))
	defer stop()
	require.Eventually(t, func() bool {
		resp, err := http.Get(url + "/v1/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 10*time.Second, 50*time.Millisecond, "adapter never became healthy")

	post := func(path, body string) (int, string) {
		resp, err := http.Post(url+path, "application/json", strings.NewReader(body))
		require.NoError(t, err)
		defer resp.Body.Close()
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		return resp.StatusCode, b.String()
	}
	code, body := post("/v1/locks/k/acquire", `{"owner":"c1","ttl_ms":60000}`)
	require.Equal(t, http.StatusOK, code, body)
	assert.Contains(t, body, `"token":"1"`)
	code, body = post("/v1/locks/k/acquire", `{"owner":"c2","ttl_ms":60000}`)
	assert.Equal(t, http.StatusConflict, code, body)

	put := func(token, value string) int {
		req, err := http.NewRequest(http.MethodPut, url+"/v1/resources/k", strings.NewReader(value))
		require.NoError(t, err)
		if token != "" {
			req.Header.Set("Fencing-Token", token)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	assert.Equal(t, http.StatusNoContent, put("1", "v1"))
	assert.Equal(t, http.StatusConflict, put("1", "v1-again"), "equal token: stale")
	assert.Equal(t, http.StatusPreconditionRequired, put("", "no-token"))
}
