// Package lazyfstest lets tests that need the lazyfs layer (FUSE) demand it
// in CI and skip only on a developer's machine without it (Require), and
// gives them their layers served by a child process, never by the test
// binary itself (Mount, Start, StartCommand, Serve: serve.go).
package lazyfstest

import (
	"os"
	"testing"
)

// Required reports whether such tests must fail, not skip, without FUSE:
// in CI (CI=true) and when FENCECHECK_REQUIRE_DOCKER=1 or
// FENCECHECK_REQUIRE_FUSE=1.
func Required() bool {
	return os.Getenv("CI") == "true" || os.Getenv("FENCECHECK_REQUIRE_DOCKER") == "1" || os.Getenv("FENCECHECK_REQUIRE_FUSE") == "1"
}

// Require stops the test when /dev/fuse cannot be opened: a failure when
// Required, a skip otherwise.
func Require(t testing.TB) {
	t.Helper()
	f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err == nil {
		f.Close()
		return
	}
	if Required() {
		t.Fatalf("FUSE is required here (CI=true, FENCECHECK_REQUIRE_DOCKER=1 or FENCECHECK_REQUIRE_FUSE=1) but /dev/fuse does not open: %v (install fuse3)", err)
	}
	t.Skipf("no FUSE, skipping (set FENCECHECK_REQUIRE_FUSE=1 to make this a failure): %v", err)
}
