package docker

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/fencecheck/fencecheck/nemesis/timewarp"
)

// Rootfs gathers the files of a FROM scratch image out of this machine's own
// Debian packages: binaries with every library ldd says they load (the
// loader included, as a real file where the binaries expect it), whole data
// trees, and files made here. No registry is reachable, so this is how a
// server from Debian gets into a container. Paths are the paths inside the
// image; the build context holds them under rootfs/ (see RootfsDockerfile).
type Rootfs struct {
	files map[string]File
	libs  map[string]bool
}

// RootfsDockerfile copies a Rootfs into an empty image.
const RootfsDockerfile = `FROM scratch
COPY rootfs/ /
`

// NewRootfs starts an image tree with a 1777 /tmp (scratch has none).
func NewRootfs() *Rootfs {
	r := &Rootfs{files: map[string]File{}, libs: map[string]bool{}}
	r.Dir("/tmp", 0o1777)
	return r
}

// Dir adds an empty directory.
func (r *Rootfs) Dir(path string, mode int64) {
	r.files[path] = File{Name: "rootfs" + path, Dir: true, Mode: mode}
}

// File adds a file with the given content.
func (r *Rootfs) File(path string, mode int64, data []byte) {
	r.files[path] = File{Name: "rootfs" + path, Mode: mode, Data: data}
}

// Binary copies the host file at host to path in the image (following
// symlinks: the image gets a real file under the name asked for), with the
// libraries it loads.
func (r *Rootfs) Binary(ctx context.Context, host, path string) error {
	data, err := readResolved(host)
	if err != nil {
		return err
	}
	r.File(path, 0o755, data)
	return r.libraries(ctx, host)
}

// Tree copies the host directory host to path in the image, every regular
// file (symlinks resolved) for which keep returns true (nil keeps all; rel
// is slash-separated, relative to host). Shared objects in it get their
// libraries too.
func (r *Rootfs) Tree(ctx context.Context, host, path string, keep func(rel string) bool) error {
	return filepath.WalkDir(host, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(host, p)
		rel = filepath.ToSlash(rel)
		if rel == "." {
			r.Dir(path, 0o755)
			return nil
		}
		if keep != nil && !keep(rel) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		st, err := os.Stat(p)
		if err != nil {
			return err
		}
		if st.IsDir() {
			if d.Type()&fs.ModeSymlink != 0 {
				return nil // a link to a directory elsewhere: not part of the tree
			}
			r.Dir(path+"/"+rel, 0o755)
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		mode := int64(0o644)
		if st.Mode()&0o111 != 0 {
			mode = 0o755
		}
		r.File(path+"/"+rel, mode, data)
		if strings.HasSuffix(rel, ".so") {
			return r.libraries(ctx, p)
		}
		return nil
	})
}

// libraries adds what ldd lists for bin, each library once.
func (r *Rootfs) libraries(ctx context.Context, bin string) error {
	libs, err := SharedLibraries(ctx, bin)
	if err != nil {
		return err
	}
	for _, lib := range libs {
		if r.libs[lib] {
			continue
		}
		data, err := readResolved(lib)
		if err != nil {
			return err
		}
		r.libs[lib] = true
		r.File(lib, 0o755, data)
	}
	return nil
}

