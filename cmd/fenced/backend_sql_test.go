package main

import (
	"bytes"
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSQLBackendsNeedDSN(t *testing.T) {
	for backend, flag := range map[string]string{"postgres": "--postgres-dsn", "mysql": "--mysql-dsn"} {
		var stderr bytes.Buffer
		code := run(context.Background(), []string{"--addr", "127.0.0.1:0", "--backend", backend}, &stderr, noEnv, nil)
		assert.Equal(t, exitError, code, backend)
		assert.Contains(t, stderr.String(), flag)
	}
	var stderr bytes.Buffer
	code := run(context.Background(), []string{"--addr", "127.0.0.1:0", "--backend", "postgres", "--postgres-dsn", "postgres://u@127.0.0.1:1/db",
		"--postgres-fence", "sometimes"}, &stderr, noEnv, nil)
	assert.Equal(t, exitError, code)
	assert.Contains(t, stderr.String(), "conditional or trigger")
}

// The adapter starts without its database and says it is not ready.
func TestSQLBackendsUnhealthyWithoutDatabase(t *testing.T) {
	for _, args := range [][]string{
		{"--backend", "postgres", "--postgres-dsn", "postgres://u@127.0.0.1:1/db?sslmode=disable", "--postgres-timeout", "200ms"},
		{"--backend", "mysql", "--mysql-dsn", "u@tcp(127.0.0.1:1)/db", "--mysql-timeout", "200ms"},
	} {
		url, stop := serve(t, args...)
		resp, err := http.Get(url + "/v1/health")
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, args[1])
		assert.Equal(t, exitOK, stop())
	}
}
