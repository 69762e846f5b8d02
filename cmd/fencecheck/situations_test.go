//go:build situations

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Issue 37's bar on the user's path, a measurement rather than a check of
// `make check` (it needs a lab and 30 s runs): the reference's issuer on one
// SSH host and its resource on another, as a user deploys a server of
// theirs, one 30 s `--nemesis all` run per seed, and every situation that
// applies, but the 20 s scale, created at least 3 times (counted
// honestly: results.json's coverage).
//
//	go test -tags situations -run Situations -v ./cmd/fencecheck/ [FENCECHECK_SITUATION_SEEDS=3] [FENCECHECK_SITUATION_STORE=dir] [FENCECHECK_SITUATION_MODE=random]
//
// FENCECHECK_SITUATION_MODE=random runs the same with --nemesis-mode random,
// for the side by side of docs/situations-per-minute.md; the bar is the
// guided schedule's, so under random the counts are logged, not asserted.
func TestSituationsOnTwoSSHHosts(t *testing.T) {
	lab := sshLab(t, 2)
	node := func(i int, role string) map[string]any {
		return sshNode(lab, lab.Hosts[i], lab.KnownHosts, map[string]any{"name": role, "roles": []string{role}, "port": 7000,
			"command": []string{"/opt/fc/fenced", "--addr", "0.0.0.0:{port}", "--backend", "memory", "--data", "{data}"}})
	}
	spec := writeSpec(t, map[string]any{"name": "ssh-two-hosts", "start_timeout": "20s", "nodes": []any{node(0, "issuer"), node(1, "resource")}})
	seeds := 1
	if s := os.Getenv("FENCECHECK_SITUATION_SEEDS"); s != "" {
		var err error
		seeds, err = strconv.Atoi(s)
		require.NoError(t, err)
	}
	mode := os.Getenv("FENCECHECK_SITUATION_MODE")
	if mode == "" {
		mode = "guided"
	}
	require.Contains(t, []string{"guided", "random"}, mode, "FENCECHECK_SITUATION_MODE")
	for seed := 1; seed <= seeds; seed++ {
		t.Run(fmt.Sprintf("seed-%d", seed), func(t *testing.T) {
			store := t.TempDir()
			if keep := os.Getenv("FENCECHECK_SITUATION_STORE"); keep != "" {
				// Kept for a look at the runs, one store a seed: the
				// results are read from the store's one run.
				store = filepath.Join(keep, fmt.Sprintf("seed-%d", seed))
			}
			code, out, errOut := cli(t, nil, "test", "--target", "spec:"+spec, "--nemesis", "all", "--time", "30s",
				"--seed", strconv.Itoa(seed), "--store", store, "--nemesis-mode", mode)
			require.Equal(t, 0, code, "%s\n%s", out, errOut)
			cov, _ := readResults(t, runDir(store))["coverage"].(map[string]any)
			classes, _ := cov["classes"].([]any)
			var line []string
			for _, c := range classes {
				sits, _ := c.(map[string]any)["situations"].([]any)
				for _, s := range sits {
					s := s.(map[string]any)
					id, _ := s["id"].(string)
					if na, _ := s["not_applicable"].(string); na != "" {
						continue // why is in results.json
					}
					n, _ := s["count"].(float64)
					line = append(line, fmt.Sprintf("%s=%d", id, int(n)))
					if mode == "guided" && !strings.Contains(id, "20s") {
						assert.GreaterOrEqual(t, int(n), 3, "%s created at least 3 times", id)
					}
				}
			}
			t.Logf("seed %d, %s: %s", seed, mode, strings.Join(line, " "))
		})
	}
	noLeftovers(t, lab, 10*time.Second)
}
