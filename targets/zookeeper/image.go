package zookeeper

import (
	"archive/zip"
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/fencecheck/fencecheck/harness/docker"
	"github.com/fencecheck/fencecheck/targets/redis"
)

// Paths inside the ZooKeeper image. The Java runtime and the jars are put at
// fixed places whatever their paths on the host, so the containers' command
// lines do not depend on the host's Java version.
const (
	// JavaHome is the Java runtime (Debian's headless JRE, relocated: the
	// JVM finds its libraries relative to bin/java).
	JavaHome = "/opt/java"
	// Java is the launcher.
	Java = JavaHome + "/bin/java"
	// LibDir holds ZooKeeper's jar and every jar it needs; the classpath is
	// LibDir + "/*".
	LibDir = "/opt/zookeeper/lib"
	// ImageRepository is the image name; the tag is its content hash.
	ImageRepository = "fencecheck/zookeeper"
	// ImageName is the name `fencecheck images` knows the image by.
	ImageName = "zookeeper"
)

func init() { docker.RegisterImage(ImageName, EnsureImage) }

// Host files the image is assembled from (Debian's zookeeper package and
// the Java runtime it depends on).
const (
	hostZooKeeperJar = "/usr/share/java/zookeeper.jar"
	// hostLoggingJar binds SLF4J to a logger that writes to stderr, which
	// the container log keeps; the package's log4j set-up writes files.
	hostLoggingJar = "/usr/share/java/slf4j-simple.jar"
	hostJava       = "/usr/bin/java"
)

const zkDockerfile = `FROM scratch
COPY rootfs/ /
`

// ImageSpec assembles the image from this machine's Debian packages,
// installing zookeeper (and with it a Java runtime) when it is missing: the
// files of the Java runtime's package under its JAVA_HOME, ZooKeeper's jar
// and the jars its manifests name (transitively), every library ldd lists
// for the launcher and the JVM's own libraries, the loader, the clock-skew
// library, and empty /tmp, /data and /conf.
func ImageSpec(ctx context.Context, progress io.Writer) (docker.ImageSpec, error) {
	if progress == nil {
		progress = io.Discard
	}
	if err := ensureInstalled(ctx, progress); err != nil {
		return docker.ImageSpec{}, err
	}
	img := newTree()
	img.dir("/tmp", 0o1777)
	img.dir("/data", 0o755)
	img.dir("/conf", 0o755)
	img.dir("/fencecheck/clock", 0o755)

	javaHome, native, err := addJavaRuntime(ctx, img)
	if err != nil {
		return docker.ImageSpec{}, err
	}
	for _, bin := range native {
		if err := img.libraries(ctx, bin); err != nil {
			return docker.ImageSpec{}, err
		}
	}
	jars, err := jarClosure(hostZooKeeperJar, hostLoggingJar)
	if err != nil {
		return docker.ImageSpec{}, err
	}
	for _, j := range jars {
		if err := img.copy(j, LibDir+"/"+filepath.Base(j), 0o644); err != nil {
			return docker.ImageSpec{}, err
		}
	}

	tmp, err := os.MkdirTemp("", "fencecheck-skew-")
	if err != nil {
		return docker.ImageSpec{}, err
	}
	defer os.RemoveAll(tmp)
	skew, err := redis.BuildSkewLibrary(ctx, tmp)
	if err != nil {
		return docker.ImageSpec{}, err
	}
	if err := img.copy(skew, redis.SkewLibrary, 0o755); err != nil {
		return docker.ImageSpec{}, err
	}
	fmt.Fprintf(progress, "image zookeeper: Java runtime from %s, %d jars, %.0f MB\n", javaHome, len(jars), float64(img.size())/1e6)
	return docker.ImageSpec{Repository: ImageRepository, Dockerfile: zkDockerfile, Files: img.files()}, nil
}

// imageMu makes concurrent targets in one process assemble the image once.
var imageMu sync.Mutex

// EnsureImage builds the image unless one with the same content exists, and
// returns its tag.
func EnsureImage(ctx context.Context, progress io.Writer) (string, error) {
	imageMu.Lock()
	defer imageMu.Unlock()
	if progress == nil {
		progress = io.Discard
	}
	start := time.Now()
	spec, err := ImageSpec(ctx, progress)
	if err != nil {
		return "", fmt.Errorf("image zookeeper: %w", err)
	}
	cli, err := docker.Connect(ctx)
	if err != nil {
		return "", err
	}
	defer cli.Close()
	tag, built, err := docker.BuildImage(ctx, cli, spec, nil)
	if err != nil {
		return "", fmt.Errorf("image zookeeper: %w", err)
	}
	verb := "cached"
	if built {
		verb = "built"
		docker.PruneSuperseded(ctx, cli, ImageRepository, tag, time.Hour)
	}
	fmt.Fprintf(progress, "image zookeeper: %s %s (%.1fs)\n", verb, tag, time.Since(start).Seconds())
	return tag, nil
}

