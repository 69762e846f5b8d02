// Package workloads generates the operations of a run: clients that take a
// lock, write with its token, read, and release, each call recorded as an
// invoke and a completion in the history.
package workloads

import (
	"context"
	"encoding/json"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/fencecheck/fencecheck/history"
)

// Reply is what one Fencing API call came back with, already classified:
// Type is ok, fail (definite rejection) or info (unknown outcome).
type Reply struct {
	Type      history.Type
	Token     string
	Value     string
	Error     string
	HighWater string
	// TTL is the lease an ok acquire or renew answer said was granted (0
	// when it said none).
	TTL time.Duration
}

// Conn is the Fencing API as a workload uses it; one per node.
type Conn interface {
	Node() string
	Acquire(ctx context.Context, lock, owner string, ttl time.Duration) Reply
	Renew(ctx context.Context, lock, owner, token string, ttl time.Duration) Reply
	Release(ctx context.Context, lock, owner, token string) Reply
	Write(ctx context.Context, key, token string, value []byte) Reply
	Read(ctx context.Context, key string) Reply
}

// Processes hands out process numbers; a client that saw info takes a new
// one (its operation stays open forever, Jepsen-style).
type Processes struct{ next atomic.Int64 }

// Next returns an unused process number.
func (p *Processes) Next() int { return int(p.next.Add(1) - 1) }

// recorder records one client's operations under its current process.
type recorder struct {
	rec   *history.Recorder
	procs *Processes
	proc  int
	opTO  time.Duration
	// marks, when set, learns of every accepted write (straggler.go).
	marks *marks
}

func newRecorder(rec *history.Recorder, procs *Processes, opTimeout time.Duration) *recorder {
	return &recorder{rec: rec, procs: procs, proc: procs.Next(), opTO: opTimeout}
}

// do records the invoke, runs call under the op timeout, and records the
// completion. After an info outcome the client moves to a new process.
func (r *recorder) do(ctx context.Context, inv history.Event, call func(ctx context.Context) Reply) Reply {
	inv.Process = r.proc
	inv.Type = history.Invoke
	r.rec.Record(inv)
	cctx, cancel := context.WithTimeout(ctx, r.opTO)
	rep := call(cctx)
	cancel()
	done := history.Event{Process: r.proc, Type: rep.Type, F: inv.F, Key: inv.Key, Node: inv.Node,
		Error: rep.Error, HighWater: rep.HighWater}
	switch inv.F {
	case history.Acquire, history.Read:
		if rep.Type == history.Ok {
			done.Token, done.Value = rep.Token, rep.Value
		}
	default:
		done.Token, done.Value = inv.Token, inv.Value
	}
	if done.Type == "" {
		done.Type = history.Info
	}
	if (inv.F == history.Acquire || inv.F == history.Renew) && done.Type == history.Ok && rep.TTL > 0 {
		done.Extra = grantedExtra(rep.TTL)
	}
	r.rec.Record(done)
	if r.marks != nil && inv.F == history.Write && done.Type == history.Ok {
		r.marks.accepted(inv.Key, inv.Token)
	}
	if done.Type == history.Info {
		r.proc = r.procs.Next()
	}
	return rep
}

// leaseExtra records, on a write, how much of its lease the client believed
// was left when it decided to write (by its own wall clock): a client whose
// clock was stepped back believes in a lease that has run out.
func leaseExtra(left time.Duration) map[string]json.RawMessage {
	return map[string]json.RawMessage{history.ExtraLeaseLeft: json.RawMessage(strconv.FormatInt(left.Milliseconds(), 10))}
}

func ttlExtra(ttl time.Duration) map[string]json.RawMessage {
	return map[string]json.RawMessage{history.ExtraTTL: json.RawMessage(strconv.FormatInt(ttl.Milliseconds(), 10))}
}

func grantedExtra(ttl time.Duration) map[string]json.RawMessage {
	return map[string]json.RawMessage{history.ExtraGrantedTTL: json.RawMessage(strconv.FormatInt(ttl.Milliseconds(), 10))}
}

// stalledExtra is a paused holder's belief: the lease left at its check, and
// how long it stalled after it.
func stalledExtra(left, stalled time.Duration) map[string]json.RawMessage {
	m := leaseExtra(left)
	m[history.ExtraStalled] = json.RawMessage(strconv.FormatInt(stalled.Milliseconds(), 10))
	return m
}
