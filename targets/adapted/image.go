package adapted

import (
	"context"
	"os"

	"github.com/fencecheck/fencecheck/harness/docker"
	"github.com/fencecheck/fencecheck/targets/redis"
)

// AddSkewLibrary compiles the clock-skew library on this machine (against
// the glibc the image's server comes with) and puts it where Server.Skew
// preloads it from.
func AddSkewLibrary(ctx context.Context, fs *docker.Rootfs) error {
	tmp, err := os.MkdirTemp("", "fencecheck-skew-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	path, err := redis.BuildSkewLibrary(ctx, tmp)
	if err != nil {
		return err
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	fs.File(redis.SkewLibrary, 0o755, data)
	return nil
}
