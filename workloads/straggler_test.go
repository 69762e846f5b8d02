package workloads

import (
	"bytes"
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

// fenceConn is an issuer and a strictly fencing resource in one; forget
// makes its restart lose the high-water marks (and keep the values), and
// while held, acquires wait (the writers are kept off the keys).
type fenceConn struct {
	mu      sync.Mutex
	counter map[string]uint64
	hw      map[string]uint64
	forget  bool
	hold    sync.RWMutex
}

func newFenceConn(forget bool) *fenceConn {
	return &fenceConn{counter: map[string]uint64{}, hw: map[string]uint64{}, forget: forget}
}

func (c *fenceConn) Node() string { return "n1" }
func (c *fenceConn) Acquire(ctx context.Context, lock, _ string, _ time.Duration) Reply {
	c.hold.RLock()
	defer c.hold.RUnlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.counter[lock]++
	return Reply{Type: history.Ok, Token: strconv.FormatUint(c.counter[lock], 10)}
}
func (c *fenceConn) Renew(context.Context, string, string, string, time.Duration) Reply {
	return Reply{Type: history.Ok}
}
func (c *fenceConn) Release(context.Context, string, string, string) Reply {
	return Reply{Type: history.Ok}
}
func (c *fenceConn) Write(_ context.Context, key, token string, _ []byte) Reply {
	n, err := strconv.ParseUint(token, 10, 64)
	if err != nil {
		return Reply{Type: history.Fail, Error: "malformed-token"}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if n <= c.hw[key] {
		return Reply{Type: history.Fail, Error: "stale"}
	}
	c.hw[key] = n
	return Reply{Type: history.Ok}
}
func (c *fenceConn) Read(context.Context, string) Reply { return Reply{Type: history.Ok} }

func (c *fenceConn) restart() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.forget {
		c.hw = map[string]uint64{}
	}
}

// restartRun runs the steady workload on conn, restarts it with the
// writers held off (atRestart sees the workload and conn just before), and
// returns the history.
func restartRun(t *testing.T, conn *fenceConn, atRestart func(w *Fenced)) []history.Event {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, err := NewFenced(Config{Clients: 2, Keys: 2, TTL: 50 * time.Millisecond, OpTimeout: time.Second, Seed: 1,
		Issuers: []Conn{conn}, Resources: []Conn{conn}, Profile: "steady"})
	require.NoError(t, err)
	var buf bytes.Buffer
	rec := history.NewRecorder(&buf)
	done := make(chan error)
	go func() { done <- w.Run(ctx, rec) }()
	time.Sleep(100 * time.Millisecond)
	conn.hold.Lock() // no acquire from here on: the writers finish their cycle and wait
	time.Sleep(50 * time.Millisecond)
	atRestart(w)
	conn.restart()
	w.AfterRestart("n1")
	w.stragglers.Wait()
	conn.hold.Unlock()
	cancel()
	require.NoError(t, <-done)
	require.NoError(t, rec.Close())
	evs, err := history.ReadAll(&buf)
	require.NoError(t, err)
	return evs
}

// stragglerRun is restartRun's stragglers' writes (invoke and completion)
// and the highest token accepted per key before the restart.
func stragglerRun(t *testing.T, conn *fenceConn) (invokes, completions []history.Event, marks map[string]uint64) {
	evs := restartRun(t, conn, func(*Fenced) {
		conn.mu.Lock()
		defer conn.mu.Unlock()
		marks = map[string]uint64{}
		for k, v := range conn.hw {
			marks[k] = v
		}
	})
	straggler := map[int]bool{}
	for _, e := range evs {
		if e.F != history.Write {
			continue
		}
		if _, ok := e.Extra[history.ExtraStraggler]; ok && e.Type == history.Invoke {
			straggler[e.Process] = true
			invokes = append(invokes, e)
		} else if e.Type != history.Invoke && straggler[e.Process] {
			completions = append(completions, e)
		}
	}
	return invokes, completions, marks
}

// After a restart, stragglers write at once with tokens older than the
// marks the resource had accepted before it: a resource that kept its
// marks rejects every one as stale, one that forgot them accepts them.
func TestStragglersAfterARestartWriteTokensOlderThanTheMarks(t *testing.T) {
	inv, comp, marks := stragglerRun(t, newFenceConn(false))
	require.NotEmpty(t, inv, "stragglers were sent")
	require.Len(t, comp, len(inv))
	for _, e := range inv {
		n, err := strconv.ParseUint(e.Token, 10, 64)
		require.NoError(t, err)
		assert.Less(t, n, marks[e.Key], "a straggler's token is older than the key's mark")
		var node string
		require.NoError(t, json.Unmarshal(e.Extra[history.ExtraStraggler], &node))
		assert.Equal(t, "n1", node)
	}
	for _, e := range comp {
		assert.Equal(t, history.Fail, e.Type)
		assert.Equal(t, "stale", e.Error, "the marks were kept: rejected as stale")
	}

	_, comp, _ = stragglerRun(t, newFenceConn(true))
	require.NotEmpty(t, comp)
	for _, e := range comp {
		assert.Equal(t, history.Ok, e.Type, "the marks were forgotten: the stale write is accepted")
	}
}

// The marks keep, per key, the newest accepted token and the newest older
// one, whatever order the writes returned in.
func TestMarksKeepTheNewestAndTheNewestOlderToken(t *testing.T) {
	var m marks
	for _, tok := range []string{"3", "5", "4", "5", "2", "junk"} {
		m.accepted("k", tok)
	}
	m.accepted("solo", "7")
	keys, tokens := m.stale(8)
	assert.Equal(t, []string{"k"}, keys, "a key with one token accepted has no older one")
	assert.Equal(t, []string{"4"}, tokens)
}

// After a restart the keys written last are read back at once, each by a
// process of its own, so that a write answered and then lost to the crash
// shows as a stale read.
func TestReadBacksAfterARestartReadTheKeysWrittenLast(t *testing.T) {
	var want []string
	evs := restartRun(t, newFenceConn(false), func(w *Fenced) { want = w.marks.recent(maxStragglers) })
	require.NotEmpty(t, want, "keys were written")
	var read []string
	readers := map[int]bool{}
	for _, e := range evs {
		if e.F == history.Read && e.Type == history.Invoke {
			if raw, ok := e.Extra[extraReadBack]; ok {
				var node string
				require.NoError(t, json.Unmarshal(raw, &node))
				assert.Equal(t, "n1", node)
				read = append(read, e.Key)
				assert.False(t, readers[e.Process], "each read-back is a process of its own")
				readers[e.Process] = true
			}
		}
	}
	assert.ElementsMatch(t, want, read, "the keys written last, each read back once")
}

// recent lists the keys by their last accepted write, the newest first.
func TestMarksRecentListsTheNewestWritesFirst(t *testing.T) {
	var m marks
	m.accepted("a", "1")
	time.Sleep(time.Millisecond)
	m.accepted("b", "1")
	time.Sleep(time.Millisecond)
	m.accepted("c", "1")
	time.Sleep(time.Millisecond)
	m.accepted("a", "2")
	assert.Equal(t, []string{"a", "c"}, m.recent(2))
	assert.Equal(t, []string{"a", "c", "b"}, m.recent(10))
}
