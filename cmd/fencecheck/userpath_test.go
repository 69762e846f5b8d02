package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/analysis"
	"github.com/fencecheck/fencecheck/checkers/historytest"
	"github.com/fencecheck/fencecheck/reports"
)

// Issue 23's cases on the user's path, each through the command itself.

// writeHistory writes n acquire-and-write cycles (2n operations ending ok)
// as a history file, and returns its path and bytes.
func writeHistory(t *testing.T, cycles int) (string, []byte) {
	t.Helper()
	b := historytest.New()
	for i := 1; i <= cycles; i++ {
		tok := fmt.Sprint(i)
		at := int64(i * 100)
		b.Acquire("k1", at, at+5, tok).Write("k1", tok, "v"+tok, at+10, at+20)
	}
	var buf bytes.Buffer
	for _, e := range b.Events() {
		line, err := json.Marshal(e)
		require.NoError(t, err)
		buf.Write(append(line, '\n'))
	}
	path := filepath.Join(t.TempDir(), "h.jsonl")
	require.NoError(t, os.WriteFile(path, buf.Bytes(), 0o644))
	return path, buf.Bytes()
}

// cli runs the command to its end with stdin, and returns its exit code
// and output.
func cli(t *testing.T, stdin []byte, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), cliEnv+"=1")
	cmd.Stdin = bytes.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), out.String(), errOut.String()
	}
	require.NoError(t, err)
	return 0, out.String(), errOut.String()
}

// A CI job whose recorder died at its start must not pass: check on an
// empty history, or one of 3 operations, is unknown (exit 2) with the
// reason printed, as fencecheck test would judge it; --min-ops 0 judges
// any history as it is, and says so on the terminal. Before: both exit 0,
// "verdict: valid", the note only in results.json.
func TestCheckOfAnEmptyOrSmallHistoryIsUnknown(t *testing.T) {
	empty := filepath.Join(t.TempDir(), "empty.jsonl")
	require.NoError(t, os.WriteFile(empty, nil, 0o644))
	small, _ := writeHistory(t, 2) // 4 operations ok: below the minimum of 10
	for _, path := range []string{empty, small} {
		code, out, errOut := cli(t, nil, "check", path)
		assert.Equal(t, analysis.ExitUnknown, code, "%s\n%s", out, errOut)
		assert.Contains(t, out, "verdict: unknown")
		assert.Contains(t, out, "gate: too few operations to judge")
	}
	code, out, _ := cli(t, nil, "check", "--min-ops", "0", empty)
	assert.Equal(t, analysis.ExitValid, code)
	assert.Contains(t, out, "note: nothing to judge: no client operation ended ok or fail, and --min-ops 0 asked for no minimum")
	code, out, _ = cli(t, nil, "check", "--min-ops", "0", small)
	assert.Equal(t, analysis.ExitValid, code)
	assert.Contains(t, out, "note: a small history: only 4 operations ended ok or fail")

	enough, content := writeHistory(t, 6)
	code, out, _ = cli(t, nil, "check", enough)
	assert.Equal(t, analysis.ExitValid, code, out)
	// A last line cut short (a recorder killed while writing it) is noted
	// on the terminal too.
	require.NoError(t, os.WriteFile(enough, append(content, `{"index":99,"ti`...), 0o644))
	code, out, _ = cli(t, nil, "check", enough)
	assert.Equal(t, analysis.ExitValid, code, out)
	assert.Contains(t, out, "note: skipped the last line (25): it was cut short")
}

// check - reads standard input (before: "open -: no such file or
// directory", exit 64), with --report keeping the history in the report
// folder.
func TestCheckReadsStandardInput(t *testing.T) {
	_, content := writeHistory(t, 6)
	code, out, errOut := cli(t, content, "check", "-")
	assert.Equal(t, analysis.ExitValid, code, "%s\n%s", out, errOut)
	assert.Contains(t, out, "verdict: valid")
	assert.Contains(t, out, "operations: 12 (12 ok or fail)")

	dir := filepath.Join(t.TempDir(), "out")
	code, out, errOut = cli(t, content, "check", "--report", dir, "-")
	assert.Equal(t, analysis.ExitValid, code, "%s\n%s", out, errOut)
	kept, err := os.ReadFile(filepath.Join(dir, reports.HistoryFile))
	require.NoError(t, err)
	assert.Equal(t, content, kept)
	assert.FileExists(t, filepath.Join(dir, reports.ReportFile))

	code, _, errOut = cli(t, []byte(`{"index":0,"time":0,"process":0,"type":"invoke","f":"wirte","key":"k"}`+"\n"), "check", "-")
	assert.Equal(t, analysis.ExitUsage, code)
	assert.Contains(t, errOut, "standard input: history line 1:")
}

