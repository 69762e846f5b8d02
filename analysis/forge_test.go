package analysis

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/history"
	"github.com/fencecheck/fencecheck/workloads"
)

// The forge workload's writes, judged: a finding on an unauthenticated
// target, a violation where the target declares sealed tokens and accepts
// them anyway, valid where it rejects them. (workloads' own tests check what
// the forger writes.)

// forgeResource is a resource that checks seals (authenticated) or accepts
// any newer number (not authenticated); every fifth write times out.
type forgeResource struct {
	authenticated bool
	mu            sync.Mutex
	n             int
	hw            map[string]uint64
}

func (c *forgeResource) Node() string { return "ref" }
func (c *forgeResource) Acquire(context.Context, string, string, time.Duration) workloads.Reply {
	panic("the forger never acquires")
}
func (c *forgeResource) Renew(context.Context, string, string, string, time.Duration) workloads.Reply {
	panic("the forger never renews")
}
func (c *forgeResource) Release(context.Context, string, string, string) workloads.Reply {
	panic("the forger never releases")
}
func (c *forgeResource) Read(context.Context, string) workloads.Reply {
	panic("the forger never reads")
}
func (c *forgeResource) Write(_ context.Context, key, token string, _ []byte) workloads.Reply {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	if c.n%5 == 0 {
		return workloads.Reply{Type: history.Info, Error: "timeout"}
	}
	if c.authenticated {
		return workloads.Reply{Type: history.Fail, Error: "forged"}
	}
	num, _, _ := strings.Cut(token, ".")
	n, _ := strconv.ParseUint(num, 10, 64)
	if n <= c.hw[key] {
		return workloads.Reply{Type: history.Fail, Error: "stale"}
	}
	c.hw[key] = n
	return workloads.Reply{Type: history.Ok}
}

// forgedHistory runs the forger against res for a moment, after an honest
// acquire that gives the checker the issued tokens to compare with.
func forgedHistory(t *testing.T, res *forgeResource) []history.Event {
	t.Helper()
	var buf bytes.Buffer
	rec := history.NewRecorder(&buf)
	rec.Record(history.Event{Process: 0, Type: history.Invoke, F: history.Acquire, Key: "k0"})
	rec.Record(history.Event{Process: 0, Type: history.Ok, F: history.Acquire, Key: "k0", Token: "7"})
	procs := &workloads.Processes{}
	procs.Next() // the honest client holds process 0
	f, err := workloads.NewForge(workloads.ForgeConfig{Resources: []workloads.Conn{res}, Seed: 1, Processes: procs, Pause: 2 * time.Millisecond})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	require.NoError(t, f.Run(ctx, rec))
	require.NoError(t, rec.Close())
	evs, err := history.ReadAll(&buf)
	require.NoError(t, err)
	return evs
}

func TestForgeryIsAFindingOnUnauthenticatedAndAViolationWhenAccepted(t *testing.T) {
	evs := forgedHistory(t, &forgeResource{hw: map[string]uint64{}})
	open := checkers.Semantics{Equal: checkers.EqualReject, Scope: checkers.ScopePerLock}
	rep, err := Check(context.Background(), evs, Options{Semantics: open, MinOps: -1})
	require.NoError(t, err)
	var kinds []string
	for _, a := range rep.Anomalies() {
		kinds = append(kinds, a.Kind)
		assert.True(t, a.Finding, "%s: %s", a.Kind, a.Text)
	}
	assert.Contains(t, kinds, checkers.KindTokensNotAuthenticated)
	assert.NotEqual(t, checkers.Invalid, rep.Verdict, "a finding, not a failure")

	// The same accepted forgeries against a target that declares sealed
	// tokens (the accept-forged bug): violations.
	sealed := open
	sealed.Authenticated = true
	rep, err = Check(context.Background(), evs, Options{Semantics: sealed, MinOps: -1})
	require.NoError(t, err)
	assert.Equal(t, checkers.Invalid, rep.Verdict)
	found := false
	for _, a := range rep.Anomalies() {
		found = found || a.Kind == checkers.KindForgedTokenAccepted
	}
	assert.True(t, found, "forged-token-accepted named")

	// A correct authenticating resource rejects them all: valid.
	evs = forgedHistory(t, &forgeResource{authenticated: true})
	rep, err = Check(context.Background(), evs, Options{Semantics: sealed, MinOps: -1})
	require.NoError(t, err)
	assert.Equal(t, checkers.Valid, rep.Verdict, "%+v", rep.Anomalies())
}
