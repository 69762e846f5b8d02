package history

import (
	"fmt"
	"math"
	"sort"
	"strings"
)

// Never is the return time of an operation whose outcome is unknown (info, or
// no completion at all): it may take effect at any later moment.
const Never int64 = math.MaxInt64

// Outcome is how a client operation ended.
type Outcome uint8

const (
	OutcomeOk Outcome = iota
	OutcomeFail
	// OutcomeInfo: timed out or the run ended first; may or may not have
	// taken effect.
	OutcomeInfo
)

func (o Outcome) String() string {
	switch o {
	case OutcomeOk:
		return "ok"
	case OutcomeFail:
		return "fail"
	}
	return "info"
}

// Op is one client operation: an invoke paired with its completion.
type Op struct {
	// ID is the history index of the invoke event.
	ID      int64
	Process int
	F       string
	Key     string
	// Token: for writes, the token the resource really received (after any
	// strip tampering); for acquires, the token returned (when ok); for
	// renew/release, the token sent; for reads, the token of the value seen.
	Token Token
	// Tampered is the strip mode ("remove", "empty", "garble") when the
	// proxy changed this write's token, and SentByClient what the client sent.
	Tampered     string
	SentByClient string
	// Value is a write's value, or the value a read saw ("" = never written).
	Value     string
	Outcome   Outcome
	Error     string
	HighWater string
	// Call and Return bound the operation in history time (ns). Return is
	// Never for info operations.
	Call   int64
	Return int64
	// Completed is the history time of the completion event (also for info),
	// or Never when the history ended first.
	Completed int64
	// CompleteID is the history index of the completion event (-1 if none).
	CompleteID int64
	Node       string
}

// Pairer turns a stream of events into operations, in order of completion.
// It holds only the open operations (and an index of the info writes, for
// late strip events), so a long history streams through it.
//
// Besides pairing it refuses what a history must not contain, each as an
// error naming the event: a duplicate index, a completion before its
// invoke, a completion with no open operation or of another operation, an
// invoke while the process has one open or after it saw info, a write whose
// token or value on its completion differs from its invoke's, and a strip
// event that matches no write in flight (or two).
//
// A write's (renew's, release's) token and value may be given on the invoke,
// on the completion (as Jepsen-style tools do), or on both (then equal).
type Pairer struct {
	open map[int]*Op // by process
	// infos: the info writes by key and value, for late strip events (open
	// writes are found among the open operations, bounded by the clients).
	infos map[string][]*Op
	// pending: strip events whose write is open but has no value yet (it
	// comes on the completion).
	pending map[string]pendingStrip
	retired map[int]bool // processes that saw info
	seen    indexSet
	count   int
	free    []*Op // operations the caller gave back (Recycle)
	// Line is the caller's line number of the event being added (for
	// errors found later, in Finish); 0 when unknown.
	Line int
}

type pendingStrip struct {
	e    Event
	line int
}

// PairError is an event a Pairer refuses. Line is the Pairer's Line when
// the event was added (0 when the caller did not set it).
type PairError struct {
	Line int
	Msg  string
}

func (e *PairError) Error() string { return e.Msg }

func (p *Pairer) errorf(line int, format string, args ...any) error {
	return &PairError{Line: line, Msg: fmt.Sprintf(format, args...)}
}

// NewPairer returns an empty Pairer.
func NewPairer() *Pairer {
	return &Pairer{open: map[int]*Op{}, infos: map[string][]*Op{},
		pending: map[string]pendingStrip{}, retired: map[int]bool{}}
}

func writeKey(key, value string) string { return key + "\x00" + value }

