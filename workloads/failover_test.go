package workloads

import (
	"bytes"
	"context"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/history"
)

// frozenConn is one node of two: it grants and accepts everything, but
// while frozen a write never answers (a node paused with the request in
// it), and the client's timeout ends it.
type frozenConn struct {
	name   string
	mu     *sync.Mutex
	tokens *int
	frozen func() bool
	// refused: the write is refused (a strip proxy took its token).
	refused func() bool
}

func (c frozenConn) Node() string { return c.name }
func (c frozenConn) Acquire(context.Context, string, string, time.Duration) Reply {
	c.mu.Lock()
	defer c.mu.Unlock()
	*c.tokens++
	return Reply{Type: history.Ok, Token: strconv.Itoa(*c.tokens)}
}
func (c frozenConn) Renew(context.Context, string, string, string, time.Duration) Reply {
	return Reply{Type: history.Ok}
}
func (c frozenConn) Release(context.Context, string, string, string) Reply {
	return Reply{Type: history.Ok}
}
func (c frozenConn) Write(ctx context.Context, _, _ string, _ []byte) Reply {
	if c.frozen() {
		<-ctx.Done()
		return Reply{Type: history.Info, Error: "timeout"}
	}
	if c.refused != nil && c.refused() {
		return Reply{Type: history.Fail, Error: "missing-token"}
	}
	return Reply{Type: history.Ok}
}
func (c frozenConn) Read(context.Context, string) Reply { return Reply{Type: history.Ok} }

// A writer whose write timed out on one node takes the same key again
// through the next one, until a write on it is accepted (one refused, its
// token stripped, is tried again): a newer token's write on that key then
// lands while the old write is still held in the frozen node
// (write-overtaken), where before the key's one writer kept to its one
// node. It sends nothing more to the node that did not answer.
func TestAWriterFailsOverToTheNextNodeOnTheSameKey(t *testing.T) {
	var mu sync.Mutex
	tokens, writesOnA, writesOnB := 0, 0, 0
	a := frozenConn{name: "a", mu: &mu, tokens: &tokens, frozen: func() bool {
		mu.Lock()
		defer mu.Unlock()
		writesOnA++
		return writesOnA == 3 // the third write on a is held
	}}
	b := frozenConn{name: "b", mu: &mu, tokens: &tokens, frozen: func() bool { return false }, refused: func() bool {
		mu.Lock()
		defer mu.Unlock()
		writesOnB++
		return writesOnB == 1 // the first write through b is refused
	}}
	w, err := NewFenced(Config{Clients: 1, Keys: 64, Profile: "steady", TTL: 50 * time.Millisecond, OpTimeout: 50 * time.Millisecond,
		Seed: 1, Issuers: []Conn{a, b}, Resources: []Conn{a, b}, ReplayShare: 0.0001, ReadShare: 0.99})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
	defer cancel()
	evs := runEvents(t, ctx, w)

	held := -1
	for i, e := range evs {
		if e.F == history.Write && e.Type == history.Info {
			held = i
			break
		}
	}
	require.GreaterOrEqual(t, held, 0, "a write was held and timed out")
	assert.Equal(t, "a", evs[held].Node)
	var next []history.Event
	for _, e := range evs[held+1:] {
		if e.Type == history.Invoke && (e.F == history.Acquire || e.F == history.Write) {
			next = append(next, e)
		}
	}
	require.GreaterOrEqual(t, len(next), 4)
	for _, e := range next[:4] {
		assert.Equal(t, evs[held].Key, e.Key, "the same key again, until a write on it is accepted: %+v", e)
		assert.Equal(t, "b", e.Node, "through the next node: %+v", e)
	}
	for _, e := range evs[held+1:] {
		if e.Type == history.Invoke {
			assert.Equal(t, history.Acquire, e.F, "first the new lock, no read through the node that did not answer: %+v", e)
			break
		}
	}
}

// With one node there is nowhere to fail over to: a writer keeps drawing
// its keys.
func TestAWriterWithOneNodeDoesNotFailOver(t *testing.T) {
	var mu sync.Mutex
	tokens, writes := 0, 0
	a := frozenConn{name: "a", mu: &mu, tokens: &tokens, frozen: func() bool {
		mu.Lock()
		defer mu.Unlock()
		writes++
		return writes%2 == 0
	}}
	w, err := NewFenced(Config{Clients: 1, Keys: 64, Profile: "steady", TTL: 50 * time.Millisecond, OpTimeout: 20 * time.Millisecond,
		Seed: 1, Issuers: []Conn{a}, Resources: []Conn{a}, ReplayShare: 0.0001, ReadShare: 0.0001})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	evs := runEvents(t, ctx, w)
	same, after := 0, 0
	for i, e := range evs {
		if e.F != history.Write || e.Type != history.Info {
			continue
		}
		for _, n := range evs[i+1:] {
			if n.F == history.Acquire && n.Type == history.Invoke {
				after++
				if n.Key == e.Key {
					same++
				}
				break
			}
		}
	}
	require.Greater(t, after, 3)
	assert.Less(t, same, after/2+1, "keys are drawn as before, not retried")
}

// A holder failing over writes at once: a holder pause waiting for its
// next holders does not take it (stalled, it would hold the key's lock
// from its own next cycle and no newer write would overtake the held one).
func TestAWriterFailingOverIsNotPaused(t *testing.T) {
	var mu sync.Mutex
	tokens, writesOnA := 0, 0
	var w *Fenced
	a := frozenConn{name: "a", mu: &mu, tokens: &tokens, frozen: func() bool {
		mu.Lock()
		defer mu.Unlock()
		writesOnA++
		if writesOnA == 3 {
			w.PauseHolders(1, time.Second, 0) // the next holder stalls
			return true
		}
		return false
	}}
	b := frozenConn{name: "b", mu: &mu, tokens: &tokens, frozen: func() bool { return false }}
	var err error
	w, err = NewFenced(Config{Clients: 1, Keys: 64, Profile: "steady", TTL: 50 * time.Millisecond, OpTimeout: 50 * time.Millisecond,
		Seed: 1, Issuers: []Conn{a, b}, Resources: []Conn{a, b}, ReplayShare: 0.0001, ReadShare: 0.0001})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
	defer cancel()
	evs := runEvents(t, ctx, w)
	held := slices.IndexFunc(evs, func(e history.Event) bool { return e.F == history.Write && e.Type == history.Info })
	require.GreaterOrEqual(t, held, 0)
	var acq, wr *history.Event
	for i := range evs[held+1:] {
		e := &evs[held+1+i]
		if e.Type == history.Ok && e.F == history.Acquire && acq == nil {
			acq = e
		}
		if e.Type == history.Invoke && e.F == history.Write && wr == nil {
			wr = e
		}
	}
	require.NotNil(t, acq)
	require.NotNil(t, wr)
	assert.Equal(t, evs[held].Key, wr.Key)
	assert.Equal(t, acq.Process, wr.Process, "the holder that took the lock writes, not a stalled one's successor")
	assert.Less(t, time.Duration(wr.Time-acq.Time), 100*time.Millisecond, "at once, not after a stall")
}

// runEvents runs w until ctx ends and returns the history it recorded.
func runEvents(t *testing.T, ctx context.Context, w *Fenced) []history.Event {
	t.Helper()
	var buf bytes.Buffer
	rec := history.NewRecorder(&buf)
	require.NoError(t, w.Run(ctx, rec))
	require.NoError(t, rec.Close())
	evs, err := history.ReadAll(&buf)
	require.NoError(t, err)
	return evs
}
