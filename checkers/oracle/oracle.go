package oracle

import (
	"fmt"
	"math"
	"sort"
)

// Semantics is what a target declares (fencing/PROTOCOL.md, "Semantics a
// target declares"); the zero value is the strict default.
type Semantics struct {
	// EqualAccept: a token equal to the high-water mark is accepted
	// (equal: accept); otherwise it is a replay and must be rejected.
	EqualAccept bool
	// GlobalScope: one token sequence for all locks (scope: global).
	GlobalScope bool
	// Authenticated: the resource and the issuer reject unsealed tokens.
	Authenticated bool
}

// Verdict is the oracle's answer on a history.
type Verdict string

const (
	Valid   Verdict = "valid"
	Invalid Verdict = "invalid"
	// TooBig: some partition has more than MaxOps operations; the oracle
	// refuses rather than guess.
	TooBig Verdict = "too-big"
)

// MaxOps bounds the operations of one partition (one key of the fenced
// register, one lock of the issuer, or every lock under global scope). The
// search visits at most 2^MaxOps sets of linearized operations times the
// states reached with each.
const MaxOps = 14

// Partition is the verdict on one key or lock.
type Partition struct {
	Model   string // "fenced-register" or "issuer"
	Key     string // the key or lock; "*" for the global issuer
	Ops     int
	Verdict Verdict
}

// Result is the verdict on a history and on each of its partitions.
type Result struct {
	Verdict    Verdict
	Partitions []Partition
}

// String is the verdict and each partition that is not valid.
func (r Result) String() string {
	s := string(r.Verdict)
	for _, p := range r.Partitions {
		if p.Verdict != Valid {
			s += fmt.Sprintf("; %s %s: %s (%d ops)", p.Model, p.Key, p.Verdict, p.Ops)
		}
	}
	return s
}

// Check reads a JSON Lines history and decides it. An unreadable history is
// an *InputError naming its line.
func Check(history []byte, sem Semantics) (Result, error) {
	ops, err := parse(history)
	if err != nil {
		return Result{}, err
	}
	registers := map[string][]*op{}
	issuers := map[string][]*op{}
	for _, o := range ops {
		switch o.f {
		case "write", "read":
			registers[o.key] = append(registers[o.key], o)
		case "renew", "release":
			// Not judged (the lead's decision, issue 12): the models
			// check acquires only.
		default:
			scope := o.key
			if sem.GlobalScope {
				scope = "*"
			}
			issuers[scope] = append(issuers[scope], o)
		}
	}
	// Under authenticated semantics a sealed token is authentic when an
	// acquire returned exactly its spelling, or an acquire whose answer was
	// lost was invoked before the write (it may have issued it; the seal is
	// opaque). A history with no acquire at all (the issuer is not
	// recorded) cannot tell a forgery. (The lead's rule, issue 12.)
	var acquires []*op
	for _, o := range ops {
		if o.f == "acquire" {
			acquires = append(acquires, o)
		}
	}
	authentic := func(w *op) bool {
		if !sem.Authenticated {
			return true
		}
		if !w.tok.sealed {
			return false
		}
		return len(acquires) == 0 || issuedBefore(acquires, w)
	}
	res := Result{Verdict: Valid}
	judge := func(model string, parts map[string][]*op, check func([]*op) bool) {
		for _, key := range sortedKeys(parts) {
			p := Partition{Model: model, Key: key, Ops: len(parts[key]), Verdict: Valid}
			switch {
			case p.Ops > MaxOps:
				p.Verdict = TooBig
			case !check(parts[key]):
				p.Verdict = Invalid
			}
			res.Partitions = append(res.Partitions, p)
			if p.Verdict == Invalid || (p.Verdict == TooBig && res.Verdict == Valid) {
				res.Verdict = p.Verdict
			}
		}
	}
	judge("fenced-register", registers, func(ops []*op) bool {
		step := register(sem, authentic)
		return linearizable(ops, regState{}, func(s regState, o *op) []regState {
			if s2, ok := step(s, o); ok {
				return []regState{s2}
			}
			return nil
		})
	})
	judge("issuer", issuers, func(ops []*op) bool {
		locks := map[string]int{}
		for _, o := range ops {
			if _, ok := locks[o.key]; !ok {
				locks[o.key] = len(locks)
			}
			o.lock = locks[o.key]
		}
		return linearizable(ops, issuerState{}, issuer(sem, ops))
	})
	return res, nil
}

// issuedBefore reports whether an acquire could have issued w's token: one
// returned its exact spelling, or one whose answer was lost was invoked
// before w.
func issuedBefore(acquires []*op, w *op) bool {
	for _, a := range acquires {
		if a.outcome == outOk && a.tok.kind == tokValid && a.tok.raw == w.tok.raw {
			return true
		}
		if a.outcome == outInfo && a.call < w.call {
			return true
		}
	}
	return false
}

