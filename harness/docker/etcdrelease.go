package docker

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/fencecheck/fencecheck/durable"
)

// EtcdImage is the name of the etcd image at a release: ImageEtcd itself
// for "" (the release the nested module images/etcd pins), else
// "etcd@v3.5.36", which EnsureImages builds from that release's server
// module as the Go module proxy serves it.
func EtcdImage(version string) string {
	if version == "" {
		return ImageEtcd
	}
	return ImageEtcd + "@" + version
}

// splitVersion parses "etcd@v3.5.36" into its image and release.
func splitVersion(name string) (base, version string) {
	base, version, _ = strings.Cut(name, "@")
	return base, version
}

// buildEtcdRelease compiles the etcd server at one release: a module of its
// own in the cache (etcd-src-VERSION: a go.mod requiring
// go.etcd.io/etcd/server/v3 at that release, images/etcd's main.go, and the
// go.sum `go mod tidy` writes from the module proxy the first time), built
// once per content and Go version like buildEtcdBinary. etcdmain.Main is
// the same call from 3.5 to 3.7, so one main.go serves every release the
// proxy has under that module path (3.4 and older predate it).
func buildEtcdRelease(ctx context.Context, src, cache, version string, progress io.Writer) (string, error) {
	if !etcdReleaseRE.MatchString(version) {
		return "", fmt.Errorf("etcd release %q: want v3.x.y (etcd@v3.5.0)", version)
	}
	dir := filepath.Join(cache, "etcd-src-"+version)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	main, err := os.ReadFile(filepath.Join(src, "images", "etcd", "main.go"))
	if err != nil {
		return "", err
	}
	mod := fmt.Sprintf("module github.com/fencecheck/fencecheck/images/etcd\n\ngo 1.26.0\n\nrequire go.etcd.io/etcd/server/v3 %s\n", version)
	if err := writeIfChanged(filepath.Join(dir, "main.go"), main); err != nil {
		return "", err
	}
	// go.mod is the one tidy completed: a new go.mod starts a new go.sum.
	if old, err := os.ReadFile(filepath.Join(dir, "go.mod.base")); err != nil || string(old) != mod {
		os.Remove(filepath.Join(dir, "go.sum"))
		if err := durable.WriteFile(filepath.Join(dir, "go.mod"), []byte(mod), 0o644); err != nil {
			return "", err
		}
		fmt.Fprintf(progress, "image etcd %s: resolving its modules from the Go module proxy (first time only)\n", version)
		tidy := exec.CommandContext(ctx, "go", "mod", "tidy")
		tidy.Dir = dir
		if b, err := tidy.CombinedOutput(); err != nil {
			return "", fmt.Errorf("etcd %s: go mod tidy: %w\n%s", version, err, b)
		}
		if err := durable.WriteFile(filepath.Join(dir, "go.mod.base"), []byte(mod), 0o644); err != nil {
			return "", err
		}
	}
	return compileEtcd(ctx, dir, filepath.Join(cache, "etcd-"+version+"-"), progress,
		fmt.Sprintf("image etcd %s: compiling the etcd server at that release (first time only: a few minutes)", version))
}

var etcdReleaseRE = regexp.MustCompile(`^v3\.[0-9]+\.[0-9]+(-[0-9A-Za-z.]+)?$`)

// writeIfChanged writes data to path unless it holds it already.
func writeIfChanged(path string, data []byte) error {
	if old, err := os.ReadFile(path); err == nil && string(old) == string(data) {
		return nil
	}
	return durable.WriteFile(path, data, 0o644)
}