// Files is the build context's content, every parent directory explicit so
// that the image's tree does not depend on how the builder fills gaps.
func (r *Rootfs) Files() []File {
	have := map[string]bool{}
	out := make([]File, 0, len(r.files))
	for _, f := range r.files {
		have[f.Name] = true
		out = append(out, f)
	}
	for _, f := range r.files {
		for d := filepath.Dir(f.Name); d != "." && d != "/" && d != "rootfs" && !have[d]; d = filepath.Dir(d) {
			have[d] = true
			out = append(out, File{Name: d, Dir: true, Mode: 0o755})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// SharedLibraries lists every file ldd says bin loads, the loader included,
// as absolute paths (the vDSO has none and is skipped). A static binary has
// none.
func SharedLibraries(ctx context.Context, bin string) ([]string, error) {
	cmd := exec.CommandContext(ctx, "ldd", bin)
	out, err := cmd.Output()
	if err != nil {
		// ldd exits 1 for a static binary, and says so.
		var ee *exec.ExitError
		if errors.As(err, &ee) && bytes.Contains(append(out, ee.Stderr...), []byte("not a dynamic executable")) {
			return nil, nil
		}
		return nil, fmt.Errorf("ldd %s: %w (ldd comes with libc-bin)", bin, err)
	}
	return ParseLdd(out)
}

// ParseLdd reads ldd's lines "libx.so => /path (0x...)" and "/path (0x...)".
func ParseLdd(out []byte) ([]string, error) {
	seen := map[string]bool{}
	var libs []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line == "statically linked" {
			continue
		}
		if strings.Contains(line, "not found") {
			return nil, fmt.Errorf("ldd: a library is missing: %s", line)
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
	sort.Strings(libs)
	return libs, nil
}

// readResolved reads the file a path finally points to.
func readResolved(path string) ([]byte, error) {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return nil, err
	}
	return os.ReadFile(real)
}

// RequireDebianPackage makes sure the host file path exists, installing the
// Debian package pkg with apt-get when it is missing and this process may
// (root). Debian starts some servers on install; services lists the ones to
// stop again, since only their files are wanted.
func RequireDebianPackage(ctx context.Context, progress io.Writer, path, pkg string, services ...string) error {
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	if progress == nil {
		progress = io.Discard
	}
	howto := fmt.Sprintf("the image is assembled from Debian's %s package: install it with `apt-get install -y %s` (or `make deps`)", pkg, pkg)
	aptGet, err := exec.LookPath("apt-get")
	if err != nil {
		return fmt.Errorf("%s not found and apt-get is not available: %s", path, howto)
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("%s not found and installing it needs root: %s", path, howto)
	}
	fmt.Fprintf(progress, "%s is missing; installing Debian's %s with apt-get\n", path, pkg)
	var out bytes.Buffer
	install := func() error {
		c := exec.CommandContext(ctx, aptGet, "install", "-y", "-qq", "--no-install-recommends", pkg)
		c.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		c.Stdout, c.Stderr = &out, &out
		return c.Run()
	}
	if err := install(); err != nil {
		// The package lists may be missing on a fresh machine.
		update := exec.CommandContext(ctx, aptGet, "update", "-qq")
		update.Stdout, update.Stderr = &out, &out
		if uerr := update.Run(); uerr == nil {
			err = install()
		}
		if err != nil {
			s := out.String()
			if len(s) > 2000 {
				s = "..." + s[len(s)-2000:]
			}
			return fmt.Errorf("apt-get install %s failed (%v): %s\n%s", pkg, err, howto, s)
		}
	}
	for _, svc := range services {
		for _, stop := range [][]string{{"systemctl", "stop", svc}, {"service", svc, "stop"}} {
			if exec.CommandContext(ctx, stop[0], stop[1:]...).Run() == nil {
				break
			}
		}
	}
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("apt-get installed %s but %s is still missing: %s", pkg, path, howto)
	}
	return nil
}

// EnsureBuilt builds the image that makeSpec describes unless one with the
// same content exists, and returns its tag. It holds a lock of its own per
// image across processes (test packages run in parallel; EnsureImages may
// hold the image's build lock already, which a second flock in the same
// process would wait for forever), and prunes the repository's superseded
// images after a build.
func EnsureBuilt(ctx context.Context, progress io.Writer, name string, makeSpec func(context.Context, io.Writer) (ImageSpec, error)) (string, error) {
	if progress == nil {
		progress = io.Discard
	}
	// Assembling the spec reads tens of MB, runs ldd on every binary and
	// compiles what the image carries: once per process is enough while
	// the image is still there.
	builtMu.Lock()
	defer builtMu.Unlock()
	if tag, ok := built[name]; ok {
		cli, err := Connect(ctx)
		if err != nil {
			return "", err
		}
		_, ierr := cli.ImageInspect(ctx, tag)
		cli.Close()
		if ierr == nil {
			return tag, nil
		}
		delete(built, name)
	}
	cache, err := CacheDir()
	if err != nil {
		return "", err
	}
	unlock, err := lockFile(filepath.Join(cache, "rootfs-"+name+".lock"))
	if err != nil {
		return "", err
	}
	defer unlock()
	start := time.Now()
	spec, err := makeSpec(ctx, progress)
	if err != nil {
		return "", fmt.Errorf("image %s: %w", name, err)
	}
	cli, err := Connect(ctx)
	if err != nil {
		return "", err
	}
	defer cli.Close()
	tag, err := buildLogged(ctx, cli, name, spec, progress, start, fmt.Sprintf(", %d MB of files", spec.size()>>20))
	if err != nil {
		return "", err
	}
	built[name] = tag
	return tag, nil
}

// built remembers the images EnsureBuilt made or found in this process.
var (
	builtMu sync.Mutex
	built   = map[string]string{}
)

// size is the total size of the spec's files, in bytes.
func (s ImageSpec) size() int64 {
	var n int64
	for _, f := range s.Files {
		n += int64(len(f.Data))
	}
	return n
}

// Image is the image of fs under the project's repository for name
// (fencecheck/<name>; the tag is the content hash).
func (r *Rootfs) Image(name string) ImageSpec {
	return ImageSpec{Repository: "fencecheck/" + name, Dockerfile: RootfsDockerfile, Files: r.Files()}
}

// RegisterRootfs makes the image that makeSpec assembles (from a Rootfs)
// known by name to EnsureImages and `fencecheck images`, built by
// EnsureBuilt. It is meant for the init functions of the packages that own
// the images.
func RegisterRootfs(name string, makeSpec func(context.Context, io.Writer) (ImageSpec, error)) {
	RegisterImage(name, func(ctx context.Context, progress io.Writer) (string, error) {
		return EnsureBuilt(ctx, progress, name, makeSpec)
	})
}

// SkewLibrary is where an image carries the clock-skew library (package
// timewarp's preload library, compiled on this machine; it links nothing,
// so it loads into a program on any libc). A server started with it
// preloaded and its offset file named (nodes.ClockSkewLibrary) has its wall
// clock moved by the clock nemesis from its first instruction.
const SkewLibrary = "/usr/lib/fencecheck/fcskew.so"

// AddSkewLibrary compiles the clock-skew library and adds it at
// SkewLibrary.
func (r *Rootfs) AddSkewLibrary(ctx context.Context) error {
	tmp, err := os.MkdirTemp("", "fencecheck-skew-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	path, err := timewarp.BuildPreload(ctx, tmp)
	if err != nil {
		return err
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	r.File(SkewLibrary, 0o755, data)
	return nil
}
