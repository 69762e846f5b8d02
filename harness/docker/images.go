package docker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"

	"github.com/fencecheck/fencecheck/durable"
)

// The project's images. Each is a static binary in a scratch image with a
// 1777 /tmp (scratch has none); the Dockerfile text lives here, not in
// files, so the build context is exactly what the content hash covers.
const (
	ImageEtcd   = "etcd"   // the etcd server, from the nested module images/etcd
	ImageFenced = "fenced" // the adapter, from cmd/fenced in the main module
	// The fault helpers (helper.go), from the main module: cmd/netcut
	// (partitions) and cmd/timewarp (clocks).
	ImageNetcut   = "netcut"
	ImageTimewarp = "timewarp"
)

// knownImages builds each image's binary and says where it goes.
var knownImages = map[string]struct {
	binary string // path of the binary inside the image
	build  func(ctx context.Context, src, cache string, progress io.Writer) (string, error)
}{
	ImageEtcd:     {binary: "/usr/local/bin/etcd", build: buildEtcdBinary},
	ImageFenced:   {binary: "/usr/local/bin/fenced", build: mainBinary("fenced", "./cmd/fenced")},
	ImageNetcut:   {binary: "/netcut", build: mainBinary("netcut", "./cmd/netcut")},
	ImageTimewarp: {binary: "/timewarp", build: mainBinary("timewarp", "./cmd/timewarp")},
}

