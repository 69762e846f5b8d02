package redis

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/fencecheck/fencecheck/harness/docker"
)

// Paths inside the Redis image and its containers.
const (
	// RedisBinary keeps the name redis-server: Debian ships it as a symlink
	// to redis-check-rdb, and Redis picks its mode from argv[0].
	RedisBinary = "/usr/bin/redis-server"
	// SkewLibrary is the clock-skew library, preloaded into redis-server.
	SkewLibrary = "/usr/lib/fencecheck/fcskew.so"
	// Loader is the dynamic loader, as a real file where binaries expect it.
	Loader = "/lib64/ld-linux-x86-64.so.2"
	// ImageRepository is the image name; the tag is its content hash.
	ImageRepository = "fencecheck/redis"
)

// ImageName is the name `fencecheck images` knows the Redis image by.
const ImageName = "redis"

func init() { docker.RegisterImage(ImageName, EnsureImage) }

// hostRedis is where Debian's package installs the server.
const hostRedis = "/usr/bin/redis-server"

const redisDockerfile = `FROM scratch
COPY rootfs/ /
`

// ImageSpec assembles the Redis image from this machine's Debian
// redis-server (installing the package when it is missing): the binary, the
// libraries ldd lists, the loader, and the clock-skew library compiled here.
func ImageSpec(ctx context.Context, progress io.Writer) (docker.ImageSpec, error) {
	if progress == nil {
		progress = io.Discard
	}
	if err := ensureRedisInstalled(ctx, progress); err != nil {
		return docker.ImageSpec{}, err
	}
	files := []docker.File{
		{Name: "rootfs/tmp", Dir: true, Mode: 0o1777},
		{Name: "rootfs/data", Dir: true, Mode: 0o755},
		{Name: "rootfs/fencecheck", Dir: true, Mode: 0o755},
		{Name: "rootfs/fencecheck/clock", Dir: true, Mode: 0o755},
	}
	bin, err := readResolved(hostRedis)
	if err != nil {
		return docker.ImageSpec{}, err
	}
	files = append(files, docker.File{Name: "rootfs" + RedisBinary, Mode: 0o755, Data: bin})

	libs, err := sharedLibraries(ctx, hostRedis)
	if err != nil {
		return docker.ImageSpec{}, err
	}
	for _, lib := range libs {
		data, err := readResolved(lib)
		if err != nil {
			return docker.ImageSpec{}, err
		}
		files = append(files, docker.File{Name: "rootfs" + lib, Mode: 0o755, Data: data})
	}

	tmp, err := os.MkdirTemp("", "fencecheck-skew-")
	if err != nil {
		return docker.ImageSpec{}, err
	}
	defer os.RemoveAll(tmp)
	skewPath, err := BuildSkewLibrary(ctx, tmp)
	if err != nil {
		return docker.ImageSpec{}, err
	}
	skew, err := os.ReadFile(skewPath)
	if err != nil {
		return docker.ImageSpec{}, err
	}
	files = append(files, docker.File{Name: "rootfs" + SkewLibrary, Mode: 0o755, Data: skew})
	return docker.ImageSpec{Repository: ImageRepository, Dockerfile: redisDockerfile, Files: withParentDirs(files)}, nil
}

// imageMu makes concurrent targets in one process build the image once.
var imageMu sync.Mutex

// EnsureImage builds the Redis image unless one with the same content
// exists, and returns its tag.
func EnsureImage(ctx context.Context, progress io.Writer) (string, error) {
	imageMu.Lock()
	defer imageMu.Unlock()
	if progress == nil {
		progress = io.Discard
	}
	start := time.Now()
	spec, err := ImageSpec(ctx, progress)
	if err != nil {
		return "", fmt.Errorf("image redis: %w", err)
	}
	cli, err := docker.Connect(ctx)
	if err != nil {
		return "", err
	}
	defer cli.Close()
	tag, built, err := docker.BuildImage(ctx, cli, spec, nil)
	if err != nil {
		return "", fmt.Errorf("image redis: %w", err)
	}
	verb := "cached"
	if built {
		verb = "built"
	}
	fmt.Fprintf(progress, "image redis: %s %s (%.1fs)\n", verb, tag, time.Since(start).Seconds())
	return tag, nil
}