func sortedKeys(m map[string][]*op) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// linearizable is the exhaustive search: is there an order of the
// operations, consistent with real time (an operation that returned before
// another was invoked comes first), in which every operation is a legal
// step of the model from init? (Ties in time are concurrent; a process's
// operations stay in their order.) An info operation either takes effect at
// its place in the order or never. step returns the states an operation
// can lead to (none: it cannot happen there). Sets of linearized operations already
// found to be dead ends from a state are remembered.
func linearizable[S comparable](ops []*op, init S, step func(S, *op) []S) bool {
	type node struct {
		done uint64
		s    S
	}
	// A process is sequential: its previous operation comes first even
	// when the two share a timestamp.
	last := map[int]int{}
	for i, o := range ops {
		o.prev = -1
		if j, ok := last[o.process]; ok {
			o.prev = j
		}
		last[o.process] = i
	}
	all := uint64(1)<<len(ops) - 1
	dead := map[node]bool{}
	var search func(done uint64, s S) bool
	search = func(done uint64, s S) bool {
		if done == all {
			return true
		}
		if dead[node{done, s}] {
			return false
		}
		// An operation may come next only if no other pending one
		// returned before it was invoked.
		first := never
		for i, o := range ops {
			if done&(1<<i) == 0 && o.ret < first {
				first = o.ret
			}
		}
		for i, o := range ops {
			if done&(1<<i) != 0 || o.call > first || (o.prev >= 0 && done&(1<<o.prev) == 0) {
				continue
			}
			if o.outcome == outInfo && search(done|1<<i, s) { // never took effect
				return true
			}
			for _, s2 := range step(s, o) {
				if search(done|1<<i, s2) {
					return true
				}
			}
		}
		dead[node{done, s}] = true
		return false
	}
	return search(0, init)
}

// regState is a key of the fenced register: its high-water mark and the
// value stored with it (the token of the value is the mark: every accepted
// write sets both).
type regState struct {
	written bool
	hw      uint64
	value   string
}

// register is the fenced register's step function.
func register(sem Semantics, authentic func(*op) bool) func(regState, *op) (regState, bool) {
	return func(s regState, o *op) (regState, bool) {
		switch o.f {
		case "write":
			// A token must be present, well formed and, on authenticated
			// targets, sealed and issued; otherwise the write must be
			// rejected and its rejection (any error word) claims nothing.
			acceptable := o.tok.kind == tokValid && authentic(o)
			newer := !s.written || o.tok.n > s.hw || (sem.EqualAccept && o.tok.n == s.hw)
			switch o.outcome {
			case outOk, outInfo:
				if acceptable && newer {
					return regState{written: true, hw: o.tok.n, value: o.value}, true
				}
				return s, false
			case outFail:
				if o.err != "stale" || !acceptable {
					return s, true // did not take effect; no claim
				}
				// "stale": the token is not newer than the mark, and the
				// reported high_water is that mark.
				if newer {
					return s, false
				}
				if o.hasHW {
					if hw, ok := parseHighWater(o.highWater); !ok || hw != s.hw {
						return s, false
					}
				}
				return s, true
			}
		case "read":
			if o.outcome != outOk {
				return s, true
			}
			switch o.tok.kind {
			case tokMissing: // 404: never written (a 200 always carries the token)
				return s, !s.written && o.value == ""
			case tokMalformed:
				return s, false
			}
			return s, s.written && s.hw == o.tok.n && s.value == o.value
		}
		return s, false
	}
}

// holder is a lock's holder: free (held false), or the owner of token n.
type holder struct {
	held bool
	n    uint64
}

// issuerState is the issuer of one partition: the greatest token issued,
// and each lock's holder.
type issuerState struct {
	issued  bool
	max     uint64
	holders [MaxOps]holder
}

// issuer is the issuer's step function for a partition's operations.
func issuer(sem Semantics, ops []*op) func(issuerState, *op) []issuerState {
	// The tokens sent by renews and releases of each lock: the only
	// numbers an acquire whose answer was lost could usefully have issued.
	sentTo := map[int][]uint64{}
	for _, o := range ops {
		if (o.f == "renew" || o.f == "release") && o.tok.kind == tokValid {
			sentTo[o.lock] = append(sentTo[o.lock], o.tok.n)
		}
	}
	one := func(s issuerState) []issuerState { return []issuerState{s} }
	return func(s issuerState, o *op) []issuerState {
		switch o.f {
		case "acquire":
			switch o.outcome {
			case outOk:
				// The token is greater than every token issued before.
				if o.tok.kind != tokValid || (s.issued && o.tok.n <= s.max) {
					return nil
				}
				s.issued, s.max = true, o.tok.n
				s.holders[o.lock] = holder{true, o.tok.n}
				return one(s)
			case outInfo:
				// It took effect with a token nobody saw: any number above
				// the greatest. The smallest is the most permissive for
				// later acquires; a number some later renew or release
				// sends is the only other one that can matter (its owner
				// may have guessed it: owners are not in the history).
				var next []issuerState
				candidates := []uint64{0}
				if s.issued {
					if s.max == math.MaxUint64 {
						return nil
					}
					candidates[0] = s.max + 1
				}
				for _, n := range sentTo[o.lock] {
					if n > candidates[0] {
						candidates = append(candidates, n)
					}
				}
				for _, n := range candidates {
					t := s
					t.issued, t.max = true, n
					t.holders[o.lock] = holder{true, n}
					next = append(next, t)
				}
				return next
			}
			return one(s) // fail: nothing issued
		case "renew", "release":
			// 200 only while the owner holds the lock with this token.
			holds := o.tok.kind == tokValid && (!sem.Authenticated || o.tok.sealed) &&
				s.holders[o.lock] == holder{true, o.tok.n}
			switch o.outcome {
			case outOk:
				if !holds {
					return nil
				}
			case outFail:
				return one(s)
			}
			if o.f == "release" && holds {
				s.holders[o.lock] = holder{}
			}
			return one(s)
		}
		return nil
	}
}
