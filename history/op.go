package history

import (
	"fmt"
	"math"
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
// It holds only the open operations, so a long history streams through it.
type Pairer struct {
	open    map[int]*Op    // by process
	byValue map[string]*Op // open writes by value, for strip events
	retired map[int]bool   // processes that saw info
	count   int
}

// NewPairer returns an empty Pairer.
func NewPairer() *Pairer {
	return &Pairer{open: map[int]*Op{}, byValue: map[string]*Op{}, retired: map[int]bool{}}
}

// Add consumes one event. It returns the operation the event completed, if
// any. Non-client events return nil, except strip events, which are applied
// to the open write they tampered with.
func (p *Pairer) Add(e Event) (*Op, error) {
	if !e.IsClient() {
		if e.IsTamper() {
			if op, ok := p.byValue[e.Value]; ok {
				op.SentByClient = op.Token.Raw
				op.Token = ParseToken(e.Token)
				if m, ok := e.Extra["mode"]; ok {
					op.Tampered = strings.Trim(string(m), `"`)
				} else {
					op.Tampered = "tampered"
				}
			}
		}
		return nil, nil
	}
	if e.Type == Invoke {
		if prev, ok := p.open[e.Process]; ok {
			return nil, fmt.Errorf("event %d: process %d invokes %s while its %s (event %d) is still open", e.Index, e.Process, e.F, prev.F, prev.ID)
		}
		if p.retired[e.Process] {
			return nil, fmt.Errorf("event %d: process %d invokes %s after an info outcome; a process that saw info must not be reused", e.Index, e.Process, e.F)
		}
		op := &Op{ID: e.Index, Process: e.Process, F: e.F, Key: e.Key, Call: e.Time,
			Return: Never, Completed: Never, CompleteID: -1, Node: e.Node}
		if e.F != Acquire && e.F != Read {
			op.Token = ParseToken(e.Token)
		}
		if e.F == Write {
			op.Value = e.Value
			if e.Value != "" {
				p.byValue[e.Value] = op
			}
		}
		p.open[e.Process] = op
		return nil, nil
	}
	op, ok := p.open[e.Process]
	if !ok {
		return nil, fmt.Errorf("event %d: process %d completes %s (%s) with no open operation", e.Index, e.Process, e.F, e.Type)
	}
	if op.F != e.F || op.Key != e.Key {
		return nil, fmt.Errorf("event %d: process %d completes %s %q but its open operation (event %d) is %s %q", e.Index, e.Process, e.F, e.Key, op.ID, op.F, op.Key)
	}
	delete(p.open, e.Process)
	if op.F == Write {
		delete(p.byValue, op.Value)
	}
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
		return nil, fmt.Errorf("event %d: completion of type %q", e.Index, e.Type)
	}
	p.count++
	return op, nil
}

// Finish returns the operations still open when the history ended (a run
// that was killed): they are treated as info.
func (p *Pairer) Finish() []*Op {
	var out []*Op
	for _, op := range p.open {
		op.Outcome = OutcomeInfo
		out = append(out, op)
	}
	p.open = map[int]*Op{}
	p.byValue = map[string]*Op{}
	return out
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
	return append(out, p.Finish()...), nil
}