// ensureRedisInstalled installs Debian's redis-server when it is missing.
// Debian starts the service on install; it is stopped again, since only the
// binary is wanted.
func ensureRedisInstalled(ctx context.Context, progress io.Writer) error {
	if _, err := os.Stat(hostRedis); err == nil {
		return nil
	}
	const howto = "the Redis image is assembled from Debian's redis-server package: install it with `apt-get install -y redis-server` (or `make deps-docker`)"
	aptGet, err := exec.LookPath("apt-get")
	if err != nil {
		return fmt.Errorf("%s not found and apt-get is not available: %s", hostRedis, howto)
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("%s not found and installing it needs root: %s", hostRedis, howto)
	}
	fmt.Fprintf(progress, "image redis: %s is missing; installing Debian's redis-server with apt-get\n", hostRedis)
	var out bytes.Buffer
	install := exec.CommandContext(ctx, aptGet, "install", "-y", "-qq", "--no-install-recommends", "redis-server")
	install.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	install.Stdout, install.Stderr = &out, &out
	if err := install.Run(); err != nil {
		// The package lists may be missing on a fresh machine.
		update := exec.CommandContext(ctx, aptGet, "update", "-qq")
		update.Stdout, update.Stderr = &out, &out
		if uerr := update.Run(); uerr == nil {
			install = exec.CommandContext(ctx, aptGet, "install", "-y", "-qq", "--no-install-recommends", "redis-server")
			install.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
			install.Stdout, install.Stderr = &out, &out
			err = install.Run()
		}
		if err != nil {
			return fmt.Errorf("apt-get install redis-server failed (%v): %s\n%s", err, howto, tail(out.String(), 2000))
		}
	}
	for _, stop := range [][]string{{"systemctl", "stop", "redis-server"}, {"service", "redis-server", "stop"}} {
		if exec.CommandContext(ctx, stop[0], stop[1:]...).Run() == nil {
			break
		}
	}
	if _, err := os.Stat(hostRedis); err != nil {
		return fmt.Errorf("apt-get installed redis-server but %s is still missing: %s", hostRedis, howto)
	}
	return nil
}

// sharedLibraries lists every file ldd says bin loads, the loader included,
// as absolute paths (the vDSO has none and is skipped).
func sharedLibraries(ctx context.Context, bin string) ([]string, error) {
	out, err := exec.CommandContext(ctx, "ldd", bin).Output()
	if err != nil {
		return nil, fmt.Errorf("ldd %s: %w (ldd comes with libc-bin)", bin, err)
	}
	return parseLdd(out)
}

// parseLdd reads lines "libx.so => /path (0x...)" and "/path (0x...)".
func parseLdd(out []byte) ([]string, error) {
	seen := map[string]bool{}
	var libs []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		if strings.Contains(line, "not found") {
			return nil, fmt.Errorf("ldd: a library of redis-server is missing: %s", line)
		}
		if _, after, ok := strings.Cut(line, "=>"); ok {
			line = strings.TrimSpace(after)
		}
		path, _, _ := strings.Cut(line, " ")
		if !strings.HasPrefix(path, "/") || seen[path] {
			continue
		}
		seen[path] = true
		libs = append(libs, path)
	}
	if len(libs) == 0 {
		return nil, errors.New("ldd listed no libraries: is redis-server a dynamic executable?")
	}
	sort.Strings(libs)
	return libs, nil
}

// readResolved reads the file a path finally points to: the image gets real
// files under the names the binary asks for.
func readResolved(path string) ([]byte, error) {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return nil, err
	}
	return os.ReadFile(real)
}

// withParentDirs adds a directory entry for every parent of every file, so
// the image's tree does not depend on how the builder fills gaps.
func withParentDirs(files []docker.File) []docker.File {
	have := map[string]bool{}
	for _, f := range files {
		have[f.Name] = true
	}
	var dirs []docker.File
	for _, f := range files {
		for d := filepath.Dir(f.Name); d != "." && d != "/" && !have[d]; d = filepath.Dir(d) {
			have[d] = true
			dirs = append(dirs, docker.File{Name: d, Dir: true, Mode: 0o755})
		}
	}
	sort.Slice(dirs, func(i, j int) bool { return dirs[i].Name < dirs[j].Name })
	return append(dirs, files...)
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}
