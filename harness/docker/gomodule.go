package docker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// ModuleBinary compiles the command pkg (e.g. "./weed") of the Go module
// module at version, as the Go module proxy serves it, into a static binary
// kept in the cache under name: once per module version and Go version, so
// a warm run does not even start the compiler. The module is built as its
// own main module, from its own go.mod and go.sum, replace directives
// included (as `go install module/pkg@version` would not), in the read-only
// module cache; GOFLAGS=-mod=mod lets the go command add the go.sum lines
// the module's own file lacks, in the build's memory only.
func ModuleBinary(ctx context.Context, progress io.Writer, name, module, version, pkg string) (string, error) {
	if progress == nil {
		progress = io.Discard
	}
	cache, err := CacheDir()
	if err != nil {
		return "", err
	}
	gover, err := goVersion(ctx)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s@%s %s\n", module, version, pkg)
	h.Write(gover)
	out := filepath.Join(cache, name+"-"+hex.EncodeToString(h.Sum(nil))[:16])
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	unlock, err := lockFile(out + ".lock")
	if err != nil {
		return "", err
	}
	defer unlock()
	if _, err := os.Stat(out); err == nil {
		return out, nil // built by another process while this one waited
	}
	fmt.Fprintf(progress, "image %s: downloading %s@%s from the Go module proxy (first time only)\n", name, module, version)
	dl := exec.CommandContext(ctx, "go", "mod", "download", "-json", module+"@"+version)
	dl.Dir = cache
	dl.Env = append(os.Environ(), "GO111MODULE=on")
	b, err := dl.Output()
	var info struct{ Dir, Error string }
	if jerr := json.Unmarshal(b, &info); err != nil || jerr != nil || info.Error != "" || info.Dir == "" {
		return "", fmt.Errorf("go mod download %s@%s: %v %s", module, version, err, strings.TrimSpace(info.Error))
	}
	fmt.Fprintf(progress, "image %s: compiling %s at %s (first time only: many minutes on two cores)\n", name, module+"/"+strings.TrimPrefix(pkg, "./"), version)
	if err := goBuildStatic(ctx, info.Dir, pkg, out, "GOFLAGS=-mod=mod"); err != nil {
		return "", err
	}
	return out, nil
}
