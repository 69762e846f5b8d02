package dockertest

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestRequireProbe is the probe the test below runs in a child process.
func TestRequireProbe(t *testing.T) {
	if os.Getenv("FENCECHECK_DOCKERTEST_PROBE") == "" {
		t.Skip("only run as a child of TestRequireFailsInCI")
	}
	Require(t)
}

// With Docker unreachable, Docker tests skip on a developer's machine but
// fail in CI: a skipped safety test must never pass a pipeline.
func TestRequireFailsInCI(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	probe := func(extra ...string) (string, error) {
		cmd := exec.Command(exe, "-test.run=^TestRequireProbe$", "-test.v")
		var env []string
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "CI=") && !strings.HasPrefix(kv, "FENCECHECK_REQUIRE_DOCKER=") && !strings.HasPrefix(kv, "DOCKER_HOST=") {
				env = append(env, kv)
			}
		}
		cmd.Env = append(env, append([]string{"FENCECHECK_DOCKERTEST_PROBE=1", "DOCKER_HOST=unix:///nonexistent/docker.sock"}, extra...)...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := probe()
	assert.NoError(t, err, "locally, no Docker means skip: %s", out)
	assert.Contains(t, out, "SKIP")
	for _, env := range []string{"CI=true", "FENCECHECK_REQUIRE_DOCKER=1"} {
		out, err := probe(env)
		assert.Error(t, err, "with %s, no Docker must fail: %s", env, out)
		assert.Contains(t, out, "FAIL")
	}
}