// addJavaRuntime copies the regular files of the Debian package that owns
// the java launcher and lie under its JAVA_HOME (symlinks into /etc
// resolved) to JavaHome, and returns the host JAVA_HOME and the native
// binaries whose libraries the image needs.
func addJavaRuntime(ctx context.Context, img *tree) (string, []string, error) {
	launcher, err := filepath.EvalSymlinks(hostJava)
	if err != nil {
		return "", nil, fmt.Errorf("no Java runtime at %s: %w", hostJava, err)
	}
	home := filepath.Dir(filepath.Dir(launcher)) // .../bin/java -> ...
	pkg, err := owningPackage(ctx, launcher)
	if err != nil {
		return "", nil, err
	}
	out, err := exec.CommandContext(ctx, "dpkg-query", "-L", pkg).Output()
	if err != nil {
		return "", nil, fmt.Errorf("dpkg-query -L %s: %w", pkg, err)
	}
	var native []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		p := strings.TrimSpace(sc.Text())
		rel, ok := strings.CutPrefix(p, home+"/")
		if !ok {
			continue
		}
		st, err := os.Stat(p) // follows links: a link to a directory is skipped
		if err != nil || !st.Mode().IsRegular() {
			continue
		}
		mode := int64(0o644)
		if st.Mode()&0o111 != 0 {
			mode = 0o755
		}
		if err := img.copy(p, JavaHome+"/"+rel, mode); err != nil {
			return "", nil, err
		}
		if rel == "bin/java" || strings.HasSuffix(rel, ".so") {
			native = append(native, p)
		}
	}
	if _, ok := img.entries[Java]; !ok {
		return "", nil, fmt.Errorf("package %s has no bin/java under %s", pkg, home)
	}
	return home, native, nil
}

// owningPackage asks dpkg which package installed path.
func owningPackage(ctx context.Context, path string) (string, error) {
	out, err := exec.CommandContext(ctx, "dpkg-query", "-S", path).Output()
	if err != nil {
		return "", fmt.Errorf("dpkg-query -S %s: %w (the image is assembled from Debian packages)", path, err)
	}
	pkg, _, ok := strings.Cut(strings.TrimSpace(string(out)), ":")
	if !ok || pkg == "" {
		return "", fmt.Errorf("dpkg-query -S %s: unexpected answer %q", path, out)
	}
	return pkg, nil
}

// jarClosure lists the given jars and every jar their manifests' Class-Path
// names, transitively, as real files. Entries that do not exist are left
// out: Debian's manifests name optional jars (jline, for the command-line
// client) that the server never loads.
func jarClosure(roots ...string) ([]string, error) {
	seen := map[string]bool{}
	var out []string
	todo := append([]string(nil), roots...)
	for len(todo) > 0 {
		j := todo[0]
		todo = todo[1:]
		real, err := filepath.EvalSymlinks(j)
		if err != nil {
			if len(out) < len(roots) {
				return nil, fmt.Errorf("%s: %w", j, err)
			}
			continue
		}
		if seen[real] {
			continue
		}
		seen[real] = true
		out = append(out, real)
		cp, err := manifestClassPath(real)
		if err != nil {
			return nil, err
		}
		for _, e := range cp {
			if !path.IsAbs(e) {
				e = filepath.Join(filepath.Dir(j), e)
			}
			todo = append(todo, e)
		}
	}
	sort.Strings(out[len(roots):])
	return out, nil
}

// manifestClassPath reads the Class-Path attribute of a jar's manifest
// (continuation lines start with a space).
func manifestClassPath(jar string) ([]string, error) {
	zr, err := zip.OpenReader(jar)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", jar, err)
	}
	defer zr.Close()
	f, err := zr.Open("META-INF/MANIFEST.MF")
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s's manifest: %w", jar, err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, err
	}
	text := strings.ReplaceAll(strings.ReplaceAll(string(b), "\r\n", "\n"), "\n ", "")
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(line, "Class-Path:"); ok {
			return strings.Fields(v), nil
		}
	}
	return nil, nil
}

