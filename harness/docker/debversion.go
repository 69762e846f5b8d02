package docker

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
)

// DebianSystem names the Debian package a host file comes from and its
// version, for a target whose image is assembled from the host's packages
// (the image is content-hashed, so it carries what the host has now):
// "Redis 7.0.15 (Debian package redis-server 5:7.0.15-1~deb12u10)".
func DebianSystem(ctx context.Context, product, hostFile string) (string, error) {
	// The package that owns the path itself: /usr/bin/redis-server is
	// redis-server's link to redis-tools' binary. A path dpkg knows only
	// through a linked folder is asked for as it resolves.
	resolved := hostFile
	out, err := exec.CommandContext(ctx, "dpkg-query", "-S", hostFile).Output()
	if err != nil {
		if resolved, err = filepath.EvalSymlinks(hostFile); err != nil {
			return "", err
		}
		if out, err = exec.CommandContext(ctx, "dpkg-query", "-S", resolved).Output(); err != nil {
			return "", fmt.Errorf("dpkg-query -S %s: %w", resolved, err)
		}
	}
	pkg, _, ok := strings.Cut(strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0]), ":")
	if !ok {
		return "", fmt.Errorf("dpkg-query -S %s: unexpected answer %q", resolved, out)
	}
	v, err := exec.CommandContext(ctx, "dpkg-query", "-W", "-f", "${Version}", pkg).Output()
	if err != nil {
		return "", fmt.Errorf("dpkg-query -W %s: %w", pkg, err)
	}
	version := strings.TrimSpace(string(v))
	return fmt.Sprintf("%s %s (Debian package %s %s)", product, UpstreamVersion(version), pkg, version), nil
}

// UpstreamVersion is a Debian version without its epoch and revision:
// "5:7.0.15-1~deb12u10" -> "7.0.15", "15.18-0+deb12u1" -> "15.18".
func UpstreamVersion(debian string) string {
	if _, after, ok := strings.Cut(debian, ":"); ok {
		debian = after
	}
	if i := strings.LastIndex(debian, "-"); i > 0 {
		debian = debian[:i]
	}
	return debian
}
