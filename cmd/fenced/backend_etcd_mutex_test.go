package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestEtcdMutexBackendNeedsEndpoints(t *testing.T) {
	var stderr bytes.Buffer
	code := run(context.Background(), []string{"--addr", "127.0.0.1:0", "--backend", "etcd-mutex"}, &stderr, noEnv, nil)
	assert.Equal(t, exitError, code)
	assert.Contains(t, stderr.String(), "--backend etcd-mutex needs --etcd-endpoints")
}
