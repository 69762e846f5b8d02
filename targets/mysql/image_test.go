package mysql

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/harness/docker"
	"github.com/fencecheck/fencecheck/harness/docker/dockertest"
)

func requireMariaDB(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(serverBinary); err != nil {
		if dockertest.Required() {
			t.Fatalf("%s not found: CI must install Debian's mariadb-server", serverBinary)
		}
		t.Skip("Debian's mariadb-server is not installed")
	}
}

// The image carries mariadbd, a shell for the bootstrap's redirection, the
// loader as a real file, the English messages, and bootstrap SQL that makes
// the adapters' account and database.
func TestImageSpecContents(t *testing.T) {
	requireMariaDB(t)
	spec, err := ImageSpec(context.Background(), nil)
	require.NoError(t, err)
	files := map[string]docker.File{}
	for _, f := range spec.Files {
		files[f.Name] = f
	}
	for _, name := range []string{serverBinary, "/bin/sh", "/lib64/ld-linux-x86-64.so.2", shareDir + "/english/errmsg.sys",
		shareDir + "/charsets/Index.xml", BootstrapSQL, docker.SkewLibrary} {
		f, ok := files["rootfs"+name]
		if assert.True(t, ok, "image lacks %s", name) {
			assert.Greater(t, len(f.Data), 100, "%s must be the real file", name)
		}
	}
	boot := string(files["rootfs"+BootstrapSQL].Data)
	assert.True(t, strings.HasPrefix(boot, "create database if not exists mysql;\nuse mysql;"))
	assert.Contains(t, boot, "CREATE DATABASE IF NOT EXISTS fencecheck;")
	assert.Contains(t, boot, "INSERT INTO mysql.global_priv (Host, User, Priv) VALUES ('%', 'fencecheck'")

	again, err := ImageSpec(context.Background(), nil)
	require.NoError(t, err)
	assert.Equal(t, spec.ContentHash(), again.ContentHash(), "the same inputs make the same image")
}

// Durability is InnoDB's, spelled out: every commit flushes the redo log.
func TestServerSettings(t *testing.T) {
	s := strings.Join(settings, " ")
	assert.Contains(t, s, "--innodb-flush-log-at-trx-commit=1")
	assert.Contains(t, s, "--innodb-doublewrite=1")
	assert.Contains(t, s, "--skip-log-bin")
	cmd := serverCmd()
	assert.Contains(t, cmd[2], "--bootstrap", "an empty data folder is bootstrapped on first start")
	assert.Contains(t, cmd[2], "exec "+serverBinary, "mariadbd replaces the shell as PID 1")
}
