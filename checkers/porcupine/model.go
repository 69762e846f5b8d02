package porcupine

import (
	"context"
	"fmt"
	"hash/maphash"
	"math"
	"strconv"
	"sync/atomic"

	porc "github.com/anishathalye/porcupine"
	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/history"
)

// porcOpKind distinguishes the register's operations.
type porcOpKind uint8

const (
	porcWrite porcOpKind = iota
	porcRead
	// porcSetState starts a segment with the state its predecessors forced.
	porcSetState
)

// porcRegInput is a register operation's input (porc.Operation.Input).
type porcRegInput struct {
	Kind  porcOpKind
	Tok   uint64
	TokOK bool // a token of the grammar (sealed or not)
	// Authentic: the token could be accepted (under authenticated
	// semantics: sealed and not forged, checkers.Issued).
	Authentic bool
	Value     string
	// Op is the history index of the invoke, for descriptions only.
	Op int64
	// Seg is the operation's segment (its Porcupine partition).
	Seg int
	// Init is the state a porcSetState operation carries over.
	Init porcRegState
}

// porcResult is how a register operation ended.
type porcResult uint8

const (
	porcAccepted porcResult = iota
	porcStale
	porcUnknown
	porcReadResult
	// porcRejected: rejected for another reason than staleness; a no-op
	// (only kept when the reductions are off).
	porcRejected
)

// porcReduce switches the reductions on; tests switch them off to show that
// they do not change any verdict.
var porcReduce = true

// porcRegOutput is a register operation's output.
type porcRegOutput struct {
	Result porcResult
	// Value and Tok are what a read returned: 404 (never written) is no
	// token and no value; a 200 carries a token (an empty body: the empty
	// value).
	Value   string
	Tok     uint64
	TokOK   bool
	NoToken bool
	// HW is the high-water a stale rejection reported (HWGiven), HWOK when
	// it is a token number (fencing/PROTOCOL.md: the mark during the
	// request).
	HW      uint64
	HWGiven bool
	HWOK    bool
}

// porcRegState is the register's state. The token of the current value always
// equals the high-water mark (every accepted write sets both to its token),
// so one field holds both; Written distinguishes "never written" from
// token 0. Small and comparable: porcupine caches states by ==.
type porcRegState struct {
	Written bool
	HW      uint64
	Value   string
}

var porcStateSeed = maphash.MakeSeed()

func registerModel(sem checkers.Semantics, abort *abortFlag) porc.Model {
	accept := sem.Equal == checkers.EqualAccept
	acceptable := func(s porcRegState, in porcRegInput) bool {
		if !in.Authentic {
			return false
		}
		return !s.Written || in.Tok > s.HW || (accept && in.Tok == s.HW)
	}
	return porc.Model{
		Partition: porcPartition,
		Init:      func() interface{} { return porcRegState{} },
		StepContext: func(_ context.Context, state, input, output interface{}) (bool, interface{}) {
			if abort.stop() {
				return false, state
			}
			s, in, out := state.(porcRegState), input.(porcRegInput), output.(porcRegOutput)
			if in.Kind == porcSetState {
				return true, in.Init
			}
			if in.Kind == porcRead {
				if out.NoToken && out.Value == "" {
					return !s.Written, s // 404: never written
				}
				return out.TokOK && s.Written && s.Value == out.Value && out.Tok == s.HW, s
			}
			switch out.Result {
			case porcAccepted:
				if !acceptable(s, in) {
					return false, s
				}
				return true, porcRegState{Written: true, HW: in.Tok, Value: in.Value}
			case porcStale:
				// Only an authentic token's rejection claims anything
				// about the high-water mark; a reported mark is the mark.
				if !in.Authentic {
					return true, s
				}
				if out.HWGiven && (!out.HWOK || !s.Written || s.HW != out.HW) {
					return false, s
				}
				return !acceptable(s, in), s
			case porcRejected:
				return true, s
			default: // unknown outcome: see reduction 2
				if acceptable(s, in) {
					return true, porcRegState{Written: true, HW: in.Tok, Value: in.Value}
				}
				return true, s
			}
		},
		Hash: func(state interface{}) uint64 {
			s := state.(porcRegState)
			return maphash.String(porcStateSeed, s.Value) ^ (s.HW * 0x9e3779b97f4a7c15)
		},
		DescribeOperation: describePorcRegOp,
		DescribeState: func(state interface{}) string {
			s := state.(porcRegState)
			if !s.Written {
				return "never written"
			}
			return fmt.Sprintf("%s (token %d = high-water)", s.Value, s.HW)
		},
		DescribeOperationMetadata: describePorcMetadata,
	}
}

