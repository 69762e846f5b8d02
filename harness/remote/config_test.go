package remote

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ~/.ssh/config as OpenSSH reads it: the first value of a keyword wins
// over every matching block, globs and negations match the alias, Match
// blocks are passed over, ~ is the home folder.
func TestSSHConfig(t *testing.T) {
	home, err := os.UserHomeDir()
	require.NoError(t, err)
	file := filepath.Join(t.TempDir(), "config")
	require.NoError(t, os.WriteFile(file, []byte(`
# the lab
Host db-* !db-old
  HostName	10.0.0.5
  User ops
  IdentityFile ~/.ssh/lab
Match host db-1
  User nobody
Host *
  User default
  Port 2222
  IdentityFile ~/.ssh/id_other
  UserKnownHostsFile ~/.ssh/lab_known /etc/ssh/known
`), 0o644))
	c, err := readSSHConfig(file, "db-1")
	require.NoError(t, err)
	assert.Equal(t, sshConfig{HostName: "10.0.0.5", User: "ops", Port: "2222",
		IdentityFiles: []string{filepath.Join(home, ".ssh/lab"), filepath.Join(home, ".ssh/id_other")},
		KnownHosts:    []string{filepath.Join(home, ".ssh/lab_known"), "/etc/ssh/known"}}, c)

	c, err = readSSHConfig(file, "db-old")
	require.NoError(t, err)
	assert.Equal(t, "", c.HostName, "a negated pattern keeps the block out")
	assert.Equal(t, "default", c.User)

	c, err = readSSHConfig(filepath.Join(t.TempDir(), "missing"), "x")
	require.NoError(t, err, "no config is no error")
	assert.Equal(t, sshConfig{}, c)
}

func TestShellQuote(t *testing.T) {
	assert.Equal(t, "/tmp/fencecheck-x/fencehost", shellQuote("/tmp/fencecheck-x/fencehost"))
	assert.Equal(t, `'a b'`, shellQuote("a b"))
	assert.Equal(t, `'it'\''s'`, shellQuote("it's"))
	assert.Equal(t, `''`, shellQuote(""))
	assert.Equal(t, `'$(rm -rf /)'`, shellQuote("$(rm -rf /)"))
}
