package zookeeper

import (
	"archive/zip"
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

	"github.com/fencecheck/fencecheck/harness/docker"
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
	// ImageName is the name `fencecheck images` knows the image by.
	ImageName = "zookeeper"
)

func init() { docker.RegisterRootfs(ImageName, ImageSpec) }

// Host files the image is assembled from (Debian's zookeeper package and
// the Java runtime it depends on).
const (
	hostZooKeeperJar = "/usr/share/java/zookeeper.jar"
	// hostLoggingJar binds SLF4J to a logger that writes to stderr, which
	// the container log keeps; the package's log4j set-up writes files.
	hostLoggingJar = "/usr/share/java/slf4j-simple.jar"
	hostJava       = "/usr/bin/java"
)

// ImageSpec assembles the image from this machine's Debian packages,
// installing zookeeper (and with it a Java runtime) when it is missing: the
// files of the Java runtime's package under its JAVA_HOME, ZooKeeper's jar
// and the jars its manifests name (transitively), the libraries ldd lists
// for the launcher and the JVM (the JVM's own libraries link against
// libjvm.so and libc only; the desktop ones, for fonts, images and sound,
// are never loaded by a server), and empty /tmp and /data. The
// runtime mounts the clock-skew library (ContainerSpec.ClockPreload).
func ImageSpec(ctx context.Context, progress io.Writer) (docker.ImageSpec, error) {
	if progress == nil {
		progress = io.Discard
	}
	if err := docker.RequireDebianPackage(ctx, progress, hostZooKeeperJar, "zookeeper"); err != nil {
		return docker.ImageSpec{}, err
	}
	fs := docker.NewRootfs()
	fs.Dir("/data", 0o755)
	javaHome, err := addJavaRuntime(ctx, fs)
	if err != nil {
		return docker.ImageSpec{}, err
	}
	jars, err := jarClosure(hostZooKeeperJar, hostLoggingJar)
	if err != nil {
		return docker.ImageSpec{}, err
	}
	for _, j := range jars {
		data, err := os.ReadFile(j)
		if err != nil {
			return docker.ImageSpec{}, err
		}
		fs.File(LibDir+"/"+filepath.Base(j), 0o644, data)
	}
	fmt.Fprintf(progress, "image zookeeper: Java runtime from %s, %d jars\n", javaHome, len(jars))
	return fs.Image(ImageName), nil
}

// addJavaRuntime copies the regular files of the Debian package that owns
// the java launcher and lie under its JAVA_HOME (symlinks into /etc
// resolved) to JavaHome, with the libraries of the launcher and the JVM, and
// returns the host JAVA_HOME.
func addJavaRuntime(ctx context.Context, fs *docker.Rootfs) (string, error) {
	launcher, err := filepath.EvalSymlinks(hostJava)
	if err != nil {
		return "", fmt.Errorf("no Java runtime at %s: %w", hostJava, err)
	}
	home := filepath.Dir(filepath.Dir(launcher)) // .../bin/java -> ...
	pkg, err := owningPackage(ctx, launcher)
	if err != nil {
		return "", err
	}
	out, err := exec.CommandContext(ctx, "dpkg-query", "-L", pkg).Output()
	if err != nil {
		return "", fmt.Errorf("dpkg-query -L %s: %w", pkg, err)
	}
	native := map[string]bool{"bin/java": true, "lib/server/libjvm.so": true}
	for _, line := range strings.Split(string(out), "\n") {
		p := strings.TrimSpace(line)
		rel, ok := strings.CutPrefix(p, home+"/")
		if !ok {
			continue
		}
		st, err := os.Stat(p) // follows links: a link to a directory is skipped
		if err != nil || !st.Mode().IsRegular() {
			continue
		}
		if native[rel] {
			if err := fs.Binary(ctx, p, JavaHome+"/"+rel); err != nil {
				return "", err
			}
			delete(native, rel)
			continue
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return "", err
		}
		mode := int64(0o644)
		if st.Mode()&0o111 != 0 {
			mode = 0o755
		}
		fs.File(JavaHome+"/"+rel, mode, data)
	}
	for rel := range native {
		return "", fmt.Errorf("package %s has no %s under %s", pkg, rel, home)
	}
	return home, nil
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
