package dockertest

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
)

// recorder is a testing.TB that notes whether Require failed or skipped
// (the real methods would end the calling test).
type recorder struct {
	testing.TB
	verdict string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	if r.verdict == "" {
		r.verdict = "fail: " + fmt.Sprintf(format, args...)
	}
}
func (r *recorder) Skipf(format string, args ...any) {
	if r.verdict == "" {
		r.verdict = "skip: " + fmt.Sprintf(format, args...)
	}
}

// With Docker unreachable, Docker tests skip on a developer's machine but
// fail in CI: a skipped safety test must never pass a pipeline.
func TestRequireFailsInCIWithoutDocker(t *testing.T) {
	t.Setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
	for _, tc := range []struct {
		ci, require, want string
	}{
		{"", "", "skip"},
		{"true", "", "fail"},
		{"", "1", "fail"},
	} {
		t.Setenv("CI", tc.ci)
		t.Setenv("FENCECHECK_REQUIRE_DOCKER", tc.require)
		r := &recorder{TB: t}
		Require(r)
		assert.Regexp(t, "^"+tc.want+": ", r.verdict, "CI=%q FENCECHECK_REQUIRE_DOCKER=%q", tc.ci, tc.require)
	}
}
