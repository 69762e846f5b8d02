package workloads

import (
	"bytes"
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/fencecheck/fencecheck/history"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A paused holder stalls as a process of its own: one writer's holders
// stall on two locks at once while the writer goes on writing the third,
// and each wakes to write with a token older than its taker's.
func TestAPausedHolderStallsWithoutItsWriter(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	conn := newFenceConn(false)
	w, err := NewFenced(Config{Clients: 1, Keys: 3, TTL: 50 * time.Millisecond, OpTimeout: time.Second, Seed: 1,
		Issuers: []Conn{conn}, Resources: []Conn{conn}, Profile: "steady"})
	require.NoError(t, err)
	assert.Equal(t, 3, w.MaxPaused(), "one holder per lock, not per writer")
	done, _ := w.PauseHolders(2, 150*time.Millisecond, 0)
	var buf bytes.Buffer
	rec := history.NewRecorder(&buf)
	ran := make(chan error)
	go func() { ran <- w.Run(ctx, rec) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the paused holders never woke")
	}
	cancel()
	require.NoError(t, <-ran)
	require.NoError(t, rec.Close())
	evs, err := history.ReadAll(&buf)
	require.NoError(t, err)

	stalledKeys := map[string]int{} // key -> process of its stalled holder
	var firstStall, lastStall int64 = -1, -1
	for _, e := range evs {
		if e.Type == history.Invoke && e.F == history.Write {
			if _, ok := e.Extra[history.ExtraStalled]; ok {
				stalledKeys[e.Key] = e.Process
			}
		}
	}
	require.Len(t, stalledKeys, 2, "two holders stalled, on two locks")
	newest := map[string]uint64{} // newest token granted per key so far
	for _, e := range evs {
		if e.F == history.Acquire && e.Type == history.Ok {
			n, _ := strconv.ParseUint(e.Token, 10, 64)
			newest[e.Key] = max(newest[e.Key], n)
			if p, ok := stalledKeys[e.Key]; ok && p == e.Process && firstStall < 0 {
				firstStall = e.Time
			}
		}
		if e.Type == history.Invoke && e.F == history.Write {
			if _, ok := e.Extra[history.ExtraStalled]; ok {
				n, _ := strconv.ParseUint(e.Token, 10, 64)
				assert.Less(t, n, newest[e.Key], "the woken holder's token is older than its taker's")
				lastStall = e.Time
			}
		}
	}
	writing := 0 // writes of the unpaused lock while the holders stalled
	for _, e := range evs {
		if e.Type == history.Ok && e.F == history.Write && e.Time > firstStall && e.Time < lastStall {
			if _, paused := stalledKeys[e.Key]; !paused {
				writing++
			}
		}
	}
	assert.Positive(t, writing, "the writer went on while its holders stalled")
}
