// Package historytest builds fencecheck histories for tests and benchmarks:
// a concise builder for hand-written histories (Builder), the one simulator
// of a fenced register and issuer (Simulate, sim.go), and the history shapes
// of the performance matrix (perf.go). Package checkers' own tests must not
// import it (it imports checkers).
//
// Times given to the Builder are in milliseconds (history times are ns): a
// test reads "write at 10..20 ms" rather than nine zeros.
package historytest

import (
	"encoding/json"
	"sort"

	"github.com/fencecheck/fencecheck/history"
)

// Open is the completion time of an operation that never completes (the run
// ended while it was in flight).
const Open int64 = -1

// Builder collects client operations and nemesis events and turns them into
// a history in time order. Every operation gets a fresh process number, so
// overlapping operations and info outcomes never violate the one-open-op-per-
// process rule; use OnProcess to choose one.
type Builder struct {
	events  []timed
	seq     int
	nextPID int
	pid     int // -1: allocate
	node    string
	faultID int
}

type timed struct {
	at  int64 // ns
	seq int   // insertion order breaks ties, so an op's invoke precedes its completion
	ev  history.Event
}

// New returns an empty Builder.
func New() *Builder { return &Builder{pid: -1} }

// OnProcess makes the next operation use process p instead of a fresh one.
func (b *Builder) OnProcess(p int) *Builder {
	b.pid = p
	if p >= b.nextPID {
		b.nextPID = p + 1
	}
	return b
}

// OnNode makes the next operation go to node n (its events carry node n).
func (b *Builder) OnNode(n string) *Builder {
	b.node = n
	return b
}

func (b *Builder) process() int {
	if b.pid >= 0 {
		p := b.pid
		b.pid = -1
		return p
	}
	p := b.nextPID
	b.nextPID++
	return p
}

func (b *Builder) add(atMS int64, e history.Event) {
	b.events = append(b.events, timed{at: atMS * 1e6, seq: b.seq, ev: e})
	b.seq++
}

// op adds an invoke at call and, unless ret is Open, a completion of type t
// at ret. complete may adjust the completion event.
func (b *Builder) op(f, key string, call, ret int64, t history.Type, inv history.Event, complete func(*history.Event)) *Builder {
	p := b.process()
	node := b.node
	b.node = ""
	inv.Process, inv.Type, inv.F, inv.Key, inv.Node = p, history.Invoke, f, key, node
	b.add(call, inv)
	if ret == Open {
		return b
	}
	c := history.Event{Process: p, Type: t, F: f, Key: key, Node: node}
	if complete != nil {
		complete(&c)
	}
	b.add(ret, c)
	return b
}

// Write adds a write of value with token (""= no token) that was accepted.
func (b *Builder) Write(key, token, value string, call, ret int64) *Builder {
	return b.op(history.Write, key, call, ret, history.Ok,
		history.Event{Token: token, Value: value}, func(e *history.Event) { e.Token, e.Value = token, value })
}

// WriteFail adds a write that was definitely rejected with error word errWord
// ("stale", "missing-token", "malformed-token", "forged", ...).
func (b *Builder) WriteFail(key, token, value string, call, ret int64, errWord string) *Builder {
	return b.op(history.Write, key, call, ret, history.Fail,
		history.Event{Token: token, Value: value}, func(e *history.Event) { e.Token, e.Value, e.Error = token, value, errWord })
}

// WriteStale adds a write rejected as stale, the target reporting highWater.
func (b *Builder) WriteStale(key, token, value string, call, ret int64, highWater string) *Builder {
	return b.op(history.Write, key, call, ret, history.Fail,
		history.Event{Token: token, Value: value}, func(e *history.Event) {
			e.Token, e.Value, e.Error, e.HighWater = token, value, "stale", highWater
		})
}

// WriteInfo adds a write whose outcome is unknown: the client saw a timeout
// at ret (or, with ret = Open, the run ended first).
func (b *Builder) WriteInfo(key, token, value string, call, ret int64) *Builder {
	return b.op(history.Write, key, call, ret, history.Info,
		history.Event{Token: token, Value: value}, func(e *history.Event) { e.Token, e.Value, e.Error = token, value, "timeout" })
}

// Read adds a read that returned value with token ("" value: never written).
func (b *Builder) Read(key string, call, ret int64, value, token string) *Builder {
	return b.op(history.Read, key, call, ret, history.Ok, history.Event{},
		func(e *history.Event) { e.Value, e.Token = value, token })
}

