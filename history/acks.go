package history

import (
	"context"
	"sync"
	"time"
)

// Ack is one acknowledgement as a client saw it: the ok completion of an
// operation, published the moment it is recorded (Acks), so that a fault
// can be timed by what the system answered (a crash a few milliseconds
// after an acknowledged acquire). A request sent (an invoke) is published
// too, marked Sent, for a fault timed by a request on its way.
type Ack struct {
	// F is the operation (acquire, renew, release, write, read), Node the
	// node that answered, Key its lock or key.
	F, Node, Key string
	// Index and Time are the completion event's in the history.
	Index, Time int64
	// At is when it was recorded, on this process's clock.
	At time.Time
	// Sent: the event is the operation's invoke (its request about to
	// go out), not its ok completion.
	Sent bool
	// Process is the client's: its one operation in flight pairs an ok
	// with the invoke before it.
	Process int
	// Late: a write sent knowing its token may be old (Event.IsLateByIntent).
	Late bool
	// Token is the operation's token as sent or received ("" for none).
	Token string
}

// Acks publishes the acknowledgements of a history to whoever waits for
// one: Observe is given to Recorder.Listen, and Next waits for the next
// acknowledgement that matches a filter. It keeps nothing: an
// acknowledgement no one waits for is gone, so a wait sees only those
// recorded after it began.
type Acks struct {
	mu      sync.Mutex
	waiters map[*ackWaiter]struct{}
}

type ackWaiter struct {
	match func(Ack) bool
	got   chan Ack // buffered, 1
}

// NewAcks makes an empty feed.
func NewAcks() *Acks { return &Acks{waiters: map[*ackWaiter]struct{}{}} }

// Observe publishes e when it is a client's ok completion or invoke, or a
// write the strip proxy tampered with (F Tamper: a fault timed by a write
// in flight learns that it no longer carries its token). It never blocks
// (Recorder.Listen calls it under the recorder's lock): each waiter takes
// the first acknowledgement that matches and is done.
func (a *Acks) Observe(e Event) {
	if (e.Type != Ok && e.Type != Invoke || !e.IsClient()) && !e.IsTamper() {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.waiters) == 0 {
		return
	}
	ack := Ack{F: e.F, Node: e.Node, Key: e.Key, Index: e.Index, Time: e.Time, At: time.Now(), Sent: e.Type == Invoke, Process: e.Process, Late: e.IsLateByIntent(), Token: e.Token}
	for w := range a.waiters {
		if w.match == nil || w.match(ack) {
			w.got <- ack
			delete(a.waiters, w)
		}
	}
}

// Next waits for the next acknowledgement that match accepts (any, when
// match is nil), until ctx ends.
func (a *Acks) Next(ctx context.Context, match func(Ack) bool) (Ack, error) {
	w := &ackWaiter{match: match, got: make(chan Ack, 1)}
	a.mu.Lock()
	a.waiters[w] = struct{}{}
	a.mu.Unlock()
	select {
	case ack := <-w.got:
		return ack, nil
	case <-ctx.Done():
		a.mu.Lock()
		delete(a.waiters, w)
		a.mu.Unlock()
		// It may have matched meanwhile.
		select {
		case ack := <-w.got:
			return ack, nil
		default:
		}
		return Ack{}, ctx.Err()
	}
}