// KnownImages lists the image names EnsureImages accepts.
func KnownImages() []string {
	names := make([]string, 0, len(knownImages)+len(registeredImages))
	for n := range knownImages {
		names = append(names, n)
	}
	for n := range registeredImages {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

const scratchDockerfile = `FROM scratch
COPY rootfs/ /
`

// EnsureImages builds the named images (all known ones when names is empty)
// unless images with the same content exist, and returns name -> tag. The
// first run on a machine pays for the builds (etcd: about a minute on two
// cores); later runs only rebuild what changed. Progress lines go to
// progress (may be nil).
func EnsureImages(ctx context.Context, progress io.Writer, names ...string) (map[string]string, error) {
	if progress == nil {
		progress = io.Discard
	}
	if len(names) == 0 {
		names = KnownImages()
	}
	for _, name := range names {
		base, _ := splitVersion(name)
		_, known := knownImages[base]
		if base != name && base != ImageEtcd {
			known = false // only etcd is built at a release of one's choice
		}
		if _, registered := registeredImages[name]; !known && !registered {
			return nil, fmt.Errorf("unknown image %q (known: %s)", name, strings.Join(KnownImages(), ", "))
		}
	}
	cli, err := Connect(ctx)
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	cache, err := CacheDir()
	if err != nil {
		return nil, err
	}
	tags := map[string]string{}
	for _, name := range names {
		tag, err := ensureImage(ctx, cli, cache, name, progress)
		if err != nil {
			return nil, err
		}
		tags[name] = tag
	}
	return tags, nil
}

// ensureImage builds one image under a lock of its own: test packages run
// in parallel, and compiling the same binary twice at once on two cores
// would double everyone's wait, while a caller that needs another image
// need not wait at all.
func ensureImage(ctx context.Context, cli *client.Client, cache, name string, progress io.Writer) (string, error) {
	unlock, err := lockFile(filepath.Join(cache, "build-"+name+".lock"))
	if err != nil {
		return "", err
	}
	defer unlock()
	if ensure, ok := registeredImages[name]; ok {
		return ensure(ctx, progress)
	}
	base, version := splitVersion(name)
	known, repository := knownImages[base], "fencecheck/"+name
	build := known.build
	if version != "" {
		// Each release is a repository of its own: building one never
		// prunes another's image.
		repository = "fencecheck/" + base + "-" + version
		build = func(ctx context.Context, src, cache string, progress io.Writer) (string, error) {
			return buildEtcdRelease(ctx, src, cache, version, progress)
		}
	}
	src, err := SourceRoot()
	if err != nil {
		// An installed binary run outside the source tree can still use
		// what `fencecheck images` built before.
		if tag := newestImage(ctx, cli, repository); tag != "" {
			fmt.Fprintf(progress, "image %s: sources not found, using the newest built image %s\n", name, tag)
			return tag, nil
		}
		return "", err
	}
	start := time.Now()
	bin, err := build(ctx, src, cache, progress)
	if err != nil {
		return "", fmt.Errorf("image %s: %w", name, err)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		return "", err
	}
	spec := ImageSpec{
		Repository: repository,
		Dockerfile: scratchDockerfile,
		Files: []File{
			{Name: "rootfs/tmp", Dir: true, Mode: 0o1777},
			{Name: "rootfs" + known.binary, Mode: 0o755, Data: data},
		},
	}
	return buildLogged(ctx, cli, name, spec, progress, start, "")
}

// buildLogged builds spec unless an image with its content exists, prunes
// the images a new build supersedes, and says which it did and how long it
// took (detail adds to that).
func buildLogged(ctx context.Context, cli *client.Client, name string, spec ImageSpec, progress io.Writer, start time.Time, detail string) (string, error) {
	tag, fresh, err := BuildImage(ctx, cli, spec, nil)
	if err != nil {
		return "", fmt.Errorf("image %s: %w", name, err)
	}
	verb := "cached"
	if fresh {
		verb = "built"
		PruneSuperseded(ctx, cli, spec.Repository, tag, time.Hour)
	}
	fmt.Fprintf(progress, "image %s: %s %s (%.1fs%s)\n", name, verb, tag, time.Since(start).Seconds(), detail)
	return tag, nil
}

// newestImage is the most recently built tag of one of our repositories, or
// "" when there is none.
func newestImage(ctx context.Context, cli *client.Client, repository string) string {
	imgs, err := cli.ImageList(ctx, image.ListOptions{Filters: filters.NewArgs(
		filters.Arg("label", LabelProject+"=1"), filters.Arg("reference", repository))})
	if err != nil {
		return ""
	}
	var tag string
	var newest int64
	for _, img := range imgs {
		if len(img.RepoTags) > 0 && img.Created > newest {
			tag, newest = img.RepoTags[0], img.Created
		}
	}
	return tag
}

// PruneSuperseded removes the repository's other images built longer than
// olderThan ago (an hour, from builds), so that every source change does not leave 25 MB behind. An
// image a container still uses is kept (no force); a checkout that still
// needs a removed image builds it again.
func PruneSuperseded(ctx context.Context, cli *client.Client, repository, keep string, olderThan time.Duration) {
	imgs, err := cli.ImageList(ctx, image.ListOptions{Filters: filters.NewArgs(
		filters.Arg("label", LabelProject+"=1"), filters.Arg("reference", repository))})
	if err != nil {
		return
	}
	for _, img := range imgs {
		if slices.Contains(img.RepoTags, keep) || time.Since(time.Unix(img.Created, 0)) < olderThan {
			continue
		}
		cli.ImageRemove(ctx, img.ID, image.RemoveOptions{PruneChildren: true})
	}
}

// buildEtcdBinary compiles the nested module images/etcd, once per content
// of its go.mod, go.sum and main.go and per Go version: the result is kept in
// the cache, so a warm run does not even start the compiler.
func buildEtcdBinary(ctx context.Context, src, cache string, progress io.Writer) (string, error) {
	return compileEtcd(ctx, filepath.Join(src, "images", "etcd"), filepath.Join(cache, "etcd-"), progress,
		"image etcd: compiling the etcd server (first time only: about a minute)")
}

// compileEtcd builds the etcd module in dir into prefix+<hash of its go.mod,
// go.sum, main.go and the Go version>, unless that file is there already.
func compileEtcd(ctx context.Context, dir, prefix string, progress io.Writer, saying string) (string, error) {
	h := sha256.New()
	for _, f := range []string{"go.mod", "go.sum", "main.go"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s %d\n", f, len(b))
		h.Write(b)
	}
	gover, err := goVersion(ctx)
	if err != nil {
		return "", err
	}
	h.Write(gover)
	out := prefix + hex.EncodeToString(h.Sum(nil))[:16]
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	fmt.Fprintln(progress, saying)
	return out, goBuildStatic(ctx, dir, ".", out)
}

// mainBinary builds a command of the main module (cmd/fenced, the fault
// helpers) when the module's sources changed since the cached binary: go
// build relinks a main package every time (seconds, more on a loaded
// machine), and most runs change nothing. The key covers every non-test Go
// file of the module plus go.mod, go.sum and the Go version, which is more
// than one command needs but never less.
func mainBinary(name, pkg string) func(ctx context.Context, src, cache string, progress io.Writer) (string, error) {
	return func(ctx context.Context, src, cache string, progress io.Writer) (string, error) {
		return buildMainBinary(ctx, src, cache, name, pkg, progress)
	}
}

// StaticCommand is a command of the main module built as a static program
// for goarch ("amd64", "arm64"), cached like the images' binaries: the host
// agent that fencecheck copies to the hosts of ssh nodes (cmd/fencehost).
func StaticCommand(ctx context.Context, progress io.Writer, name, pkg, goarch string) (string, error) {
	src, cache, err := sourceAndCache()
	if err != nil {
		return "", err
	}
	return buildMainBinary(ctx, src, cache, name+"-linux-"+goarch, pkg, progress, "GOOS=linux", "GOARCH="+goarch)
}

// sourceAndCache are where binaries are built from and kept.
func sourceAndCache() (src, cache string, err error) {
	if src, err = SourceRoot(); err != nil {
		return "", "", err
	}
	cache, err = CacheDir()
	return src, cache, err
}

func buildMainBinary(ctx context.Context, src, cache, name, pkg string, progress io.Writer, env ...string) (string, error) {
	h := sha256.New()
	err := filepath.WalkDir(src, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		if d.IsDir() {
			// Nested modules (images/), VCS data and run output are not
			// part of the main module's build.
			if rel != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "images" || d.Name() == "store" || d.Name() == "bin") {
				return filepath.SkipDir
			}
			return nil
		}
		if !(strings.HasSuffix(rel, ".go") && !strings.HasSuffix(rel, "_test.go")) && rel != "go.mod" && rel != "go.sum" {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s %d\n", rel, len(b))
		h.Write(b)
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("hashing the sources: %w", err)
	}
	gover, err := goVersion(ctx)
	if err != nil {
		return "", err
	}
	h.Write(gover)
	out := filepath.Join(cache, name+"-"+hex.EncodeToString(h.Sum(nil))[:16])
	now := time.Now()
	if _, err := os.Stat(out); err == nil {
		os.Chtimes(out, now, now) // in use: keep it
		return out, nil
	}
	fmt.Fprintf(progress, "image %s: compiling %s\n", name, pkg)
	if err := goBuildStatic(ctx, src, pkg, out, env...); err != nil {
		return "", err
	}
	// Builds nobody used for a day are of no more use (several checkouts
	// may share the cache, so the others' current builds stay).
	old, _ := filepath.Glob(filepath.Join(cache, name+"-*"))
	for _, o := range old {
		if st, err := os.Stat(o); err == nil && now.Sub(st.ModTime()) > 24*time.Hour {
			os.Remove(o)
		}
	}
	return out, nil
}

// goVersion is the version of the go command that will build the images.
func goVersion(ctx context.Context) ([]byte, error) {
	v, err := exec.CommandContext(ctx, "go", "env", "GOVERSION").Output()
	if err != nil {
		return nil, fmt.Errorf("the go toolchain is needed to build images: %w", err)
	}
	return v, nil
}

// goBuildStatic builds a static, reproducible binary (no cgo, no paths, no
// VCS stamp: same sources, same bytes, same image hash) and moves it into
// place atomically. The build goes to a folder of its own, so checkouts that
// share the cache and build at once never write into one file.
func goBuildStatic(ctx context.Context, dir, pkg, out string, env ...string) error {
	tmpDir, err := os.MkdirTemp(filepath.Dir(out), ".build-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmpDir)
	tmp := filepath.Join(tmpDir, filepath.Base(out))
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=false", "-ldflags=-s -w", "-o", tmp, pkg)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "CGO_ENABLED=0"), env...)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s in %s: %w\n%s", pkg, dir, err, b)
	}
	bin, err := os.Open(tmp)
	if err != nil {
		return err
	}
	defer bin.Close()
	return durable.WriteFileFrom(out, 0o755, func(w io.Writer) error {
		_, err := io.Copy(w, bin)
		return err
	})
}

// SourceRoot finds the project's source tree (images are built from it):
// $FENCECHECK_SRC, or the nearest directory above the working directory whose
// go.mod declares the project's module.
func SourceRoot() (string, error) {
	if s := os.Getenv("FENCECHECK_SRC"); s != "" {
		return s, nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.HasPrefix(string(b), "module github.com/fencecheck/fencecheck\n") {
			return dir, nil
		}
		if filepath.Dir(dir) == dir {
			return "", fmt.Errorf("images are built from the fencecheck sources: run from inside the source tree or set FENCECHECK_SRC (looked up from %s)", wd)
		}
	}
}

// CacheDir is where built binaries are kept: $XDG_CACHE_HOME/fencecheck or
// ~/.cache/fencecheck.
func CacheDir() (string, error) {
	base, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(base, "fencecheck")
	return dir, os.MkdirAll(dir, 0o755)
}

// lockFile takes an exclusive flock, released by the returned function.
func lockFile(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() { syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
}

// Binary is the static program of one of the project's images (etcd,
// fenced, the fault helpers), built or taken from the cache, for use
// outside a container: the hosts of an SSH lab run it from a bind mount.
func Binary(ctx context.Context, progress io.Writer, name string) (string, error) {
	img, ok := knownImages[name]
	if !ok {
		return "", fmt.Errorf("no image %q has a binary of its own", name)
	}
	src, cache, err := sourceAndCache()
	if err != nil {
		return "", err
	}
	if progress == nil {
		progress = io.Discard
	}
	return img.build(ctx, src, cache, progress)
}