// Add consumes one event. It returns the operation the event completed, if
// any. Non-client events return
// nil, except strip events, which are applied to the write they tampered
// with (matched by key and value).
func (p *Pairer) Add(e Event) (*Op, error) {
	if first, dup := p.seen.add(e.Index, p.Line); dup {
		if first > 0 {
			return nil, p.errorf(p.Line, "duplicate index %d (also on line %d)", e.Index, first)
		}
		return nil, p.errorf(p.Line, "duplicate index %d", e.Index)
	}
	if !e.IsClient() {
		if e.IsTamper() {
			return nil, p.tamper(e, p.Line)
		}
		return nil, nil
	}
	if e.Type == Invoke {
		if prev, ok := p.open[e.Process]; ok {
			return nil, p.errorf(p.Line, "event %d: process %d invokes %s while its %s (event %d) is still open", e.Index, e.Process, e.F, prev.F, prev.ID)
		}
		if p.retired[e.Process] {
			return nil, p.errorf(p.Line, "event %d: process %d invokes %s after an info outcome; a process that saw info must not be reused", e.Index, e.Process, e.F)
		}
		var op *Op
		if n := len(p.free); n > 0 {
			op, p.free = p.free[n-1], p.free[:n-1]
		} else {
			op = new(Op)
		}
		*op = Op{ID: e.Index, Process: e.Process, F: e.F, Key: e.Key, Call: e.Time,
			Return: Never, Completed: Never, CompleteID: -1, Node: e.Node}
		if e.F != Acquire && e.F != Read {
			op.Token = ParseToken(e.Token)
		}
		if e.F == Write {
			op.Value = e.Value
		}
		p.open[e.Process] = op
		return nil, nil
	}
	op, ok := p.open[e.Process]
	if !ok {
		return nil, p.errorf(p.Line, "event %d: process %d completes %s (%s) with no open operation", e.Index, e.Process, e.F, e.Type)
	}
	if op.F != e.F || op.Key != e.Key {
		return nil, p.errorf(p.Line, "event %d: process %d completes %s %q but its open operation (event %d) is %s %q", e.Index, e.Process, e.F, e.Key, op.ID, op.F, op.Key)
	}
	if e.Time < op.Call {
		return nil, p.errorf(p.Line, "event %d: completion at time %d is before its invoke (event %d) at time %d", e.Index, e.Time, op.ID, op.Call)
	}
	if op.F == Write || op.F == Renew || op.F == Release {
		// The token and value may be given on the completion only.
		if e.Token != "" && op.Tampered == "" {
			if op.Token.Raw != "" && op.Token.Raw != e.Token {
				return nil, p.errorf(p.Line, "event %d: the completion's token %q differs from its invoke's %q (event %d)", e.Index, e.Token, op.Token.Raw, op.ID)
			}
			op.Token = ParseToken(e.Token)
		}
		if op.Tampered != "" && e.Token != "" && op.SentByClient == "" {
			op.SentByClient = e.Token
		}
		if op.F == Write && e.Value != "" && e.Value != op.Value {
			if op.Value != "" {
				return nil, p.errorf(p.Line, "event %d: the completion's value differs from its invoke's (event %d)", e.Index, op.ID)
			}
			op.Value = e.Value
			if len(p.pending) > 0 {
				if ps, ok := p.pending[writeKey(op.Key, op.Value)]; ok {
					delete(p.pending, writeKey(op.Key, op.Value))
					p.apply(op, ps.e)
				}
			}
		}
	}
	delete(p.open, e.Process)
	op.Completed = e.Time
	op.CompleteID = e.Index
	op.Error = e.Error
	op.HighWater = e.HighWater
	switch e.Type {
	case Ok:
		op.Outcome = OutcomeOk
		op.Return = e.Time
		switch op.F {
		case Acquire:
			op.Token = ParseToken(e.Token)
		case Read:
			op.Token = ParseToken(e.Token)
			op.Value = e.Value
		}
	case Fail:
		op.Outcome = OutcomeFail
		op.Return = e.Time
	case Info:
		op.Outcome = OutcomeInfo
		p.retired[e.Process] = true
	default:
		return nil, p.errorf(p.Line, "event %d: completion of type %q", e.Index, e.Type)
	}
	p.count++
	if op.F == Write && op.Outcome == OutcomeInfo {
		// An info write stays findable: a write held by a proxy may be
		// forwarded, and tampered with, after its client gave up. (A
		// consumer that copies operations as they come sees such a late
		// strip event only on the operation itself.)
		k := writeKey(op.Key, op.Value)
		p.infos[k] = append(p.infos[k], op)
	}
	return op, nil
}

