package targets

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// issue 23: `make test TARGET=X` installs what X needs and nothing else
// (scripts/deps.sh X): every target of the table has its list, and etcd's
// holds no database, no Java, no browser (before: every Docker target got
// Redis, MariaDB, ZooKeeper and a Java runtime, 16 s and root).
func TestDepsScriptKnowsEveryTarget(t *testing.T) {
	list := func(target string) (pkgs []string, stderr string) {
		cmd := exec.Command("bash", "../scripts/deps.sh", "--list", target)
		var errOut strings.Builder
		cmd.Stderr = &errOut
		out, err := cmd.Output()
		require.NoError(t, err, "%s: %s", target, errOut.String())
		return strings.Fields(string(out)), errOut.String()
	}
	docker, _ := list("docker")
	for _, name := range append(Names(), "spec:x.json") {
		pkgs, stderr := list(name)
		assert.Empty(t, stderr, "scripts/deps.sh has no package list for target %s", name)
		assert.Subset(t, docker, pkgs, "deps.sh docker (make images) covers %s", name)
	}
	etcd, _ := list("etcd")
	assert.ElementsMatch(t, []string{"iptables", "util-linux", "fuse3"}, etcd)
	memory, _ := list("memory")
	assert.Empty(t, memory, "the embedded reference needs no package")
	redis, _ := list("redis")
	assert.Contains(t, redis, "redis-server")
	assert.NotContains(t, redis, "zookeeper")
	_, stderr := list("bogus")
	assert.Contains(t, stderr, "no package list for target bogus: installing nothing")
}