func describePorcRegOp(input, output interface{}) string {
	in, out := input.(porcRegInput), output.(porcRegOutput)
	if in.Kind == porcSetState {
		if !in.Init.Written {
			return fmt.Sprintf("segment %d starts: never written", in.Seg)
		}
		return fmt.Sprintf("segment %d starts: %s (token %d), forced by the segments before", in.Seg, in.Init.Value, in.Init.HW)
	}
	if in.Kind == porcRead {
		if out.NoToken && out.Value == "" {
			return "read → never written"
		}
		if out.TokOK {
			return fmt.Sprintf("read → %s (token %d)", out.Value, out.Tok)
		}
		return "read → " + out.Value
	}
	tok := "no valid token"
	if in.TokOK {
		tok = "token " + strconv.FormatUint(in.Tok, 10)
		if !in.Authentic {
			tok += " (never acceptable)"
		}
	}
	switch out.Result {
	case porcAccepted:
		return fmt.Sprintf("write %s, %s → accepted", in.Value, tok)
	case porcStale:
		if out.HWGiven {
			return fmt.Sprintf("write %s, %s → stale (high-water %d)", in.Value, tok, out.HW)
		}
		return fmt.Sprintf("write %s, %s → stale", in.Value, tok)
	case porcRejected:
		return fmt.Sprintf("write %s, %s → rejected", in.Value, tok)
	}
	return fmt.Sprintf("write %s, %s → unknown (may apply)", in.Value, tok)
}

// porcOpMeta is porcupine metadata: the op, for the visualization's tooltips.
type porcOpMeta struct{ op *history.Op }

func describePorcMetadata(info interface{}) string {
	m, ok := info.(porcOpMeta)
	if !ok || m.op == nil {
		return ""
	}
	op := m.op
	s := fmt.Sprintf("op %d, process %d, %s", op.ID, op.Process, op.Outcome)
	if op.Error != "" {
		s += " (" + op.Error + ")"
	}
	if op.Tampered != "" {
		s += ", token tampered (" + op.Tampered + ", client sent " + strconv.Quote(op.SentByClient) + ")"
	}
	if op.Node != "" {
		s += ", node " + op.Node
	}
	return s
}

// porcIssuerState is the highest token returned so far.
type porcIssuerState struct {
	Any bool
	Max uint64
}

type porcIssuerInput struct {
	Tok   uint64
	TokOK bool
	Lock  string
	Op    int64
	Seg   int
	// SetState starts a segment: the highest token so far is Tok.
	SetState bool
}

// issuerModel: the issuer is a counter whose acquires return strictly
// increasing tokens in linearization order. Equivalently: each acquire's
// token exceeds every token returned by acquires that completed before it
// began, and no token is returned twice.
func issuerModel(abort *abortFlag) porc.Model {
	return porc.Model{
		Partition: porcPartition,
		Init:      func() interface{} { return porcIssuerState{} },
		StepContext: func(_ context.Context, state, input, _ interface{}) (bool, interface{}) {
			if abort.stop() {
				return false, state
			}
			s, in := state.(porcIssuerState), input.(porcIssuerInput)
			if in.SetState {
				return true, porcIssuerState{Any: in.TokOK, Max: in.Tok}
			}
			if !in.TokOK || (s.Any && in.Tok <= s.Max) {
				return false, s
			}
			return true, porcIssuerState{Any: true, Max: in.Tok}
		},
		DescribeOperation: func(input, _ interface{}) string {
			in := input.(porcIssuerInput)
			if in.SetState {
				if !in.TokOK {
					return fmt.Sprintf("segment %d starts: no token issued yet", in.Seg)
				}
				return fmt.Sprintf("segment %d starts: highest token so far %d", in.Seg, in.Tok)
			}
			if !in.TokOK {
				return fmt.Sprintf("acquire %s → no valid token", in.Lock)
			}
			return fmt.Sprintf("acquire %s → token %d", in.Lock, in.Tok)
		},
		DescribeState: func(state interface{}) string {
			s := state.(porcIssuerState)
			if !s.Any {
				return "no token issued"
			}
			return fmt.Sprintf("highest token %d", s.Max)
		},
		DescribeOperationMetadata: describePorcMetadata,
	}
}

// abortFlag lets the caller's context stop a search: porcupine passes its
// own context to StepContext, not ours. Once set, every step fails, the
// search collapses quickly, and the key is reported checkers.Unknown (never Illegal).
type abortFlag struct {
	ctx     context.Context
	n       atomic.Uint32
	aborted atomic.Bool
}

func (a *abortFlag) stop() bool {
	if a == nil {
		return false
	}
	if a.aborted.Load() {
		return true
	}
	if a.n.Add(1)&255 == 0 && a.ctx.Err() != nil {
		a.aborted.Store(true)
		return true
	}
	return false
}

// returnTime maps Never to the largest time porcupine can sort.
func returnTime(t int64) int64 {
	if t == history.Never {
		return math.MaxInt64
	}
	return t
}

// porcClientIDs numbers processes densely per key, for the visualization.
type porcClientIDs map[int]int

func (c porcClientIDs) of(p int) int {
	if id, ok := c[p]; ok {
		return id
	}
	c[p] = len(c)
	return c[p]
}

// porcPartition splits a key's operations into its segments.
func porcPartition(h []porc.Operation) [][]porc.Operation {
	var out [][]porc.Operation
	for _, op := range h {
		seg := 0
		switch in := op.Input.(type) {
		case porcRegInput:
			seg = in.Seg
		case porcIssuerInput:
			seg = in.Seg
		}
		for len(out) <= seg {
			out = append(out, nil)
		}
		out[seg] = append(out[seg], op)
	}
	return out
}
