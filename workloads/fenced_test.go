package workloads

import (
	"context"
	"encoding/json"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/fencecheck/fencecheck/history"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// scriptedConn is an issuer and resource that accepts everything and runs
// a hook on each acquire, before it answers (the request is in flight).
type scriptedConn struct {
	mu       sync.Mutex
	acquires int
	onAcq    func(n int)
}

func (c *scriptedConn) Node() string { return "n1" }
func (c *scriptedConn) Acquire(context.Context, string, string, time.Duration) Reply {
	c.mu.Lock()
	c.acquires++
	n := c.acquires
	c.mu.Unlock()
	c.onAcq(n)
	return Reply{Type: history.Ok, Token: strconv.Itoa(n)}
}
func (c *scriptedConn) Renew(context.Context, string, string, string, time.Duration) Reply {
	return Reply{Type: history.Ok}
}
func (c *scriptedConn) Release(context.Context, string, string, string) Reply {
	return Reply{Type: history.Ok}
}
func (c *scriptedConn) Write(context.Context, string, string, []byte) Reply {
	return Reply{Type: history.Ok}
}
func (c *scriptedConn) Read(context.Context, string) Reply { return Reply{Type: history.Ok} }

// A writer judges its lease by its own wall clock: stepped back while the
// acquire was in flight, it believes in a lease far longer than the ttl and
// writes (recording that belief); stepped forward, it finds its lease gone
// and releases without writing.
func TestWritersJudgeTheirLeaseByTheClientsClock(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var w *Fenced
	conn := &scriptedConn{}
	conn.onAcq = func(n int) {
		switch n {
		case 1:
			assert.NoError(t, w.SetClockOffset(ctx, ClientClockNode, -30*time.Second))
		case 2:
			assert.NoError(t, w.SetClockOffset(ctx, ClientClockNode, 30*time.Second))
		default:
			assert.NoError(t, w.SetClockOffset(ctx, ClientClockNode, 0))
			cancel()
		}
	}
	var err error
	w, err = NewFenced(Config{Clients: 1, Keys: 1, TTL: 50 * time.Millisecond, OpTimeout: time.Second, Seed: 1,
		Issuers: []Conn{conn}, Resources: []Conn{conn}, ReplayShare: 0.0001, ReadShare: 0.0001})
	require.NoError(t, err)
	assert.Equal(t, []string{ClientClockNode}, w.ClockNodes())
	assert.Error(t, w.SetClockOffset(ctx, "n1", time.Second), "the workload has only the clients' clock")

	evs := runEvents(t, ctx, w)

	writes := map[string]history.Event{} // token -> write invoke
	released := map[string]bool{}
	for _, e := range evs {
		if e.Type != history.Invoke {
			continue
		}
		switch e.F {
		case history.Write:
			writes[e.Token] = e
		case history.Release:
			released[e.Token] = true
		}
	}
	require.Contains(t, writes, "1", "clock stepped back: the holder still believes in its lease and writes")
	var left float64
	require.NoError(t, json.Unmarshal(writes["1"].Extra[history.ExtraLeaseLeft], &left))
	assert.Greater(t, left, float64(29*time.Second/time.Millisecond), "it believed in about 30 s more lease")
	assert.NotContains(t, writes, "2", "clock stepped forward: the lease is gone by the client's clock")
	assert.True(t, released["2"], "and it releases the lock instead")
}
