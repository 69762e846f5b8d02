package redis

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/harness/docker"
)

// The image carries the binary under the name redis-server, every library,
// the loader as a real file, the skew library and a 1777 /tmp.
func TestImageSpecContents(t *testing.T) {
	requireTool(t, "redis-server", "redis-server")
	requireTool(t, "gcc", "gcc libc6-dev")
	spec, err := ImageSpec(context.Background(), nil)
	require.NoError(t, err)
	assert.Equal(t, "fencecheck/redis", spec.Repository)
	assert.NotContains(t, spec.Dockerfile, "# syntax=")
	assert.True(t, strings.HasPrefix(spec.Dockerfile, "FROM scratch"))
	files := map[string]docker.File{}
	for _, f := range spec.Files {
		files[f.Name] = f
	}
	for _, name := range []string{"rootfs" + RedisBinary, "rootfs" + Loader, "rootfs" + SkewLibrary} {
		f, ok := files[name]
		if assert.True(t, ok, "image lacks %s", name) {
			assert.False(t, f.Dir)
			assert.Greater(t, len(f.Data), 1000, "%s must be the real file, not a symlink", name)
		}
	}
	assert.Equal(t, int64(0o1777), files["rootfs/tmp"].Mode)
	assert.True(t, files["rootfs/usr/lib/fencecheck"].Dir, "parent directories are explicit")

	// The same inputs make the same image: the content hash is the cache key.
	again, err := ImageSpec(context.Background(), nil)
	require.NoError(t, err)
	assert.Equal(t, spec.ContentHash(), again.ContentHash())
}
