package targets

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/harness"
)

// --version reaches the targets built from source, --members the clusters;
// every other target refuses them rather than run what was not asked for.
func TestVersionAndMembersReachOnlyTheirTargets(t *testing.T) {
	for _, name := range []string{"etcd", "etcd-mutex"} {
		tg, err := New(harness.Config{Target: name, Version: "3.6", Members: 5})
		require.NoError(t, err, name)
		sys, err := tg.(harness.Systemer).System(t.Context())
		require.NoError(t, err)
		assert.Equal(t, "etcd v3.6.17, 5 members", sys, name)
	}
	_, err := New(harness.Config{Target: "etcd", Version: "3.3"})
	assert.ErrorContains(t, err, "3.5")
	_, err = New(harness.Config{Target: "zookeeper", Members: 1})
	assert.NoError(t, err)
	for _, name := range []string{"memory", "redis", "postgres", "mysql", "zookeeper", "s3"} {
		_, err := New(harness.Config{Target: name, Version: "7.2"})
		assert.ErrorContains(t, err, "--version", name)
	}
	_, err = New(harness.Config{Target: "s3-unconditional", Version: "3.80"})
	assert.ErrorContains(t, err, "one build of SeaweedFS")
	tg, err := New(harness.Config{Target: "s3", Members: 1})
	require.NoError(t, err)
	sys, err := tg.(harness.Systemer).System(t.Context())
	require.NoError(t, err)
	assert.Contains(t, sys, "etcd v3.7.3, 1 member; SeaweedFS v0.0.0-")
	for _, name := range []string{"memory", "redis", "redis-everysec", "postgres", "mysql"} {
		_, err := New(harness.Config{Target: name, Members: 3})
		assert.ErrorContains(t, err, "--members", name)
	}
	_, err = New(harness.Config{Target: "spec:x.json", Members: 3})
	assert.ErrorContains(t, err, "--members")
}
