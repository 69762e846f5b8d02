//go:build releases

package etcd

import (
	"testing"

	"github.com/fencecheck/fencecheck/harness/docker/dockertest"
)

// Short runs at etcd 3.5 (built from the module proxy's 3.5.36 the first
// time: a few minutes on two cores, then cached) at one and three members,
// each valid under restart and named everywhere. Run by `make releases`
// (the build is too long for make check on a fresh machine; make
// track-record builds and runs older releases too).
func TestRunAtOtherReleases(t *testing.T) {
	dockertest.Require(t)
	for i, c := range []struct {
		version string
		members int
		system  string
	}{
		{"3.5", 1, "etcd v3.5.36, 1 member"},
		{"3.5", 3, "etcd v3.5.36, 3 members"},
	} {
		t.Run(c.system, func(t *testing.T) { runAt(t, c.version, c.members, c.system, uint64(31+i)) })
	}
}
