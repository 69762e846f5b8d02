package spec

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/checkers"
)

// The spec of the issue, word for word: a spec written against it must keep
// working.
const issueSpec = `{
  "name": "my-fence",
  "semantics": {"equal": "reject", "scope": "per-lock", "authenticated": false},
  "nodes": [
    {"name": "n1", "roles": ["issuer", "resource"],
     "command": ["./bin/my-fence", "--addr", "127.0.0.1:{port}", "--data", "{data}"]}
  ]
}`

func TestParseIssueSpec(t *testing.T) {
	s, err := Parse([]byte(issueSpec))
	require.NoError(t, err)
	assert.Equal(t, "my-fence", s.Name)
	require.Len(t, s.Nodes, 1)
	n := s.Nodes[0]
	assert.Equal(t, KindCommand, n.Kind())
	assert.True(t, n.HasRole(RoleIssuer))
	assert.True(t, n.HasRole(RoleResource))
	assert.False(t, n.ClockOptIn())
	assert.True(t, n.ClockWarped(), "by default fencecheck moves the process's own clock")
	assert.Equal(t, checkers.Semantics{Equal: checkers.EqualReject, Scope: checkers.ScopePerLock}, s.ModelSemantics())
	assert.Equal(t, DefaultStartTimeout, s.Timeout())
}

func TestParseEveryKind(t *testing.T) {
	s, err := Parse([]byte(`{
	  "name": "mixed.v2",
	  "fencing_api": "v1",
	  "semantics": {"equal": "accept", "scope": "global", "authenticated": true},
	  "start_timeout": "45s",
	  "nodes": [
	    {"name": "issuer-1", "roles": ["issuer"], "image": "acme/lock:1.2", "port": 7000, "data": "/var/lib/lock",
	     "command": ["/lock", "--listen", "0.0.0.0:{port}", "--peer", "{addr:issuer-2}"], "clock": "offset-file",
	     "env": {"LOCK_DATA": "{data}", "CLOCK": "{clock_file}"}},
	    {"name": "issuer-2", "roles": ["issuer"], "image": "acme/lock:1.2", "port": 7000},
	    {"name": "store", "roles": ["resource"], "url": "http://127.0.0.1:9000/"}
	  ]
	}`))
	require.NoError(t, err)
	assert.Equal(t, []string{KindImage, KindImage, KindURL}, []string{s.Nodes[0].Kind(), s.Nodes[1].Kind(), s.Nodes[2].Kind()})
	assert.Equal(t, checkers.Semantics{Equal: checkers.EqualAccept, Scope: checkers.ScopeGlobal, Authenticated: true}, s.ModelSemantics())
	assert.Equal(t, 45*time.Second, s.Timeout())
	assert.True(t, s.Nodes[0].ClockOptIn())
}

func TestSemanticsDefaultWhenOmitted(t *testing.T) {
	s, err := Parse([]byte(`{"name":"x","nodes":[{"name":"n","roles":["issuer","resource"],"url":"http://127.0.0.1:1"}]}`))
	require.NoError(t, err)
	assert.Equal(t, checkers.DefaultSemantics(), s.ModelSemantics())
}

func TestLoadResolvesAgainstTheSpecFolder(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "fence.json")
	require.NoError(t, os.WriteFile(path, []byte(issueSpec), 0o644))
	s, err := Load(path)
	require.NoError(t, err)
	assert.Equal(t, dir, s.Dir)
	assert.Equal(t, path, s.Path)

	_, err = Load(filepath.Join(dir, "missing.json"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "no such file")
}

func TestTheExampleSpecParses(t *testing.T) {
	s, err := Load("../../examples/python-fence/spec.json")
	require.NoError(t, err)
	assert.Equal(t, "python-fence", s.Name)
	assert.True(t, s.Nodes[0].ClockOptIn())
}

