package s3

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/harness/nodes"
)

// The table: etcd members, then SeaweedFS's three servers as data nodes,
// then the adapters, which start once the filer holds the fsync rule and
// write the way the target's name says.
func TestTable(t *testing.T) {
	for _, mode := range []WriteMode{Conditional, Unconditional} {
		tg := New(Options{Mode: mode})
		assert.Equal(t, Options{Mode: mode}.Name(), tg.Name())
		table := tg.(interface{ Table() []nodes.Node }).Table()
		var names []string
		for _, n := range table {
			names = append(names, n.Name)
		}
		assert.Equal(t, []string{"etcd-1", "etcd-2", "etcd-3", MasterNode, VolumeNode, FilerNode, "adapter-1", "adapter-2"}, names)
		byName := map[string]nodes.Node{}
		for _, n := range table {
			byName[n.Name] = n
		}
		for _, n := range []string{MasterNode, VolumeNode, FilerNode} {
			assert.False(t, byName[n].Issuer || byName[n].Resource, "%s is a data node", n)
			assert.Equal(t, "/data", byName[n].Data.Path, "%s keeps its data on this machine", n)
		}
		// The halves, by role: the members keep the issuer's state, the
		// SeaweedFS servers the resource's (coverage and the guided
		// schedule judge a node's half by its role).
		for _, n := range []string{"etcd-1", "etcd-2", "etcd-3"} {
			assert.Contains(t, byName[n].Role, "issuer", n)
			assert.NotContains(t, byName[n].Role, "resource", n)
		}
		for _, n := range []string{MasterNode, VolumeNode, FilerNode} {
			assert.Contains(t, byName[n].Role, "resource", n)
			assert.NotContains(t, byName[n].Role, "issuer", n)
		}
		assert.NotEmpty(t, byName[VolumeNode].Data.NoLayer, "the volume server is off the power-loss layer, and says why")
		assert.Empty(t, byName[FilerNode].Data.NoLayer)
		a := byName["adapter-1"]
		assert.Equal(t, []string{FilerNode}, a.WaitFor)
		cmd := strings.Join(a.Container.Cmd, " ")
		assert.Contains(t, cmd, "--backend s3 --etcd-endpoints http://{addr:etcd-1},http://{addr:etcd-2},http://{addr:etcd-3}")
		assert.Contains(t, cmd, "--s3-endpoint http://{addr:"+FilerNode+":s3} --s3-write "+string(mode))
		for _, arg := range byName[MasterNode].Container.Cmd {
			require.NotEqual(t, "-telemetry=true", arg)
		}
		assert.Contains(t, byName[MasterNode].Container.Cmd, "-telemetry=false", "nothing of a run leaves the machine")
	}
}
