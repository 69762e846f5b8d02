package docker

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseLdd(t *testing.T) {
	out := []byte(`	linux-vdso.so.1 (0x00007ffd)
	libssl.so.3 => /lib/x86_64-linux-gnu/libssl.so.3 (0x00007f94)
	libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f94)
	/lib64/ld-linux-x86-64.so.2 (0x00007f94)
	libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f94)
`)
	libs, err := ParseLdd(out)
	require.NoError(t, err)
	assert.Equal(t, []string{"/lib/x86_64-linux-gnu/libc.so.6", "/lib/x86_64-linux-gnu/libssl.so.3", "/lib64/ld-linux-x86-64.so.2"}, libs)

	_, err = ParseLdd([]byte("\tlibfoo.so.1 => not found\n"))
	require.ErrorContains(t, err, "missing")
}

func byName(files []File) map[string]File {
	m := map[string]File{}
	for _, f := range files {
		m[f.Name] = f
	}
	return m
}

// A binary comes with every library it loads and the loader, as real files
// under the names it asks for; parents are explicit and /tmp is 1777.
func TestRootfsBinaryBringsItsLibraries(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("ldd is Linux's")
	}
	sh, err := filepath.EvalSymlinks("/bin/sh")
	require.NoError(t, err)
	fs := NewRootfs()
	require.NoError(t, fs.Binary(context.Background(), "/bin/sh", "/bin/sh"))
	files := byName(fs.Files())
	want, err := os.ReadFile(sh)
	require.NoError(t, err)
	assert.Equal(t, want, files["rootfs/bin/sh"].Data, "the symlink's target, under the link's name")
	libs, err := SharedLibraries(context.Background(), sh)
	require.NoError(t, err)
	require.NotEmpty(t, libs, "/bin/sh is dynamically linked on Debian")
	for _, lib := range libs {
		f, ok := files["rootfs"+lib]
		if assert.True(t, ok, "image lacks %s", lib) {
			assert.Greater(t, len(f.Data), 1000, "%s must be the real file", lib)
		}
	}
	assert.Equal(t, int64(0o1777), files["rootfs/tmp"].Mode)
	assert.True(t, files["rootfs/bin"].Dir, "parent directories are explicit")
	_, hasRoot := files["rootfs"]
	assert.False(t, hasRoot, "the context's rootfs/ folder itself comes from COPY, not from an entry")
}

// A tree keeps what keep accepts, reads symlinked files through, and
// leaves linked directories out.
func TestRootfsTree(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "a", "b"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "a", "b", "x.txt"), []byte("x"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "run.sh"), []byte("#!"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "skip.me"), []byte("no"), 0o644))
	require.NoError(t, os.Symlink("run.sh", filepath.Join(dir, "link")))
	require.NoError(t, os.Symlink("a", filepath.Join(dir, "dirlink")))
	fs := NewRootfs()
	require.NoError(t, fs.Tree(context.Background(), dir, "/opt/t", func(rel string) bool { return rel != "skip.me" }))
	files := byName(fs.Files())
	assert.Equal(t, []byte("x"), files["rootfs/opt/t/a/b/x.txt"].Data)
	assert.Equal(t, int64(0o755), files["rootfs/opt/t/run.sh"].Mode)
	assert.Equal(t, []byte("#!"), files["rootfs/opt/t/link"].Data)
	assert.NotContains(t, files, "rootfs/opt/t/skip.me")
	assert.NotContains(t, files, "rootfs/opt/t/dirlink")
	assert.True(t, files["rootfs/opt"].Dir)
}

func TestSharedLibrariesOfAStaticBinary(t *testing.T) {
	gofmt := filepath.Join(runtime.GOROOT(), "bin", "gofmt")
	if _, err := os.Stat(gofmt); err != nil {
		if TestsRequired() {
			t.Fatalf("no gofmt in GOROOT (%v): CI's Go install must have it", err)
		}
		t.Skip("no gofmt in GOROOT")
	}
	libs, err := SharedLibraries(context.Background(), gofmt)
	require.NoError(t, err)
	assert.Empty(t, libs, "Go's own tools are static")
}

func TestUpstreamVersion(t *testing.T) {
	for in, want := range map[string]string{"5:7.0.15-1~deb12u10": "7.0.15", "15.18-0+deb12u1": "15.18",
		"1:10.11.14-0+deb12u2": "10.11.14", "3.8.0-11": "3.8.0", "1.2": "1.2"} {
		if got := UpstreamVersion(in); got != want {
			t.Errorf("UpstreamVersion(%q) = %q, want %q", in, got, want)
		}
	}
}

// The package named is the one owning the path asked about, not its link's
// target: /usr/bin/redis-server links to redis-tools' binary.
func TestDebianSystemNamesThePathsOwnPackage(t *testing.T) {
	if _, err := os.Stat("/usr/bin/redis-server"); err != nil {
		if TestsRequired() {
			t.Fatal("redis-server not found: CI must install it (apt-get install -y redis-server)")
		}
		t.Skip("redis-server is not installed here")
	}
	s, err := DebianSystem(t.Context(), "Redis", "/usr/bin/redis-server")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(s, "Redis ") || !strings.Contains(s, "(Debian package redis-server ") {
		t.Errorf("DebianSystem = %q", s)
	}
}