// ensureInstalled installs Debian's zookeeper package (which brings a Java
// runtime) when its jar is missing.
func ensureInstalled(ctx context.Context, progress io.Writer) error {
	_, errJar := os.Stat(hostZooKeeperJar)
	_, errJava := os.Stat(hostJava)
	if errJar == nil && errJava == nil {
		return nil
	}
	const howto = "the ZooKeeper image is assembled from Debian's zookeeper package and its Java runtime: install them with `apt-get install -y --no-install-recommends zookeeper default-jre-headless` (or `make deps-docker`)"
	aptGet, err := exec.LookPath("apt-get")
	if err != nil {
		return fmt.Errorf("%s or %s not found and apt-get is not available: %s", hostZooKeeperJar, hostJava, howto)
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("%s or %s not found and installing them needs root: %s", hostZooKeeperJar, hostJava, howto)
	}
	fmt.Fprintf(progress, "image zookeeper: installing Debian's zookeeper and default-jre-headless with apt-get\n")
	var out bytes.Buffer
	install := func() error {
		c := exec.CommandContext(ctx, aptGet, "install", "-y", "-qq", "--no-install-recommends", "zookeeper", "default-jre-headless")
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
			return fmt.Errorf("apt-get install zookeeper failed (%v): %s\n%s", err, howto, s)
		}
	}
	if _, err := os.Stat(hostZooKeeperJar); err != nil {
		return fmt.Errorf("apt-get installed zookeeper but %s is still missing: %s", hostZooKeeperJar, howto)
	}
	return nil
}

// tree is an image's files by their path inside the image.
type tree struct {
	entries map[string]docker.File
	libs    map[string]bool
}

func newTree() *tree { return &tree{entries: map[string]docker.File{}, libs: map[string]bool{}} }

func (t *tree) dir(p string, mode int64) {
	t.entries[p] = docker.File{Name: "rootfs" + p, Dir: true, Mode: mode}
}

// copy puts the file host finally points to at p.
func (t *tree) copy(host, p string, mode int64) error {
	data, err := readResolved(host)
	if err != nil {
		return err
	}
	t.entries[p] = docker.File{Name: "rootfs" + p, Mode: mode, Data: data}
	return nil
}

// libraries adds, at their own paths, the libraries ldd lists for bin.
func (t *tree) libraries(ctx context.Context, bin string) error {
	out, err := exec.CommandContext(ctx, "ldd", bin).Output()
	if err != nil {
		return fmt.Errorf("ldd %s: %w (ldd comes with libc-bin)", bin, err)
	}
	libs, err := parseLdd(out)
	if err != nil {
		return fmt.Errorf("ldd %s: %w", bin, err)
	}
	for _, lib := range libs {
		if t.libs[lib] {
			continue
		}
		t.libs[lib] = true
		if err := t.copy(lib, lib, 0o755); err != nil {
			return err
		}
	}
	return nil
}

// parseLdd reads ldd's lines "libx.so => /path (0x...)" and "/path
// (0x...)". The JVM's own libraries link against libjvm.so, which the
// running JVM has already loaded and ldd cannot find: that line is not a
// missing library.
func parseLdd(out []byte) ([]string, error) {
	var libs []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line == "statically linked" {
			continue
		}
		if strings.Contains(line, "not found") {
			if strings.HasPrefix(line, "libjvm.so ") {
				continue
			}
			return nil, fmt.Errorf("a library is missing: %s", line)
		}
		if _, after, ok := strings.Cut(line, "=>"); ok {
			line = strings.TrimSpace(after)
		}
		p, _, _ := strings.Cut(line, " ")
		if strings.HasPrefix(p, "/") {
			libs = append(libs, p)
		}
	}
	return libs, nil
}

// readResolved reads the file a path finally points to: the image gets real
// files under the names asked for.
func readResolved(p string) ([]byte, error) {
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return nil, err
	}
	return os.ReadFile(real)
}

func (t *tree) size() int64 {
	var n int64
	for _, f := range t.entries {
		n += int64(len(f.Data))
	}
	return n
}

// files is the build context, every parent directory explicit so that the
// image's tree does not depend on how the builder fills gaps.
func (t *tree) files() []docker.File {
	have := map[string]bool{}
	out := make([]docker.File, 0, len(t.entries))
	for _, f := range t.entries {
		have[f.Name] = true
		out = append(out, f)
	}
	for _, f := range t.entries {
		for d := path.Dir(f.Name); d != "." && d != "rootfs" && !have[d]; d = path.Dir(d) {
			have[d] = true
			out = append(out, docker.File{Name: d, Dir: true, Mode: 0o755})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
