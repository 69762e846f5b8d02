package redis

import (
	"context"
	"io"

	"github.com/fencecheck/fencecheck/harness/docker"
	"github.com/fencecheck/fencecheck/harness/nodes"
)

// Paths inside the Redis image and its containers.
const (
	// RedisBinary keeps the name redis-server: Debian ships it as a symlink
	// to redis-check-rdb, and Redis picks its mode from argv[0].
	RedisBinary = "/usr/bin/redis-server"
	// SkewLibrary is the clock-skew library, preloaded into redis-server.
	SkewLibrary = docker.SkewLibrary
	// Loader is the dynamic loader, as a real file where binaries expect it.
	Loader = "/lib64/ld-linux-x86-64.so.2"
	// ImageName is the name `fencecheck images` knows the Redis image by.
	ImageName = "redis"
)

func init() { docker.RegisterRootfs(ImageName, ImageSpec) }

// hostRedis is where Debian's package installs the server.
const hostRedis = "/usr/bin/redis-server"

// ImageSpec assembles the Redis image from this machine's Debian
// redis-server (installing the package when it is missing; Debian starts
// the service on install, which is stopped again): the binary, the
// libraries ldd lists, the loader, and the clock-skew library compiled here.
func ImageSpec(ctx context.Context, progress io.Writer) (docker.ImageSpec, error) {
	if err := docker.RequireDebianPackage(ctx, progress, hostRedis, "redis-server", "redis-server"); err != nil {
		return docker.ImageSpec{}, err
	}
	fs := docker.NewRootfs()
	fs.Dir(dataDirInContainer, 0o755)
	fs.Dir(nodes.ClockDirInContainer, 0o755)
	if err := fs.Binary(ctx, hostRedis, RedisBinary); err != nil {
		return docker.ImageSpec{}, err
	}
	if err := fs.AddSkewLibrary(ctx); err != nil {
		return docker.ImageSpec{}, err
	}
	return fs.Image(ImageName), nil
}
