package gate

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/harness"
	"github.com/fencecheck/fencecheck/targets/conform"
)

func conformOf(t *testing.T, cfg ConformConfig) *conform.Report {
	t.Helper()
	rep, dir, err := Conform(context.Background(), cfg)
	require.NoError(t, err)
	if dir != "" {
		t.Cleanup(func() { os.RemoveAll(dir) })
	}
	return rep
}

func TestReferenceIsConformant(t *testing.T) {
	rep := conformOf(t, ConformConfig{Target: "memory"})
	assert.True(t, rep.Conformant(), "%v", rep.Deviations)
	sealed := conformOf(t, ConformConfig{Target: "memory", SealKey: "k"})
	assert.True(t, sealed.Conformant(), "%v", sealed.Deviations)
}

// The reference's bug switches that break the contract in plain sight are
// caught before any fault; the others (counter-in-memory, forget-highwater,
// wallclock-tokens, split-issuers) need faults and are the fault run's job.
func TestReferenceBugsThatBreakTheContract(t *testing.T) {
	for _, c := range []struct {
		bug, seal string
		checks    []string
	}{
		{"accept-equal", "", []string{"write-equal-token"}},
		{"missing-as-zero", "", []string{"write-missing-token", "write-empty-token"}},
		{"no-fencing", "", []string{"write-equal-token", "write-stale-token"}},
		{"accept-forged", "k", []string{"write-forged-token"}},
	} {
		t.Run(c.bug, func(t *testing.T) {
			rep := conformOf(t, ConformConfig{Target: "memory", Bugs: []string{c.bug}, SealKey: c.seal})
			require.False(t, rep.Conformant())
			for _, check := range c.checks {
				assert.True(t, rep.Has(check), "want a %s deviation, got %v", check, rep.Deviations)
			}
		})
	}
}

func TestPythonExampleIsConformant(t *testing.T) {
	rep := conformOf(t, ConformConfig{Target: "spec:../examples/python-fence/spec.json"})
	assert.True(t, rep.Conformant(), "%v", rep.Deviations)
	assert.Empty(t, rep.Skipped)

	bad := conformOf(t, ConformConfig{Target: exampleSpec(t, "", "--bug", "missing-as-zero")})
	assert.True(t, bad.Has("write-missing-token"), "%v", bad.Deviations)
}

func TestConformErrors(t *testing.T) {
	_, _, err := Conform(context.Background(), ConformConfig{Target: "nope"})
	assert.True(t, IsUsage(err))
	_, _, err = Conform(context.Background(), ConformConfig{Target: "spec:../examples/python-fence/spec.json", Bugs: []string{"accept-equal"}})
	assert.True(t, IsUsage(err), "bug switches belong to the reference")

	spec := filepath.Join(t.TempDir(), "s.json")
	require.NoError(t, os.WriteFile(spec, []byte(`{"name":"x","start_timeout":"2s","nodes":[
		{"name":"n1","roles":["issuer","resource"],"command":["python3","-c","import time; time.sleep(30) # {port}"]}]}`), 0o644))
	_, dir, err := Conform(context.Background(), ConformConfig{Target: "spec:" + spec})
	require.Error(t, err)
	assert.ErrorIs(t, err, harness.ErrCannotRun)
	assert.Contains(t, err.Error(), "did not answer GET /v1/health with 200 within 2s")
	assert.DirExists(t, filepath.Join(dir, "logs"), "the logs of a node that did not start are kept")
	os.RemoveAll(dir)
}

// issue 23: conform against a url node of a closed port fails fast and says
// why (before: 30 s of silence, then exit 3), and leaves no empty
// fencecheck-conform-* folder in the temporary folder; one deviation is "1
// deviation".
func TestConformOfAClosedPortFailsFast(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	url := "http://" + l.Addr().String()
	require.NoError(t, l.Close())
	spec := filepath.Join(t.TempDir(), "url.json")
	require.NoError(t, os.WriteFile(spec, []byte(`{"name":"x","nodes":[{"name":"n1","roles":["issuer","resource"],"url":"`+url+`"}]}`), 0o644))
	start := time.Now()
	_, dir, err := Conform(context.Background(), ConformConfig{Target: "spec:" + spec})
	require.Error(t, err)
	assert.Less(t, time.Since(start), harness.RefusedGrace+3*time.Second)
	assert.ErrorIs(t, err, harness.ErrCannotRun)
	assert.Contains(t, err.Error(), "node n1 at "+url+" refused every connection for 5s: nothing listens there")
	assert.NotContains(t, err.Error(), "logs in")
	assert.Empty(t, dir)
	left, _ := filepath.Glob(filepath.Join(tmp, "fencecheck-conform-*"))
	assert.Empty(t, left, "no empty folder left behind")

	rep, dir, err := Conform(context.Background(), ConformConfig{Target: "memory", Bugs: []string{"accept-equal"}})
	require.NoError(t, err)
	defer os.RemoveAll(dir)
	var out strings.Builder
	rep.Print(&out)
	assert.Contains(t, out.String(), "not conformant: 1 deviation; ")
}