// Each kind of bad spec, with the words and the JSON path its error must
// carry.
func TestBadSpecs(t *testing.T) {
	node := `{"name":"n1","roles":["issuer","resource"],"command":["srv","{port}"]}`
	cases := []struct {
		name string
		spec string
		want []string
	}{
		{"not JSON", `{"name": "x",,}`, []string{"invalid JSON at line 1, column 14"}},
		{"syntax error line", "{\n  \"name\": \"x\"\n  \"nodes\": []\n}", []string{"invalid JSON at line 3"}},
		{"not an object", `["x"]`, []string{"must be an object"}},
		{"unknown top-level field", `{"name":"x","nodez":[],"nodes":[` + node + `]}`,
			[]string{`nodez: unknown field "nodez" (did you mean "nodes"?)`}},
		{"unknown node field", `{"name":"x","nodes":[{"name":"n1","roles":["issuer","resource"],"comand":["a"],"command":["srv","{port}"]}]}`,
			[]string{`nodes[0].comand: unknown field "comand" (did you mean "command"?)`}},
		{"unknown semantics field", `{"name":"x","semantics":{"equals":"reject"},"nodes":[` + node + `]}`,
			[]string{`semantics.equals: unknown field "equals" (did you mean "equal"?)`}},
		{"unknown field far from any", `{"name":"x","replicas":3,"nodes":[` + node + `]}`,
			[]string{`replicas: unknown field "replicas" (known: name, fencing_api, semantics, start_timeout, nodes)`}},
		{"missing name", `{"nodes":[` + node + `]}`, []string{"name: missing"}},
		{"missing nodes", `{"name":"x"}`, []string{"nodes: missing (at least one node)"}},
		{"empty nodes", `{"name":"x","nodes":[]}`, []string{"nodes: must list at least one node"}},
		{"missing node name", `{"name":"x","nodes":[{"roles":["issuer","resource"],"url":"http://h:1"}]}`, []string{"nodes[0].name: missing"}},
		{"missing roles", `{"name":"x","nodes":[{"name":"n1","url":"http://h:1"}]}`,
			[]string{`nodes[0].roles: missing (one or both of "issuer", "resource")`, `no node has the role "issuer"`}},
		{"unknown role", `{"name":"x","nodes":[{"name":"n1","roles":["issuer","storage"],"url":"http://h:1"}]}`,
			[]string{`nodes[0].roles[1]: unknown role "storage"`, `no node has the role "resource"`}},
		{"missing kind", `{"name":"x","nodes":[{"name":"n1","roles":["issuer","resource"]}]}`,
			[]string{`nodes[0]: missing the node's kind: give "command"`}},
		{"two kinds", `{"name":"x","nodes":[{"name":"n1","roles":["issuer","resource"],"url":"http://h:1","command":["a"]}]}`,
			[]string{"nodes[0]: a node is one of command, image, ssh or url; this one has command and url"}},
		{"image without port", `{"name":"x","nodes":[{"name":"n1","roles":["issuer","resource"],"image":"acme/fence"}]}`,
			[]string{"nodes[0].port: missing (the container port the node listens on)"}},
		{"relative data path", `{"name":"x","nodes":[{"name":"n1","roles":["issuer","resource"],"image":"a","port":1,"data":"data"}]}`,
			[]string{"nodes[0].data: must be an absolute path inside the container"}},
		{"command never uses port", `{"name":"x","nodes":[{"name":"n1","roles":["issuer","resource"],"command":["srv","--data","{data}"]}]}`,
			[]string{"nodes[0].command: never mentions {port}"}},
		{"placeholder typo", `{"name":"x","nodes":[{"name":"n1","roles":["issuer","resource"],"command":["srv","{port}","{dta}"]}]}`,
			[]string{"nodes[0].command[2]: unknown placeholder {dta}"}},
		{"addr of no node", `{"name":"x","nodes":[{"name":"n1","roles":["issuer","resource"],"command":["srv","{port}","{addr:n9}"]}]}`,
			[]string{"nodes[0].command[2]: {addr:n9} names no node of this spec"}},
		{"clock_file without opt-in", `{"name":"x","nodes":[{"name":"n1","roles":["issuer","resource"],"command":["srv","{port}","{clock_file}"]}]}`,
			[]string{`{clock_file} needs "clock": "offset-file"`}},
		{"bad clock", `{"name":"x","nodes":[{"name":"n1","roles":["issuer","resource"],"command":["srv","{port}"],"clock":"faketime"}]}`,
			[]string{`nodes[0].clock: must be absent (fencecheck moves the process's clock), "offset-file"`}},
		{"clock on a url node", `{"name":"x","nodes":[{"name":"n1","roles":["issuer","resource"],"url":"http://h:1","clock":"offset-file"}]}`,
			[]string{"nodes[0].clock: a url node is not started by the harness"}},
		{"bad url", `{"name":"x","nodes":[{"name":"n1","roles":["issuer","resource"],"url":"127.0.0.1:7000"}]}`,
			[]string{"nodes[0].url: must be a base URL such as http://127.0.0.1:7001"}},
		{"duplicate node names", `{"name":"x","nodes":[` + node + `,` + node + `]}`,
			[]string{`nodes[1].name: "n1" is already the name of nodes[0]`}},
		{"bad node name", `{"name":"x","nodes":[{"name":"n 1","roles":["issuer","resource"],"url":"http://h:1"}]}`,
			[]string{"nodes[0].name: must match"}},
		{"wrong type", `{"name":"x","nodes":[{"name":"n1","roles":"issuer","url":"http://h:1"}]}`,
			[]string{"nodes[0].roles: must be a list of strings"}},
		{"port as string", `{"name":"x","nodes":[{"name":"n1","roles":["issuer","resource"],"image":"a","port":"7000"}]}`,
			[]string{"nodes[0].port: must be an integer"}},
		{"bad duration", `{"name":"x","start_timeout":"soon","nodes":[` + node + `]}`,
			[]string{`start_timeout: must be a positive duration such as "30s", got "soon"`}},
		{"bad semantics", `{"name":"x","semantics":{"equal":"allow","scope":"cluster"},"nodes":[` + node + `]}`,
			[]string{`semantics.equal: must be "reject" or "accept", got "allow"`, `semantics.scope: must be "per-lock" or "global", got "cluster"`}},
		{"bad api version", `{"name":"x","fencing_api":"v2","nodes":[` + node + `]}`, []string{`fencing_api: only "v1" exists`}},
		{"port on a command node", `{"name":"x","nodes":[{"name":"n1","roles":["issuer","resource"],"command":["srv","{port}"],"port":80}]}`,
			[]string{"nodes[0].port: only image nodes take a port"}},
		{"bad env name", `{"name":"x","nodes":[{"name":"n1","roles":["issuer","resource"],"command":["srv","{port}"],"env":{"1X":"y"}}]}`,
			[]string{"nodes[0].env.1X: is not a valid environment variable name"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse([]byte(c.spec))
			require.Error(t, err)
			var se *Error
			require.ErrorAs(t, err, &se)
			for _, w := range c.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
}

// Every problem is listed at once, so one edit fixes them all.
func TestAllProblemsAtOnce(t *testing.T) {
	_, err := Parse([]byte(`{"nodes":[{"name":"n1","roles":["boss"],"image":"a"}],"extra":1}`))
	require.Error(t, err)
	var se *Error
	require.ErrorAs(t, err, &se)
	assert.GreaterOrEqual(t, len(se.Problems), 4, "%v", err)
	assert.Contains(t, err.Error(), "problems:")
	for _, w := range []string{"extra: unknown field", "name: missing", "nodes[0].roles[0]: unknown role", "nodes[0].port: missing"} {
		assert.Contains(t, err.Error(), w)
	}
}

func TestLoadNamesTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.json")
	require.NoError(t, os.WriteFile(path, []byte(`{"name":"x","nodes":[{"name":"n1","roles":["issuer","resource"],"url":"ftp://h"}]}`), 0o644))
	_, err := Load(path)
	require.Error(t, err)
	assert.Contains(t, err.Error(), path+": nodes[0].url: must be a base URL")
}

func TestYAMLSpec(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "fence.yaml")
	require.NoError(t, os.WriteFile(path, []byte(`
name: my-fence
semantics: {equal: reject, scope: per-lock}
start_timeout: 10s
nodes:
  - name: n1
    roles: [issuer, resource]
    command: ["./bin/my-fence", "--addr", "127.0.0.1:{port}", "--data", "{data}"]
    clock: offset-file
`), 0o644))
	s, err := Load(path)
	require.NoError(t, err)
	assert.Equal(t, "my-fence", s.Name)
	assert.Equal(t, 10*time.Second, s.Timeout())
	assert.True(t, s.Nodes[0].ClockOptIn())

	require.NoError(t, os.WriteFile(path, []byte("name: x\nnodes:\n  - name: n1\n    rolse: [issuer]\n    url: http://h:1\n"), 0o644))
	_, err = Load(path)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `nodes[0].rolse: unknown field "rolse" (did you mean "roles"?)`)

	require.NoError(t, os.WriteFile(path, []byte("name: x\n nodes: [\n"), 0o644))
	_, err = Load(path)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "invalid YAML")
}
