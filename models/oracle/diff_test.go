package oracle

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// fencecheckBinary builds cmd/fencecheck from this tree, once per test
// binary: the differential test exercises the command a user runs.
func fencecheckBinary(t testing.TB) string {
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "fencecheck-oracle-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "fencecheck")
		out, err := exec.Command("go", "build", "-o", binPath, "github.com/fencecheck/fencecheck/cmd/fencecheck").CombinedOutput()
		if err != nil {
			buildErr = err
			binPath = string(out)
		}
	})
	if buildErr != nil {
		t.Fatalf("building fencecheck: %v\n%s", buildErr, binPath)
	}
	return binPath
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" && buildErr == nil {
		os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

// knownCauses are the disagreements the differential test finds today,
// each an issue-12 bullet the checkers are to be fixed for, or (marked
// "open") a rule of the oracle's the lead has yet to settle in the docs.
// Any other disagreement fails the test.
var knownCauses = map[string]string{
	"token-on-completion":            "issue 12: a write whose token and value are given only on its completion",
	"empty-value":                    "issue 12: a read that returns a token with an empty body (and fast refuses empty values)",
	"strip-value-shared-across-keys": "issue 12: token-tampering events matched to writes by value only",
	"unsealed-rejection":             "issue 12: under --authenticated an unsealed token rejected claims nothing",
	"high-water":                     "issue 12: a stale rejection's high_water is only quoted",
	"forged-rejection":               "open: a forged token's rejection claims nothing (bullet 2 extended from unsealed to forged)",
	"renew-release":                  "open: renew and release answers are not checked",
	"value-without-token":            "open: a read that answered a value without a token (the oracle: impossible, a 200 carries the token)",
	"forgery-rule":                   "open: which sealed tokens are forged (the oracle: an acquire invoked before the write could have issued the number)",
}

var (
	minOpsOnce sync.Once
	minOpsArg  string
)

// minOpsNone is the --min-ops value that means "no minimum": 0 as issue 12
// wants it, or -1 while 0 still means 10.
func minOpsNone(t *testing.T, bin string) string {
	minOpsOnce.Do(func() {
		h := []byte(`{"index":0,"time":1,"process":0,"type":"invoke","f":"read","key":"k"}
{"index":1,"time":2,"process":0,"type":"ok","f":"read","key":"k"}
`)
		minOpsArg = "0"
		if got := CLI(bin, "--min-ops", "0")(h, Semantics{}); got.Verdict != "valid" {
			minOpsArg = "-1"
			t.Logf("known (issue 12: --min-ops 0 means no minimum): --min-ops 0 still asks for 10 operations; using -1")
		}
	})
	return minOpsArg
}

// TestDifferential runs fencecheck check (built from this tree) and the
// oracle on generated histories: FENCECHECK_ORACLE_N of them (default
// 1500; 200 with -short) with the default --checker both, and a quarter as
// many with --checker fast and --checker porcupine each, from seed
// FENCECHECK_ORACLE_SEED (default 1). Every disagreement must be a known
// cause; each class is reported with its first example, shrunk.
func TestDifferential(t *testing.T) {
	bin := fencecheckBinary(t)
	n := 1500
	if testing.Short() {
		n = 200
	}
	n = envInt("FENCECHECK_ORACLE_N", n)
	seed := uint64(envInt("FENCECHECK_ORACLE_SEED", 1))
	minOps := minOpsNone(t, bin)
	for _, run := range []struct {
		checker string
		n       int
	}{{"both", n}, {"fast", n / 4}, {"porcupine", n / 4}} {
		args := []string{"--min-ops", minOps}
		if run.checker != "both" {
			args = append(args, "--checker", run.checker)
		}
		rep := Differential(CLI(bin, args...), DiffOptions{Seed: seed, N: run.n, Workers: runtime.GOMAXPROCS(0), Causes: Causes})
		t.Logf("--checker %s: %d histories checked (oracle: %d valid, %d invalid), %d over the bound, %d disagreement classes",
			run.checker, rep.Checked, rep.Valid, rep.Invalid, rep.TooBig, len(rep.Disagreements))
		if rep.Checked < run.n*9/10 || rep.Valid < run.n/4 || rep.Invalid < run.n/4 {
			t.Errorf("--checker %s: the generator's mix is off: %+v", run.checker, rep)
		}
		for _, d := range rep.Disagreements {
			var bullets []string
			known := d.Cause != ""
			for _, c := range strings.Split(d.Cause, "+") {
				b, ok := knownCauses[c]
				known = known && ok
				bullets = append(bullets, b)
			}
			bullet := strings.Join(bullets, "; ")
			if !known {
				t.Errorf("--checker %s disagrees with the oracle:\n%s", run.checker, indent(d.Format()))
				continue
			}
			t.Logf("--checker %s: known (%s):\n%s", run.checker, bullet, indent(d.Format()))
		}
	}
}

func indent(s string) string {
	return "    " + strings.ReplaceAll(strings.TrimSpace(s), "\n", "\n    ")
}
