package gate_test

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/analysis"
	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/gate"
	"github.com/fencecheck/fencecheck/harness"
	"github.com/fencecheck/fencecheck/history"
	"github.com/fencecheck/fencecheck/reports"
	"github.com/fencecheck/fencecheck/targets/memory"
)

// issue 23: runs against one long-lived server (a reference someone else
// runs, as a spec url node) each send their names in a namespace of their
// own: two runs at once and a later one are all valid. Without it the later
// run read what the earlier ones wrote (163 phantom reads, exit 1): a run
// that shares a namespace with an earlier one still does, which proves the
// test can fail.
func TestRunsShareALongLivedServer(t *testing.T) {
	node, err := memory.NewNode(memory.Config{Name: "shared", Dir: t.TempDir()})
	require.NoError(t, err)
	url, err := node.Start("")
	require.NoError(t, err)
	t.Cleanup(func() { node.Stop() })
	spec, err := json.Marshal(map[string]any{"name": "shared", "nodes": []any{
		map[string]any{"name": "n1", "roles": []string{"issuer", "resource"}, "url": url}}})
	require.NoError(t, err)
	specPath := filepath.Join(t.TempDir(), "url.json")
	require.NoError(t, os.WriteFile(specPath, spec, 0o644))

	store := t.TempDir()
	runOnce := func(seed uint64, namespace string) *gate.Result {
		res, err := gate.Run(context.Background(), gate.Config{Target: "spec:" + specPath, Time: 2 * time.Second,
			Concurrency: 3, Keys: 2, Readers: 1, Profile: "many-locks,steady", Nemesis: "none", Seed: seed, Namespace: namespace, Store: store})
		require.NoError(t, err)
		return res
	}
	var wg sync.WaitGroup
	var first, second *gate.Result
	wg.Add(2)
	go func() { defer wg.Done(); first = runOnce(1, "") }()
	go func() { defer wg.Done(); second = runOnce(2, "") }()
	wg.Wait()
	later := runOnce(3, "")
	for _, r := range []*gate.Result{first, second, later} {
		assert.Equal(t, analysis.ExitValid, r.ExitCode, r.Summary())
	}

	// Every name a run sent carries its namespace, which config.json and
	// the report's config record, and the reproduce line leaves out (a
	// repeat must not read what the run it repeats wrote).
	ns := first.Run.Namespace
	require.NotEmpty(t, ns)
	assert.NotEqual(t, ns, second.Run.Namespace)
	events, err := history.ReadFile(first.Run.HistoryPath)
	require.NoError(t, err)
	clientOps, main := 0, false
	for _, e := range events {
		if e.F == history.RunEvent && string(e.Extra[history.RunExtraPhase]) == `"`+history.PhaseMain+`"` {
			main = true // the preflight's names before it are its own
		}
		if !main || !e.IsClient() {
			continue
		}
		clientOps++
		assert.True(t, strings.HasPrefix(e.Key, ns+"."), "key %q is in namespace %s", e.Key, ns)
		if e.Value != "" && e.F == history.Write {
			assert.True(t, strings.HasPrefix(e.Value, ns+"."), "value %q is in namespace %s", e.Value, ns)
		}
	}
	assert.Positive(t, clientOps)
	cfg, err := harness.LoadConfig(first.Dir)
	require.NoError(t, err)
	assert.Empty(t, cfg.Namespace, "a run made from config.json derives a namespace of its own")
	b, err := os.ReadFile(filepath.Join(first.Dir, "config.json"))
	require.NoError(t, err)
	assert.Contains(t, string(b), `"namespace": "`+ns+`"`)
	assert.NotContains(t, strings.Join(first.Command, " "), "--namespace")

	again := runOnce(4, ns)
	assert.Equal(t, checkers.Invalid, again.Verdict, "a run in an earlier run's namespace reads its values: %s", again.Summary())
	phantoms := 0
	for _, a := range again.Checked.Anomalies() {
		if a.Kind == checkers.KindPhantomRead {
			phantoms++
		}
	}
	assert.Positive(t, phantoms, "the values of the earlier run are phantom reads")
	assert.Contains(t, strings.Join(again.Command, " "), "--namespace="+ns, "a namespace given by hand is repeated")
}

// issue 23: a run whose target did not start leaves its folder only when
// the folder holds the target's logs, with error.txt saying why; a url
// node's failed start (nothing written) leaves none, and it fails fast: a
// closed port is not waited on for the start timeout. STORE/latest is not
// pointed at either.
func TestAFailedStartLeavesItsLogsOrNothing(t *testing.T) {
	store := t.TempDir()
	spec := func(timeout, node string) string {
		path := filepath.Join(t.TempDir(), "spec.json")
		require.NoError(t, os.WriteFile(path, []byte(`{"name":"x","start_timeout":"`+timeout+`","nodes":[`+node+`]}`), 0o644))
		return "spec:" + path
	}
	closed := httptestClosedURL(t)
	start := time.Now()
	res, err := gate.Run(context.Background(), gate.Config{Target: spec("30s", `{"name":"n1","roles":["issuer","resource"],"url":"`+closed+`"}`),
		Time: time.Second, Store: store})
	require.Error(t, err)
	assert.Equal(t, analysis.ExitCannot, res.ExitCode)
	assert.Contains(t, err.Error(), "refused every connection")
	assert.Less(t, time.Since(start), 10*time.Second)
	assert.Empty(t, res.Dir)
	left, _ := filepath.Glob(filepath.Join(store, "*", "2*"))
	assert.Empty(t, left, "no empty run folder")

	res, err = gate.Run(context.Background(), gate.Config{Target: spec("2s", `{"name":"n1","roles":["issuer","resource"],"command":["sh","-c","echo starting; exec sleep 30 # {port}"]}`),
		Time: time.Second, Store: store})
	require.Error(t, err)
	require.NotEmpty(t, res.Dir)
	assert.Contains(t, err.Error(), "the target's logs are kept in "+res.Dir)
	assert.FileExists(t, filepath.Join(res.Dir, "logs", "n1.log"))
	why, err := os.ReadFile(filepath.Join(res.Dir, "error.txt"))
	require.NoError(t, err)
	assert.Contains(t, string(why), "did not answer GET /v1/health with 200 within")
	_, err = reports.HistoryOf(res.Dir)
	assert.ErrorContains(t, err, "its error.txt says why: the run could not be carried out: target x did not start", "report and check say why")
	_, err = os.Lstat(filepath.Join(store, "latest"))
	assert.ErrorIs(t, err, os.ErrNotExist, "latest points only at runs whose history began")
}

func httptestClosedURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return "http://" + l.Addr().String()
}
