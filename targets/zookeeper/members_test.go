package zookeeper

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// --members sizes the ensemble: one server line per member (one line is a
// standalone server), and the adapters are given every server.
func TestMembersSizeTheEnsemble(t *testing.T) {
	for _, n := range []int{1, 3, 5} {
		tg := New(Options{Servers: n})
		assert.Len(t, tg.servers, n)
		cfg := tg.zooCfg()
		assert.Contains(t, cfg, "server.1={addr:zk-1:quorum}")
		if n > 1 {
			assert.Contains(t, cfg, "server.2=")
		} else {
			assert.NotContains(t, cfg, "server.2=")
		}
		servers := 0
		for _, node := range tg.Table() {
			if node.Role == "zookeeper" {
				servers++
			}
		}
		assert.Equal(t, n, servers)
	}
}
