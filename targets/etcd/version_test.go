package etcd

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/harness/docker"
)

func TestReleaseResolvesVersions(t *testing.T) {
	for in, want := range map[string]string{"": DefaultVersion, "3.5": "v3.5.36", "3.6": "v3.6.17",
		"3.7": DefaultVersion, "v3.6.5": "v3.6.5", "3.5.0": "v3.5.0", "v3.7.0-rc.0": "v3.7.0-rc.0"} {
		got, err := Release(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, bad := range []string{"3.4", "v3.4.30", "latest", "3", "2.3.8", "v3.5"} {
		_, err := Release(bad)
		assert.Error(t, err, bad)
	}
	_, err := Open(Options{Version: "3.4.1"})
	assert.ErrorContains(t, err, "before 3.5")
}

// DefaultVersion is the release images/etcd pins, so a run without
// --version names the server it ran.
func TestDefaultVersionIsTheNestedModules(t *testing.T) {
	b, err := os.ReadFile("../../images/etcd/go.mod")
	require.NoError(t, err)
	assert.Contains(t, string(b), "require go.etcd.io/etcd/server/v3 "+DefaultVersion+"\n")
}

func TestMembersAndImageFollowTheOptions(t *testing.T) {
	one := New(Options{Members: 1, Version: "3.5"}).(*Target)
	assert.Equal(t, []string{"etcd-1"}, one.members)
	assert.Equal(t, docker.EtcdImage("v3.5.36"), one.image())
	sys, err := one.System(t.Context())
	require.NoError(t, err)
	assert.Equal(t, "etcd v3.5.36, 1 member", sys)
	three := New(Options{}).(*Target)
	assert.Equal(t, docker.ImageEtcd, three.image(), "the default release is the nested module's image")
	sys, _ = three.System(t.Context())
	assert.Equal(t, "etcd "+DefaultVersion+", 3 members", sys)
	var cluster string
	for _, n := range one.Table() {
		if n.Name == "etcd-1" {
			cluster = strings.Join(n.Container.Cmd, " ")
		}
	}
	assert.Contains(t, cluster, "--initial-cluster etcd-1=http://{addr:etcd-1:peer} ")
}