// ReadInfo adds a read that timed out.
func (b *Builder) ReadInfo(key string, call, ret int64) *Builder {
	return b.op(history.Read, key, call, ret, history.Info, history.Event{},
		func(e *history.Event) { e.Error = "timeout" })
}

// Acquire adds an acquire of lock that returned token.
func (b *Builder) Acquire(lock string, call, ret int64, token string) *Builder {
	return b.op(history.Acquire, lock, call, ret, history.Ok, history.Event{},
		func(e *history.Event) { e.Token = token })
}

// AcquireFail adds an acquire refused because the lock was held.
func (b *Builder) AcquireFail(lock string, call, ret int64) *Builder {
	return b.op(history.Acquire, lock, call, ret, history.Fail, history.Event{},
		func(e *history.Event) { e.Error = "held" })
}

// AcquireInfo adds an acquire that timed out (no token seen).
func (b *Builder) AcquireInfo(lock string, call, ret int64) *Builder {
	return b.op(history.Acquire, lock, call, ret, history.Info, history.Event{},
		func(e *history.Event) { e.Error = "timeout" })
}

// Release adds an accepted release of lock with token.
func (b *Builder) Release(lock, token string, call, ret int64) *Builder {
	return b.op(history.Release, lock, call, ret, history.Ok, history.Event{Token: token}, nil)
}

// Strip records that the strip proxy tampered with the write of value on key
// at time at (ms): the resource received token (""= removed or emptied).
// mode is "remove", "empty" or "garble". The write must be in flight at at.
func (b *Builder) Strip(key, value, token, mode string, at int64) *Builder {
	m, _ := json.Marshal(mode)
	b.add(at, history.Event{Process: history.NemesisProcess, Type: history.Info, F: history.Tamper,
		Key: key, Value: value, Token: token, Extra: map[string]json.RawMessage{history.ExtraMode: m}})
	return b
}

// Nemesis records a fault event of action (history.FaultStart,
// history.FaultStop, ...) at time at (ms).
func (b *Builder) Nemesis(name, action string, at int64) *Builder {
	a, _ := json.Marshal(action)
	b.add(at, history.Event{Process: history.NemesisProcess, Type: history.Info, F: name,
		Extra: map[string]json.RawMessage{history.ExtraAction: a}})
	return b
}

// Fault records one fault period of nemesis name on node (comma-separated
// nodes, or "") from start to stop (ms), its start and stop paired by an
// extra.id as the scheduler pairs them; stop = Open leaves it running.
func (b *Builder) Fault(name, node string, start, stop int64) *Builder {
	return b.FaultWith(name, node, start, stop, nil)
}

// FaultWith is Fault with details on the start event (extra.mode,
// extra.offset_ms, extra.groups, ...), as the nemeses record them.
func (b *Builder) FaultWith(name, node string, start, stop int64, details map[string]any) *Builder {
	b.faultID++
	id, _ := json.Marshal(b.faultID)
	ev := func(action string) history.Event {
		a, _ := json.Marshal(action)
		return history.Event{Process: history.NemesisProcess, Type: history.Info, F: name, Node: node,
			Extra: map[string]json.RawMessage{history.ExtraAction: a, history.ExtraFaultID: id}}
	}
	st := ev(history.FaultStart)
	for k, v := range details {
		st.Extra[k], _ = json.Marshal(v)
	}
	b.add(start, st)
	if stop != Open {
		b.add(stop, ev(history.FaultStop))
	}
	return b
}

// Run records a run event (history/run.go) at time at (ms) with action and
// the given extra fields.
func (b *Builder) Run(action string, at int64, extra map[string]any) *Builder {
	x := map[string]json.RawMessage{}
	for k, v := range extra {
		x[k], _ = json.Marshal(v)
	}
	x[history.RunExtraAction], _ = json.Marshal(action)
	b.add(at, history.Event{Process: history.NemesisProcess, Type: history.Info, F: history.RunEvent, Extra: x})
	return b
}

// Events returns the history in time order with indices assigned.
func (b *Builder) Events() []history.Event {
	sorted := append([]timed(nil), b.events...)
	sort.SliceStable(sorted, func(i, j int) bool {
		if sorted[i].at != sorted[j].at {
			return sorted[i].at < sorted[j].at
		}
		return sorted[i].seq < sorted[j].seq
	})
	out := make([]history.Event, len(sorted))
	for i, t := range sorted {
		e := t.ev
		e.Index = int64(i)
		e.Time = t.at
		out[i] = e
	}
	return out
}

// Ops pairs the history (history.Pair).
func (b *Builder) Ops() ([]*history.Op, error) { return history.Pair(b.Events()) }
