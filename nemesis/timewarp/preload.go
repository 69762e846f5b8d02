package timewarp

import (
	"bytes"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"github.com/fencecheck/fencecheck/fencing"
)

// PreloadSource is the preload library's C source (preload/fcskew.c). It is
// compiled on the machine that runs it, with gcc.
//
//go:embed preload/fcskew.c
var PreloadSource []byte

// The preload library's file name and environment.
const (
	PreloadName = "fcskew.so"
	// PreloadFileEnv names the file holding the offset in nanoseconds,
	// replaced by rename. It is not fencing.ClockFileEnv on purpose: a
	// program that reads that file itself (a cooperative node) must not be
	// shifted a second time by the library.
	PreloadFileEnv = "FENCECHECK_SKEW_FILE"
	// PreloadRefresh is the library's default re-read interval.
	PreloadRefresh = 5 * time.Millisecond
	// PreloadRefreshEnv is how often (ms) the library re-reads the file
	// (default 5).
	PreloadRefreshEnv = "FENCECHECK_SKEW_REFRESH_MS"
)

// PreloadEnv is the environment that loads the library at lib into a
// dynamically linked program and points it at the offset file. An
// LD_PRELOAD the program already had (in base, KEY=VALUE form) is kept
// after ours.
func PreloadEnv(base []string, lib, offsetFile string) []string {
	preload := lib
	var out []string
	for _, kv := range base {
		if v, ok := bytes.CutPrefix([]byte(kv), []byte("LD_PRELOAD=")); ok {
			if len(v) > 0 {
				preload += ":" + string(v)
			}
			continue
		}
		out = append(out, kv)
	}
	return append(out, "LD_PRELOAD="+preload, PreloadFileEnv+"="+offsetFile)
}

// SetPreloadOffset replaces the library's offset file (or a
// fencing.FileClock's) and returns once the new offset is in force: the
// library re-reads the file at most every PreloadRefresh (a FileClock every
// fencing.ClockFileRefresh), and without the wait a process read its old offset for up
// to that long after the step was recorded (seen as a lease acquired at the
// old time right after a heal). Use it for every change of a running
// process's offset; a file written before the process starts needs no wait.
func SetPreloadOffset(path string, d time.Duration) error {
	if err := fencing.WriteClockOffset(path, d); err != nil {
		return err
	}
	time.Sleep(max(PreloadRefresh, fencing.ClockFileRefresh) + time.Millisecond)
	return nil
}

// BuildPreload compiles the library into dir/fcskew.so and returns its
// path. It links nothing (-nostdlib): the library loads into programs on
// any libc.
func BuildPreload(ctx context.Context, dir string) (string, error) {
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		return "", fmt.Errorf("the clock-skew library is compiled with gcc, which is not installed (Debian: apt-get install gcc libc6-dev): %w", err)
	}
	src := filepath.Join(dir, "fcskew.c")
	if err := os.WriteFile(src, PreloadSource, 0o644); err != nil {
		return "", err
	}
	out := filepath.Join(dir, PreloadName)
	cmd := exec.CommandContext(ctx, gcc, "-O2", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC",
		"-nostdlib", "-ffreestanding", "-fno-stack-protector", "-o", out, src)
	var msg bytes.Buffer
	cmd.Stdout, cmd.Stderr = &msg, &msg
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("compiling the clock-skew library: %w: %s", err, bytes.TrimSpace(msg.Bytes()))
	}
	return out, nil
}

var preloadCache struct {
	sync.Mutex
	path string
}

// Preload returns the library built once per source in the user's cache
// folder (…/fencecheck/fcskew-<hash>/fcskew.so); a process shares one build.
func Preload(ctx context.Context) (string, error) {
	preloadCache.Lock()
	defer preloadCache.Unlock()
	if preloadCache.path != "" {
		if _, err := os.Stat(preloadCache.path); err == nil {
			return preloadCache.path, nil
		}
	}
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	dir := filepath.Join(base, "fencecheck")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	// The file keeps its name (processes are searched for it by name);
	// the folder says which source it was built from.
	sum := sha256.Sum256(PreloadSource)
	path := filepath.Join(dir, "fcskew-"+hex.EncodeToString(sum[:8]), PreloadName)
	if _, err := os.Stat(path); err != nil {
		tmp, err := os.MkdirTemp(dir, ".fcskew-")
		if err != nil {
			return "", err
		}
		defer os.RemoveAll(tmp)
		if _, err := BuildPreload(ctx, tmp); err != nil {
			return "", err
		}
		os.Remove(filepath.Join(tmp, "fcskew.c"))
		// Readable by a container's user, whoever that is.
		if err := os.Chmod(tmp, 0o755); err != nil {
			return "", err
		}
		if err := os.Rename(tmp, filepath.Dir(path)); err != nil {
			if _, serr := os.Stat(path); serr != nil { // not another builder's win
				return "", err
			}
		}
	}
	preloadCache.path = path
	return path, nil
}
