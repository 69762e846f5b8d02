package workloads

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencecheck/fencecheck/history"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// forgeResource is a Conn to a resource that checks seals (authenticated)
// or accepts any newer number (not authenticated); every fifth write times
// out, to see the forger move to a new process after info.
type forgeResource struct {
	authenticated bool
	mu            sync.Mutex
	n             int
	hw            map[string]uint64
}

func (c *forgeResource) Node() string { return "ref" }
func (c *forgeResource) Acquire(context.Context, string, string, time.Duration) Reply {
	panic("the forger never acquires")
}
func (c *forgeResource) Renew(context.Context, string, string, string, time.Duration) Reply {
	panic("the forger never renews")
}
func (c *forgeResource) Release(context.Context, string, string, string) Reply {
	panic("the forger never releases")
}
func (c *forgeResource) Read(context.Context, string) Reply { panic("the forger never reads") }
func (c *forgeResource) Write(_ context.Context, key, token string, _ []byte) Reply {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	if c.n%5 == 0 {
		return Reply{Type: history.Info, Error: "timeout"}
	}
	if c.authenticated {
		return Reply{Type: history.Fail, Error: "forged"}
	}
	num, _, _ := strings.Cut(token, ".")
	n, _ := strconv.ParseUint(num, 10, 64)
	if n <= c.hw[key] {
		return Reply{Type: history.Fail, Error: "stale"}
	}
	c.hw[key] = n
	return Reply{Type: history.Ok}
}

func runForge(t *testing.T, res *forgeResource) []history.Event {
	t.Helper()
	var buf bytes.Buffer
	rec := history.NewRecorder(&buf)
	procs := &Processes{}
	procs.Next() // an honest client already holds process 0
	f, err := NewForge(ForgeConfig{Resources: []Conn{res}, Seed: 1, Processes: procs, Pause: 2 * time.Millisecond})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	require.NoError(t, f.Run(ctx, rec))
	require.NoError(t, rec.Close())
	evs, err := history.ReadAll(&buf)
	require.NoError(t, err)
	return evs
}

func TestForgeWritesLargeUnissuedTokensToItsOwnKeys(t *testing.T) {
	res := &forgeResource{hw: map[string]uint64{}}
	evs := runForge(t, res)
	require.Greater(t, len(evs), 20)
	values := map[string]bool{}
	keys := map[string]bool{}
	sealed, unsealed := 0, 0
	procAfterInfo := map[int]bool{}
	lastProc := -1
	for _, e := range evs {
		require.Equal(t, history.Write, e.F)
		assert.NotZero(t, e.Process, "process 0 belongs to another client")
		keys[e.Key] = true
		if e.Type == history.Invoke {
			assert.False(t, values[e.Value], "value %s is unique", e.Value)
			values[e.Value] = true
			assert.True(t, strings.HasPrefix(e.Value, "forge-"))
			assert.False(t, procAfterInfo[e.Process], "a process that saw info is never reused")
			tok := history.ParseToken(e.Token)
			require.Equal(t, history.TokenValid, tok.State, "forged tokens are well formed: %q", e.Token)
			assert.GreaterOrEqual(t, tok.N, ForgeBase)
			if tok.Seal == "" {
				unsealed++
			} else {
				sealed++
			}
			lastProc = e.Process
		} else {
			assert.Equal(t, lastProc, e.Process)
			if e.Type == history.Info {
				procAfterInfo[e.Process] = true
			}
		}
	}
	assert.Subset(t, []string{"forge-0", "forge-1", "forge-2"}, mapKeys(keys))
	assert.Len(t, keys, 3)
	assert.Positive(t, sealed, "some forgeries carry a made-up seal")
	assert.Greater(t, unsealed, sealed, "most carry none")
	assert.NotEmpty(t, procAfterInfo)
}

func mapKeys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// How the checkers judge the forger's writes: analysis's
// TestForgeryIsAFindingOnUnauthenticatedAndAViolationWhenAccepted.

func TestNewForgeValidates(t *testing.T) {
	_, err := NewForge(ForgeConfig{Processes: &Processes{}})
	assert.Error(t, err)
	_, err = NewForge(ForgeConfig{Resources: []Conn{&forgeResource{}}})
	assert.Error(t, err)
}
