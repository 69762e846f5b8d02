package s3

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/fencecheck/fencecheck/harness/docker"
)

// SeaweedFS is built from source, as the Go module proxy serves it. The
// proxy lists no tagged version of github.com/seaweedfs/seaweedfs (its tags
// are not semantic-import-compatible releases), but it serves pseudo-
// versions of commits: Version is pinned so that a reproduce line names one
// server whatever the upstream branch does next.
const (
	Module  = "github.com/seaweedfs/seaweedfs"
	Version = "v0.0.0-20261109003541-7506e5f91cd6"
	// ImageName is the name `fencecheck images` knows the image by.
	ImageName = "seaweedfs"
	// weedPath is the binary inside the image.
	weedPath = "/usr/local/bin/weed"
)

func init() { docker.RegisterRootfs(ImageName, ImageSpec) }

// ImageSpec is the SeaweedFS image: the static weed binary (master, volume
// server, filer and S3 gateway in one program), compiled once per version
// and Go release into the image cache, in an image FROM scratch with a data
// folder and the /tmp the filer keeps its local socket in.
func ImageSpec(ctx context.Context, progress io.Writer) (docker.ImageSpec, error) {
	bin, err := docker.ModuleBinary(ctx, progress, "weed-"+Version, Module, Version, "./weed")
	if err != nil {
		return docker.ImageSpec{}, fmt.Errorf("building SeaweedFS %s: %w", Version, err)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		return docker.ImageSpec{}, err
	}
	fs := docker.NewRootfs()
	fs.Dir("/data", 0o755)
	fs.File(weedPath, 0o755, data)
	fs.File("/etc/nsswitch.conf", 0o644, []byte("hosts: files dns\n"))
	return fs.Image(ImageName), nil
}
