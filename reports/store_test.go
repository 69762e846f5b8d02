package reports

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/checkers"
)

func TestTargetDirName(t *testing.T) {
	assert.Equal(t, "memory", TargetDirName("memory"))
	assert.Equal(t, "spec-_x_y.yaml", TargetDirName("spec:/x/y.yaml"))
	assert.Equal(t, "_latest", TargetDirName("latest"), "must not clash with the latest link")
	assert.Equal(t, "_", TargetDirName(".."))
	assert.Equal(t, "_", TargetDirName(""))
}

func TestNewRunDirAndLatest(t *testing.T) {
	store := t.TempDir()
	at := time.Date(2026, 11, 30, 7, 1, 2, 345e6, time.UTC)
	a, err := NewRunDir(store, "memory", at)
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(store, "memory", "20261130T070102.345Z"), a)
	b, err := NewRunDir(store, "memory", at)
	require.NoError(t, err)
	assert.Equal(t, a+"-1", b, "two runs in one millisecond get separate folders")

	require.NoError(t, UpdateLatest(store, a))
	require.NoError(t, UpdateLatest(store, b))
	link, err := os.Readlink(filepath.Join(store, LatestLink))
	require.NoError(t, err)
	assert.Equal(t, filepath.Join("memory", "20261130T070102.345Z-1"), link, "relative, so the store can move")
	link, err = os.Readlink(filepath.Join(store, "memory", LatestLink))
	require.NoError(t, err)
	assert.Equal(t, "20261130T070102.345Z-1", link)
	leftovers, _ := filepath.Glob(filepath.Join(store, "latest.tmp-*"))
	assert.Empty(t, leftovers)

	assert.Error(t, UpdateLatest(store, t.TempDir()), "a run outside the store")
}

// storeWithRuns makes a store with a valid memory run, an invalid etcd run
// (newer) and a crashed redis run with only a history.
func storeWithRuns(t *testing.T) string {
	store := t.TempDir()
	mk := func(target string, at time.Time, fixture string, check []checkers.Result) string {
		dir, err := NewRunDir(store, target, at)
		require.NoError(t, err)
		b, err := os.ReadFile(filepath.Join("testdata", fixture+".jsonl"))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, HistoryFile), b, 0o644))
		if check != nil {
			_, err := Write(dir, RunInfo{Target: target, Start: at, End: at.Add(30 * time.Second), Seed: 3}, checkOf(t, filepath.Join(dir, HistoryFile), check))
			require.NoError(t, err)
		}
		require.NoError(t, UpdateLatest(store, dir))
		return dir
	}
	v, inv := validCheck(), invalidCheck()
	mk("memory", testStart, "valid", v)
	mk("etcd", testStart.Add(time.Hour), "invalid", inv)
	mk("redis", testStart.Add(2*time.Hour), "info", nil)
	require.NoError(t, os.MkdirAll(filepath.Join(store, "memory", "not-a-run"), 0o755))
	return store
}

func TestListRuns(t *testing.T) {
	store := storeWithRuns(t)
	runs, err := ListRuns(store)
	require.NoError(t, err)
	require.Len(t, runs, 3)
	assert.Equal(t, []string{"redis", "etcd", "memory"}, []string{runs[0].Target, runs[1].Target, runs[2].Target}, "newest first")
	assert.Equal(t, checkers.Verdict(""), runs[0].Verdict, "a crashed run has no verdict")
	assert.False(t, runs[0].HasReport)
	assert.Equal(t, checkers.Invalid, runs[1].Verdict)
	assert.Equal(t, 3, runs[1].Anomalies, "the one count: distinct violations")
	assert.Equal(t, 30*time.Second, runs[1].Duration)
	assert.Equal(t, checkers.Valid, runs[2].Verdict)
	assert.True(t, runs[2].HasReport)

	none, err := ListRuns(filepath.Join(store, "missing"))
	require.NoError(t, err)
	assert.Empty(t, none)
}

func get(t *testing.T, h http.Handler, path string) (*http.Response, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	res := rec.Result()
	b, _ := io.ReadAll(res.Body)
	return res, string(b)
}

