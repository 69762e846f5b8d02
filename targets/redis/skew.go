package redis

import (
	"bytes"
	"context"
	_ "embed"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/fencecheck/fencecheck/fencing"
)

// skewSource is the clock-skew library's C source; it is compiled on the
// host when the Redis image is built, so the image carries a library built
// against the same glibc as the redis-server copied next to it.
//
//go:embed skew/fcskew.c
var skewSource []byte

// Environment of a process running under the skew library.
const (
	// ClockFileEnv names the file holding the offset in nanoseconds.
	ClockFileEnv = "FENCECHECK_CLOCK_FILE"
	// ClockRefreshEnv is how often (ms) the library re-reads the file.
	ClockRefreshEnv = "FENCECHECK_CLOCK_REFRESH_MS"
)

// BuildSkewLibrary compiles the skew library with gcc into dir/fcskew.so and
// returns its path.
func BuildSkewLibrary(ctx context.Context, dir string) (string, error) {
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		return "", fmt.Errorf("the clock-skew library is compiled with gcc, which is not installed (Debian: apt-get install gcc libc6-dev): %w", err)
	}
	src := filepath.Join(dir, "fcskew.c")
	if err := os.WriteFile(src, skewSource, 0o644); err != nil {
		return "", err
	}
	out := filepath.Join(dir, "fcskew.so")
	cmd := exec.CommandContext(ctx, gcc, "-O2", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC",
		"-o", out, src)
	var msg bytes.Buffer
	cmd.Stdout, cmd.Stderr = &msg, &msg
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("compiling the clock-skew library: %w: %s", err, bytes.TrimSpace(msg.Bytes()))
	}
	return out, nil
}

// WriteClockOffset sets the offset a skewed process reads from path. It
// writes a temporary file and renames it over path, so a reader never sees a
// half-written number; that is also why path must live in a bind-mounted
// directory rather than be bind-mounted itself (a rename would leave the
// container looking at the old file).
func WriteClockOffset(path string, offset time.Duration) error {
	return fencing.WriteClockOffset(path, offset)
}
