package postgres

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/fencecheck/fencecheck/harness/docker"
)

// Paths of Debian's postgresql-15 package, on the host and in the image
// alike (initdb finds postgres and the share directory relative to itself).
const (
	binDir   = "/usr/lib/postgresql/15/bin"
	libDir   = "/usr/lib/postgresql/15/lib"
	shareDir = "/usr/share/postgresql/15"
	// hbaFile lets the adapters (on the run network) and the harness's
	// host-side checks (through the published port) in without a password:
	// the network is the run's own.
	hbaFile = "/etc/fencecheck/pg_hba.conf"
	// ImageName is the name `fencecheck images` knows the image by.
	ImageName = "postgres"
)

func init() { docker.RegisterRootfs(ImageName, ImageSpec) }

// ImageSpec assembles the PostgreSQL image from this machine's Debian
// postgresql-15 (installing it when missing): postgres and initdb, the
// server's modules (but the LLVM JIT, which would bring 100 MB of LLVM),
// the share directory, every library they load, UTC's zone file, a shell
// (initdb runs postgres through popen, i.e. /bin/sh -c: Debian's dash, which
// needs only the libc already there), and the clock-skew library.
func ImageSpec(ctx context.Context, progress io.Writer) (docker.ImageSpec, error) {
	if err := docker.RequireDebianPackage(ctx, progress, binDir+"/postgres", "postgresql-15", "postgresql"); err != nil {
		return docker.ImageSpec{}, err
	}
	fs := docker.NewRootfs()
	fs.Dir("/data", 0o755)
	fs.Dir("/fencecheck/clock", 0o755)
	for _, b := range []string{"postgres", "initdb"} {
		if err := fs.Binary(ctx, binDir+"/"+b, binDir+"/"+b); err != nil {
			return docker.ImageSpec{}, err
		}
	}
	if err := fs.Binary(ctx, "/usr/bin/dash", "/bin/sh"); err != nil {
		return docker.ImageSpec{}, err
	}
	modules := func(rel string) bool {
		return !strings.Contains(rel, "/") && strings.HasSuffix(rel, ".so") && !strings.HasPrefix(rel, "llvmjit")
	}
	if err := fs.Tree(ctx, libDir, libDir, modules); err != nil {
		return docker.ImageSpec{}, err
	}
	if err := fs.Tree(ctx, shareDir, shareDir, func(rel string) bool { return rel != "man" && !strings.HasPrefix(rel, "man/") }); err != nil {
		return docker.ImageSpec{}, err
	}
	utc, err := os.ReadFile("/usr/share/zoneinfo/Etc/UTC")
	if err != nil {
		return docker.ImageSpec{}, fmt.Errorf("the image needs UTC's zone file (Debian's tzdata): %w", err)
	}
	fs.File("/usr/share/zoneinfo/Etc/UTC", 0o644, utc)
	fs.File("/usr/share/zoneinfo/UTC", 0o644, utc)
	fs.File(hbaFile, 0o644, []byte("local all all trust\nhost all all 0.0.0.0/0 trust\n"))
	fs.File("/etc/nsswitch.conf", 0o644, []byte("passwd: files\ngroup: files\n"))

	if err := fs.AddSkewLibrary(ctx); err != nil {
		return docker.ImageSpec{}, err
	}
	return fs.Image(ImageName), nil
}
