package main

import (
	"bytes"
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestZooKeeperBackendNeedsServers(t *testing.T) {
	var stderr bytes.Buffer
	code := run(context.Background(), []string{"--addr", "127.0.0.1:0", "--backend", "zookeeper"}, &stderr, noEnv, nil)
	assert.Equal(t, exitError, code)
	assert.Contains(t, stderr.String(), "--zk-servers")
}

// The adapter starts without waiting for the ensemble (servers may come up
// after it) and answers health with 503 until a quorum answers.
func TestZooKeeperBackendUnhealthyWithoutEnsemble(t *testing.T) {
	url, stop := serve(t, "--backend", "zookeeper", "--zk-servers", "127.0.0.1:1")
	resp, err := http.Get(url + "/v1/health")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	assert.Equal(t, exitOK, stop())
}
