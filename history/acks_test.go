package history

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAcksPublishOkCompletionsToWhoWaits(t *testing.T) {
	rec := NewRecorder(&bytes.Buffer{})
	acks := NewAcks()
	rec.Listen(acks.Observe)
	got := make(chan Ack, 1)
	go func() {
		a, err := acks.Next(context.Background(), func(a Ack) bool { return !a.Sent && a.F == Write && a.Node == "n2" })
		if err == nil {
			got <- a
		}
	}()
	// The waiter registers before anything is recorded.
	require.Eventually(t, func() bool { acks.mu.Lock(); defer acks.mu.Unlock(); return len(acks.waiters) == 1 }, time.Second, time.Millisecond)
	rec.Record(Event{Process: 0, Type: Invoke, F: Write, Key: "k", Node: "n2"})
	rec.Record(Event{Process: 0, Type: Fail, F: Write, Key: "k", Node: "n2"})
	rec.Record(Event{Process: 1, Type: Ok, F: Write, Key: "k", Node: "n1"})
	rec.Record(Event{Process: NemesisProcess, Type: Info, F: "restart", Node: "n2"})
	want := rec.Record(Event{Process: 2, Type: Ok, F: Write, Key: "k2", Node: "n2"})
	select {
	case a := <-got:
		assert.Equal(t, want.Index, a.Index, "the first ok write on n2, nothing before it")
		assert.Equal(t, want.Time, a.Time)
		assert.Equal(t, "k2", a.Key)
		assert.WithinDuration(t, time.Now(), a.At, time.Second)
	case <-time.After(5 * time.Second):
		t.Fatal("no acknowledgement")
	}
	acks.mu.Lock()
	assert.Empty(t, acks.waiters, "a served waiter is gone")
	acks.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err := acks.Next(ctx, nil)
	assert.ErrorIs(t, err, context.DeadlineExceeded, "nothing recorded after the wait began")
	assert.Empty(t, acks.waiters)
}

// A request sent is published too, marked Sent, so a fault can be timed by
// a request on its way (a node frozen while it serves a write).
func TestAcksPublishRequestsSent(t *testing.T) {
	rec := NewRecorder(&bytes.Buffer{})
	acks := NewAcks()
	rec.Listen(acks.Observe)
	got := make(chan Ack, 1)
	go func() {
		if a, err := acks.Next(context.Background(), func(a Ack) bool { return a.Sent && a.F == Write }); err == nil {
			got <- a
		}
	}()
	require.Eventually(t, func() bool { acks.mu.Lock(); defer acks.mu.Unlock(); return len(acks.waiters) == 1 }, time.Second, time.Millisecond)
	rec.Record(Event{Process: 0, Type: Invoke, F: Read, Key: "k", Node: "n1"})
	rec.Record(Event{Process: 1, Type: Ok, F: Write, Key: "k", Node: "n1"})
	want := rec.Record(Event{Process: 2, Type: Invoke, F: Write, Key: "k", Node: "n2"})
	select {
	case a := <-got:
		assert.Equal(t, want.Index, a.Index, "the write sent, not the one acknowledged before it")
		assert.True(t, a.Sent)
		assert.Equal(t, "n2", a.Node)
	case <-time.After(5 * time.Second):
		t.Fatal("no request published")
	}
}

// What the feed costs each recorded event: nothing waits (most of a run),
// and one waiter whose filter refuses it (crash-on-ack waiting for its kind).
func BenchmarkAcksObserve(b *testing.B) {
	e := Event{Process: 1, Type: Ok, F: Write, Key: "k", Node: "n1"}
	b.Run("no-waiter", func(b *testing.B) {
		a := NewAcks()
		for range b.N {
			a.Observe(e)
		}
	})
	b.Run("one-waiter", func(b *testing.B) {
		a := NewAcks()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go a.Next(ctx, func(a Ack) bool { return a.Node == "never" })
		for {
			a.mu.Lock()
			n := len(a.waiters)
			a.mu.Unlock()
			if n == 1 {
				break
			}
			time.Sleep(time.Millisecond)
		}
		b.ResetTimer()
		for range b.N {
			a.Observe(e)
		}
	})
}

// A write the strip proxy tampered with is published (F Tamper), so a fault
// timed by a write in flight knows it no longer carries its token; the
// strip fault's own start and stop are not.
func TestAcksPublishTamperedWrites(t *testing.T) {
	rec := NewRecorder(&bytes.Buffer{})
	acks := NewAcks()
	rec.Listen(acks.Observe)
	got := make(chan Ack, 1)
	go func() {
		a, err := acks.Next(context.Background(), func(a Ack) bool { return a.F == Tamper })
		if err == nil {
			got <- a
		}
	}()
	require.Eventually(t, func() bool { acks.mu.Lock(); defer acks.mu.Unlock(); return len(acks.waiters) == 1 }, time.Second, time.Millisecond)
	rec.Record(Event{Process: NemesisProcess, Type: Info, F: Tamper, Node: "n1", Extra: map[string]json.RawMessage{ExtraAction: json.RawMessage(`"start"`)}})
	want := rec.Record(Event{Process: NemesisProcess, Type: Info, F: Tamper, Key: "k", Value: "v", Node: "n1"})
	select {
	case a := <-got:
		assert.Equal(t, want.Index, a.Index, "the tampered write, not the fault's start")
		assert.Equal(t, "k", a.Key)
		assert.Equal(t, "n1", a.Node)
		assert.False(t, a.Sent)
	case <-time.After(5 * time.Second):
		t.Fatal("no tampered write published")
	}
}