// Recycle gives back an operation Add returned that the caller has copied
// and no longer holds, for Add to reuse: a history of millions then
// allocates one per client, not one per operation. An info write must not
// be given back (a later strip event may still change it).
func (p *Pairer) Recycle(op *Op) {
	if op.F == Write && op.Outcome == OutcomeInfo {
		return
	}
	p.free = append(p.free, op)
}

// inFlight are the writes a strip event on key with value may have
// changed: the open ones and those that ended info, by invoke.
func (p *Pairer) inFlight(key, value string) []*Op {
	var out []*Op
	for _, op := range p.open {
		if op.F == Write && op.Key == key && op.Value == value {
			out = append(out, op)
		}
	}
	out = append(out, p.infos[writeKey(key, value)]...)
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// tamper applies a strip event to the write in flight on its key with its
// value: the resource received the event's token, not the client's.
func (p *Pairer) tamper(e Event, line int) error {
	if e.Key == "" {
		return p.errorf(line, "event %d: strip event without a key (it must name the key and value of the write it changed)", e.Index)
	}
	k := writeKey(e.Key, e.Value)
	ops := p.inFlight(e.Key, e.Value)
	if len(ops) > 1 {
		return p.errorf(line, "event %d: strip event matches two writes in flight on key %q with that value (events %d and %d)", e.Index, e.Key, ops[0].ID, ops[1].ID)
	}
	if len(ops) == 0 {
		// Its write may give its value on the completion only.
		p.pending[k] = pendingStrip{e: e, line: line}
		return nil
	}
	op := ops[0]
	if op.Tampered != "" {
		return p.errorf(line, "event %d: a second strip event for the write of event %d", e.Index, op.ID)
	}
	p.apply(op, e)
	return nil
}

func (p *Pairer) apply(op *Op, e Event) {
	op.SentByClient = op.Token.Raw
	op.Token = ParseToken(e.Token)
	if m, ok := e.Extra["mode"]; ok {
		op.Tampered = strings.Trim(string(m), `"`)
	} else {
		op.Tampered = "tampered"
	}
}

// Finish returns the operations still open when the history ended (a run that was killed: they are treated as info), or an
// error for a strip event that matched no write.
func (p *Pairer) Finish() ([]*Op, error) {
	for _, ps := range p.pending {
		return nil, p.errorf(ps.line, "event %d: strip event matches no write in flight on key %q with value %q", ps.e.Index, ps.e.Key, ps.e.Value)
	}
	var open []*Op
	for _, op := range p.open {
		op.Outcome = OutcomeInfo
		open = append(open, op)
	}
	sort.Slice(open, func(i, j int) bool { return open[i].ID < open[j].ID })
	p.open = map[int]*Op{}
	return open, nil
}

// DropPending forgets the strip events that matched no write (a lenient
// reader goes on without them).
func (p *Pairer) DropPending() { p.pending = map[string]pendingStrip{} }

// indexSet remembers the indexes seen (and their lines): a bitset for the
// dense indexes a recorder writes, a map for the rest.
type indexSet struct {
	bits  []uint64
	lines map[int64]int
	n     int64
}

// add records index i (first seen on line) and reports whether it was seen
// before, with that line when known.
func (s *indexSet) add(i int64, line int) (int, bool) {
	s.n++
	if first, ok := s.lines[i]; ok {
		return first, true
	}
	if i >= 0 && i < 4*s.n+1<<20 {
		w := int(i >> 6)
		for w >= len(s.bits) {
			s.bits = append(s.bits, make([]uint64, len(s.bits)+1024)...)
		}
		bit := uint64(1) << (i & 63)
		if s.bits[w]&bit != 0 {
			return 0, true
		}
		s.bits[w] |= bit
		return 0, false
	}
	if s.lines == nil {
		s.lines = map[int64]int{}
	}
	s.lines[i] = line
	return 0, false
}

// Pair pairs a whole in-memory  Operations come back in order of
// completion, then the never-completed ones.
func Pair(events []Event) ([]*Op, error) {
	p := NewPairer()
	var out []*Op
	for _, e := range events {
		op, err := p.Add(e)
		if err != nil {
			return out, err
		}
		if op != nil {
			out = append(out, op)
		}
	}
	rest, err := p.Finish()
	return append(out, rest...), err
}
