package redis

import (
	"context"
	"time"

	"github.com/fencecheck/fencecheck/fencing"
	"github.com/fencecheck/fencecheck/nemesis/timewarp"
)

// Environment of a process running under the clock-skew library (package
// timewarp's preload library; it is compiled on the host when the Redis
// image is built, so the image carries a library built next to the
// redis-server copied into it).
const (
	// SkewFileEnv names the file holding the offset in nanoseconds (not
	// fencing.ClockFileEnv, which a program that adds the offset itself
	// reads, as the adapters do).
	SkewFileEnv = timewarp.PreloadFileEnv
	// SkewRefreshEnv is how often (ms) the library re-reads the file.
	SkewRefreshEnv = timewarp.PreloadRefreshEnv
)

// BuildSkewLibrary compiles the skew library with gcc into dir/fcskew.so and
// returns its path.
func BuildSkewLibrary(ctx context.Context, dir string) (string, error) {
	return timewarp.BuildPreload(ctx, dir)
}

// WriteClockOffset sets the offset a skewed process reads from path. It
// writes a temporary file and renames it over path, so a reader never sees a
// half-written number; that is also why path must live in a bind-mounted
// directory rather than be bind-mounted itself (a rename would leave the
// container looking at the old file).
func WriteClockOffset(path string, offset time.Duration) error {
	return fencing.WriteClockOffset(path, offset)
}
