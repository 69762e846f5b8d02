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

// Every server's zoo.cfg turns dynamic reconfiguration on and names each
// member as the reconfiguration writes it, and the super user's digest is
// user:base64(sha1(user:password)), as DigestAuthenticationProvider
// generateDigest gives it.
func TestReconfigurationConfig(t *testing.T) {
	cfg := New(Options{}).zooCfg()
	assert.Contains(t, cfg, "reconfigEnabled=true\n")
	assert.Contains(t, cfg, "server.3={addr:zk-3:quorum}:3888:participant;2181\n")
	assert.Equal(t, "super:Rq+sV+9pQ28k5Ipw0mO4mCifeR8=", superDigest())
	assert.Contains(t, jvmArgs, "-Dzookeeper.DigestAuthenticationProvider.superDigest="+superDigest())

	m := parseMembership([]byte("server.1=10.0.0.2:2888:3888:participant;0.0.0.0:2181\nserver.3=10.0.0.4:2888:3888:participant;0.0.0.0:2181\nversion=10000000a"))
	assert.True(t, m.has(1))
	assert.False(t, m.has(2))
	assert.Equal(t, "10000000a", m.version)
	assert.Equal(t, []string{"server.1=10.0.0.2:2888:3888:participant;0.0.0.0:2181", "server.3=10.0.0.4:2888:3888:participant;0.0.0.0:2181"}, m.lines())
}