func TestServe(t *testing.T) {
	store := storeWithRuns(t)
	// A hostile file name and a log that looks like HTML.
	runs, err := ListRuns(store)
	require.NoError(t, err)
	memDir := filepath.Join(store, filepath.FromSlash(runs[2].Path))
	require.NoError(t, os.MkdirAll(filepath.Join(memDir, LogsDir), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(memDir, LogsDir, "n1.log"), []byte("<html><script>alert(1)</script>"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(memDir, `"><script>alert(2)<`), []byte("x"), 0o644))
	secret := filepath.Join(t.TempDir(), "secret.txt")
	require.NoError(t, os.WriteFile(secret, []byte("outside the store"), 0o644))
	require.NoError(t, os.Symlink(secret, filepath.Join(memDir, "escape.txt")))

	s, err := NewServer(store)
	require.NoError(t, err)
	defer s.Close()

	res, body := get(t, s, "/")
	require.Equal(t, http.StatusOK, res.StatusCode)
	assert.Equal(t, "nosniff", res.Header.Get("X-Content-Type-Options"))
	iRedis, iEtcd, iMem := strings.Index(body, ">redis<"), strings.Index(body, ">etcd<"), strings.Index(body, ">memory<")
	require.True(t, iRedis > 0 && iEtcd > 0 && iMem > 0, "every run listed")
	assert.True(t, iRedis < iEtcd && iEtcd < iMem, "newest first")
	assert.Contains(t, body, `class="pill v-invalid"`)
	assert.Contains(t, body, "no results")
	assert.Contains(t, body, "/runs/etcd/20261130T070000.000Z/report.html")
	assert.NotContains(t, body, "<script>alert(2)", "file names are escaped")
	assert.Equal(t, 1, strings.Count(body, "<script"), "only the page's own filter script")

	res, body = get(t, s, "/runs/etcd/20261130T070000.000Z/report.html")
	assert.Equal(t, http.StatusOK, res.StatusCode)
	assert.Equal(t, "text/html; charset=utf-8", res.Header.Get("Content-Type"))
	assert.Contains(t, body, `data-verdict="invalid"`)

	res, _ = get(t, s, "/runs/latest/history.jsonl")
	assert.Equal(t, http.StatusOK, res.StatusCode, "the latest link is followed inside the store")
	assert.Equal(t, "text/plain; charset=utf-8", res.Header.Get("Content-Type"))

	res, _ = get(t, s, "/runs/"+runs[2].Path+"/logs/n1.log")
	assert.Equal(t, http.StatusOK, res.StatusCode)
	assert.Equal(t, "text/plain; charset=utf-8", res.Header.Get("Content-Type"), "a log that looks like HTML is served as text")

	res, body = get(t, s, "/runs/"+runs[2].Path+"/escape.txt")
	assert.NotEqual(t, http.StatusOK, res.StatusCode, "a symlink out of the store is refused")
	assert.NotContains(t, body, "outside the store")

	for _, p := range []string{"/runs/../../../etc/passwd", "/runs/%2e%2e/%2e%2e/etc/passwd", "/runs/..%2f..%2fetc/passwd", "/runs//etc/passwd"} {
		res, body := get(t, s, p)
		assert.NotEqual(t, http.StatusOK, res.StatusCode, p)
		assert.NotContains(t, body, "root:", p)
	}

	res, body = get(t, s, "/runs/memory/")
	assert.Equal(t, http.StatusOK, res.StatusCode, "folders are listed")
	assert.Contains(t, body, "20261130T060000.000Z")
}

func TestIsLoopback(t *testing.T) {
	assert.True(t, IsLoopback("127.0.0.1:8080"))
	assert.True(t, IsLoopback("[::1]:8080"))
	assert.True(t, IsLoopback("localhost:8080"))
	assert.False(t, IsLoopback("0.0.0.0:8080"))
	assert.False(t, IsLoopback(":8080"))
	assert.False(t, IsLoopback("192.168.1.4:8080"))
}

// issue 12: keys whose names sanitize alike get their own Porcupine pages.
func TestKeyFileNamesUnique(t *testing.T) {
	names := map[string]string{}
	for _, k := range []string{"a/b", "a_b", "a:b", "a-b", "a b", "ab", "..", "latest"} {
		n := keyFileName(k)
		if prev, ok := names[n]; ok {
			t.Errorf("keys %q and %q share the file name %q", prev, k, n)
		}
		names[n] = k
	}
	if keyFileName("r1") != "r1" {
		t.Errorf("a safe key keeps its name: %q", keyFileName("r1"))
	}
}

// issue 27: a run that never started says "could not run" and why, apart
// from a run with a history and no results.
func TestRunsThatCouldNotRunAreNotRunsWithoutResults(t *testing.T) {
	store := storeWithRuns(t)
	dir, err := NewRunDir(store, "postgres", testStart.Add(3*time.Hour))
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(filepath.Join(dir, LogsDir), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, ErrorFile), []byte("target postgres did not start: port 5432 in use\nmore\n"), 0o644))
	runs, err := ListRuns(store)
	require.NoError(t, err)
	require.Len(t, runs, 4)
	assert.Equal(t, "postgres", runs[0].Target)
	assert.Equal(t, StateCouldNotRun, runs[0].State)
	assert.Equal(t, "target postgres did not start: port 5432 in use", runs[0].Summary)
	assert.Equal(t, StateNoResults, runs[1].State, "the crashed redis run has a history and no results")
	assert.Empty(t, runs[2].State)

	srv, err := NewServer(store)
	require.NoError(t, err)
	defer srv.Close()
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	page := rec.Body.String()
	assert.Contains(t, page, `<span class="pill v-could-not-run">could not run</span>`)
	assert.Contains(t, page, `<span class="no-results">no results</span>`)
	assert.Contains(t, page, "1 could not run, 1 without results")
}
