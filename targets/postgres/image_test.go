package postgres

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

func requirePostgres(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(binDir + "/postgres"); err != nil {
		if dockertest.Required() {
			t.Fatalf("%s/postgres not found: CI must install Debian's postgresql-15", binDir)
		}
		t.Skip("Debian's postgresql-15 is not installed")
	}
}

// The image carries postgres and initdb, the shell initdb runs postgres
// through, the loader as a real file, plpgsql and the share directory,
// the skew library, and no LLVM.
func TestImageSpecContents(t *testing.T) {
	requirePostgres(t)
	spec, err := ImageSpec(context.Background(), nil)
	require.NoError(t, err)
	assert.Equal(t, docker.RootfsDockerfile, spec.Dockerfile)
	files := map[string]docker.File{}
	for _, f := range spec.Files {
		files[f.Name] = f
		assert.NotContains(t, f.Name, "llvm", "the JIT would bring LLVM along")
	}
	for _, name := range []string{binDir + "/postgres", binDir + "/initdb", "/bin/sh", "/lib64/ld-linux-x86-64.so.2",
		libDir + "/plpgsql.so", shareDir + "/postgres.bki", "/usr/share/zoneinfo/UTC", docker.SkewLibrary} {
		f, ok := files["rootfs"+name]
		if assert.True(t, ok, "image lacks %s", name) {
			assert.False(t, f.Dir)
			assert.Greater(t, len(f.Data), 100, "%s must be the real file", name)
		}
	}
	assert.Contains(t, string(files["rootfs"+hbaFile].Data), "host all all 0.0.0.0/0 trust")
	assert.Equal(t, int64(0o1777), files["rootfs/tmp"].Mode)

	again, err := ImageSpec(context.Background(), nil)
	require.NoError(t, err)
	assert.Equal(t, spec.ContentHash(), again.ContentHash(), "the same inputs make the same image")
}

// The targets differ only where they say: durability and the check's place.
func TestTargetsSettings(t *testing.T) {
	assert.Equal(t, "postgres", Options{}.Name())
	assert.Equal(t, "postgres-trigger", Options{Mode: Trigger}.Name())
	assert.Equal(t, "postgres-async", Options{Async: true}.Name())
	sync := strings.Join(Options{}.settings(), " ")
	async := strings.Join(Options{Async: true}.settings(), " ")
	assert.Contains(t, sync, "synchronous_commit=on")
	assert.Contains(t, sync, "fsync=on")
	assert.Contains(t, async, "synchronous_commit=off")
	assert.Contains(t, async, "fsync=on", "only the commit's wait is relaxed, not fsync")
	cmd := Options{}.serverCmd()
	require.Len(t, cmd, 3)
	assert.Equal(t, "/bin/sh", cmd[0])
	assert.Contains(t, cmd[2], "initdb", "an empty data folder is initialised on first start")
	assert.Contains(t, cmd[2], "exec "+binDir+"/postgres", "postgres replaces the shell as PID 1, so kill -9 reaches it")
	_, err := ParseMode("nope")
	assert.Error(t, err)
}