// A path that is neither a run folder nor a history says so (before:
// report printed only the path).
func TestAMissingPathIsNamed(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing")
	for _, cmd := range []string{"report", "check"} {
		code, _, errOut := cli(t, nil, cmd, missing)
		assert.Equal(t, analysis.ExitUsage, code, cmd)
		assert.Equal(t, "fencecheck: no such run folder or history: "+missing+"\n", errOut, cmd)
	}
}

// Flags whose zero would silently become the default are refused (before:
// --time 0s ran 30 s, --concurrency 0 five clients, --keys 0 three keys).
func TestZeroFlagsAreRefused(t *testing.T) {
	store := t.TempDir()
	for flag, want := range map[string]string{
		"--time=0s":         "--time 0s: must be positive (leave the flag out for its default, 30s)",
		"--concurrency=0":   "--concurrency 0: must be positive (leave the flag out for its default, 5)",
		"--keys=0":          "--keys 0: must be positive (leave the flag out for its default, 3)",
		"--ttl=0s":          "--ttl 0s: must be positive",
		"--recovery=0s":     "--recovery 0s: must be positive",
		"--op-timeout=0s":   "--op-timeout 0s: must be positive",
		"--check-timeout=0": "--check-timeout 0s: must be positive",
	} {
		start := time.Now()
		code, _, errOut := cli(t, nil, "test", flag, "--store", store)
		assert.Equal(t, analysis.ExitUsage, code, flag)
		assert.Contains(t, errOut, want, flag)
		assert.Less(t, time.Since(start), 20*time.Second, "refused before any run")
	}
	entries, _ := os.ReadDir(store)
	assert.Empty(t, entries, "nothing written to the store")
	// --keys is what the profiles scale from: the run says how many keys
	// it really uses.
	_, _, errOut := cli(t, nil, "test", "--time", "1s", "--nemesis", "none", "--keys", "3", "--quiet", "--store", store)
	assert.Regexp(t, `main phase: .*\(\d+ keys: steady 3, `, errOut)
	assert.True(t, strings.Contains(errOut, "many-locks 64") || !strings.Contains(errOut, "many-locks"), errOut)
}

// test --repeat N runs seeds one after another and ends with every
// verdict, the detection rate with its Wilson interval and the reproduce
// line of each run that did not pass; its exit code is the worst verdict.
// --fail-fast stops at the first invalid run.
func TestRepeat(t *testing.T) {
	store := t.TempDir()
	code, out, errOut := cli(t, nil, "test", "--repeat", "2", "--time", "1s", "--nemesis", "none", "--seed", "41",
		"--quiet", "--store", store)
	assert.Equal(t, analysis.ExitValid, code, "%s\n%s", out, errOut)
	assert.Contains(t, out, "run 1 of 2, seed 41: valid (exit 0)")
	assert.Contains(t, out, "run 2 of 2, seed 42: valid (exit 0)")
	assert.Contains(t, out, "repeat: 2 of 2 runs done")
	assert.Contains(t, out, "verdicts: 2 valid\n")
	assert.Contains(t, out, "detection rate: 0 of 2 runs with a verdict invalid: 0% (95% Wilson interval 0%-66%)")
	assert.Contains(t, out, "exit code 0: the worst verdict")
	dirs, _ := filepath.Glob(filepath.Join(store, "memory", "2*"))
	assert.Len(t, dirs, 2, "each run is a run of its own")

	code, out, errOut = cli(t, nil, "test", "--repeat", "3", "--fail-fast", "--bug", "accept-equal", "--time", "1s",
		"--nemesis", "none", "--seed", "7", "--quiet", "--store", store)
	assert.Equal(t, analysis.ExitInvalid, code, "%s\n%s", out, errOut)
	assert.Contains(t, errOut, "--fail-fast: stopping at the first invalid run")
	assert.Contains(t, out, "repeat: 1 of 3 runs done")
	assert.Contains(t, out, "detection rate: 1 of 1 runs with a verdict invalid: 100% (95% Wilson interval 21%-100%)")
	assert.Regexp(t, `invalid \(seed 7\): \d+ anomalies, first: .*\n  fencecheck test --target=memory --bug=accept-equal --time=1s .*--seed=7 `, out)
	assert.Contains(t, out, "exit code 1: the worst verdict (invalid 1, then could not run 3, then unknown 2, then valid 0)")

	code, _, errOut = cli(t, nil, "test", "--repeat", "0", "--store", store)
	assert.Equal(t, analysis.ExitUsage, code)
	assert.Contains(t, errOut, "--repeat must be 1 or more, got 0")
}
