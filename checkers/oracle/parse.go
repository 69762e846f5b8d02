package oracle

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
)

// never is the return time of an operation whose outcome is unknown: it may
// take effect at any moment after its invoke.
const never int64 = math.MaxInt64

type outcome uint8

const (
	outOk outcome = iota
	outFail
	outInfo // info, or no completion at all
)

// op is one client operation as the oracle reads it.
type op struct {
	line    int   // line of the invoke
	index   int64 // index of the invoke
	process int
	f       string
	key     string // resource key, or lock name
	outcome outcome
	call    int64
	ret     int64 // never for info and never-completed operations
	// tok: for a write, the token the resource received (after a strip
	// event); for a read, the token it saw; for an acquire, the token it
	// returned; for renew and release, the token sent.
	tok       token
	sent      string // a write's token as the client sent it
	value     string
	err       string
	highWater string
	hasHW     bool
	tampered  bool
	doneLine  int // line of the completion, 0 if none
	lock      int // issuer: the lock's number within its partition
	prev      int // search: the same process's previous operation in the partition, or -1
}

// InputError is a history the oracle refuses to judge, with the line that
// shows it (fencecheck check exits 64 on such a file).
type InputError struct {
	Line int
	Msg  string
}

func (e *InputError) Error() string { return fmt.Sprintf("history line %d: %s", e.Line, e.Msg) }

func inputErr(line int, format string, args ...any) error {
	return &InputError{Line: line, Msg: fmt.Sprintf(format, args...)}
}

var bom = []byte("\xef\xbb\xbf")

// event is one line, with the fields the oracle reads.
type event struct {
	line                                    int
	index, time                             int64
	process                                 int
	typ, f, key, tok, value, err, highWater string
	hasHighWater, hasExtraKind              bool
}

var clientOps = map[string]bool{"acquire": true, "renew": true, "release": true, "write": true, "read": true}

// parse reads a JSON Lines history strictly and pairs it into operations.
// The rules (and the choices where the documents are silent) are listed in
// the package documentation.
func parse(data []byte) ([]*op, error) {
	data = bytes.TrimPrefix(data, bom)
	var (
		ops     []*op
		open    = map[int]*op{}
		retired = map[int]bool{}
		seen    = map[int64]int{}
		writes  []*op // every write, for strip events
		strips  []event
	)
	line := 0
	for len(data) > 0 {
		line++
		raw := data
		nl := bytes.IndexByte(data, '\n')
		if nl >= 0 {
			raw, data = data[:nl], data[nl+1:]
		} else {
			data = nil
		}
		if len(bytes.TrimSpace(raw)) == 0 {
			continue
		}
		e, err := decodeEvent(raw, line)
		if err != nil {
			// A run killed while writing its last line leaves it cut
			// short; everything before it is checkable.
			var syn *json.SyntaxError
			if nl < 0 && errors.As(err, &syn) && syn.Offset >= int64(len(bytes.TrimSpace(raw))) {
				break
			}
			var ie *InputError
			if errors.As(err, &ie) {
				return nil, err
			}
			return nil, inputErr(line, "not a JSON object: %v", err)
		}
		if first, dup := seen[e.index]; dup {
			return nil, inputErr(line, "duplicate index %d (also on line %d)", e.index, first)
		}
		seen[e.index] = line
		switch {
		case e.process < -1:
			return nil, inputErr(line, "process %d: clients are 0 or more, the nemesis -1", e.process)
		case e.process == -1:
			if clientOps[e.f] {
				return nil, inputErr(line, "client operation %q with the nemesis's process -1", e.f)
			}
			if e.f == "strip" && !e.hasExtraKind {
				strips = append(strips, e)
			}
			continue
		}
		if !clientOps[e.f] {
			return nil, inputErr(line, "f %q is not a client operation (acquire, renew, release, write, read)", e.f)
		}
		if e.key == "" {
			return nil, inputErr(line, "%s without a key", e.f)
		}
		if e.typ == "invoke" {
			if prev, busy := open[e.process]; busy {
				return nil, inputErr(line, "process %d invokes %s while its %s of line %d is still open", e.process, e.f, prev.f, prev.line)
			}
			if retired[e.process] {
				return nil, inputErr(line, "process %d invokes %s after an info outcome (a process that saw info is retired)", e.process, e.f)
			}
			o := &op{line: line, index: e.index, process: e.process, f: e.f, key: e.key,
				outcome: outInfo, call: e.time, ret: never}
			switch e.f {
			case "write":
				o.sent, o.value = e.tok, e.value
				writes = append(writes, o)
			case "renew", "release":
				o.sent = e.tok
			}
			open[e.process] = o
			ops = append(ops, o)
			continue
		}
		o, ok := open[e.process]
		if !ok {
			return nil, inputErr(line, "process %d completes %s (%s) with no open operation", e.process, e.f, e.typ)
		}
		if o.f != e.f || o.key != e.key {
			return nil, inputErr(line, "process %d completes %s %q but its open operation (line %d) is %s %q", e.process, e.f, e.key, o.line, o.f, o.key)
		}
		if e.time < o.call {
			return nil, inputErr(line, "completion at time %d is before its invoke at time %d (line %d)", e.time, o.call, o.line)
		}
		delete(open, e.process)
		o.doneLine = line
		switch e.f {
		case "write", "renew", "release":
			// Jepsen-style tools may give a write's token and value only on
			// its completion: read them there when the invoke has none.
			if e.tok != "" {
				if o.sent != "" && o.sent != e.tok {
					return nil, inputErr(line, "completion's token %q differs from its invoke's %q (line %d)", e.tok, o.sent, o.line)
				}
				o.sent = e.tok
			}
			if e.f == "write" && e.value != "" {
				if o.value != "" && o.value != e.value {
					return nil, inputErr(line, "completion's value differs from its invoke's (line %d)", o.line)
				}
				o.value = e.value
			}
		}
		o.err, o.highWater, o.hasHW = e.err, e.highWater, e.hasHighWater
		switch e.typ {
		case "ok":
			o.outcome, o.ret = outOk, e.time
			if e.f == "acquire" || e.f == "read" {
				o.tok = parseToken(e.tok)
				o.value = e.value
			}
		case "fail":
			o.outcome, o.ret = outFail, e.time
		case "info":
			retired[e.process] = true
		}
	}
	// Strip events are matched once every write's value is known (it may
	// be given only on the completion).
	for _, e := range strips {
		if err := tamper(e, writes); err != nil {
			return nil, err
		}
	}
	for _, o := range ops {
		if (o.f == "write" && !o.tampered) || o.f == "renew" || o.f == "release" {
			o.tok = parseToken(o.sent)
		}
	}
	return ops, nil
}

// tamper applies a strip event (the proxy changed a write's token) to the
// write in flight on the same key with the same value: the resource
// received the event's token.
func tamper(e event, writes []*op) error {
	if e.key == "" {
		return inputErr(e.line, "strip event without a key (it must name the key and the value of the write it changed)")
	}
	var match *op
	for _, w := range writes {
		// In flight: invoked before the event, and still open then, or
		// ended info (a write held by a proxy may be forwarded after its
		// client gave up), or never completed.
		inFlight := w.line < e.line && (w.doneLine == 0 || w.doneLine > e.line || w.outcome == outInfo)
		if !inFlight || w.key != e.key || w.value != e.value {
			continue
		}
		if match != nil {
			return inputErr(e.line, "strip event matches two writes in flight on key %q with value %q (lines %d and %d)", e.key, e.value, match.line, w.line)
		}
		match = w
	}
	if match == nil {
		return inputErr(e.line, "strip event matches no write in flight on key %q with value %q", e.key, e.value)
	}
	if match.tampered {
		return inputErr(e.line, "second strip event for the write of line %d", match.line)
	}
	match.tampered = true
	match.tok = parseToken(e.tok)
	return nil
}

func decodeEvent(raw []byte, line int) (event, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return event{}, err
	}
	if m == nil {
		return event{}, inputErr(line, "not a JSON object")
	}
	e := event{line: line}
	var err error
	num := func(name string) int64 {
		r, ok := m[name]
		if err != nil {
			return 0
		}
		if !ok || string(r) == "null" {
			err = inputErr(line, "missing %q", name)
			return 0
		}
		n, perr := strconv.ParseInt(string(r), 10, 64)
		if perr != nil {
			err = inputErr(line, "%q must be an integer, got %s", name, r)
		}
		return n
	}
	str := func(name string, required bool) (string, bool) {
		r, ok := m[name]
		if err != nil {
			return "", false
		}
		if !ok || string(r) == "null" {
			if required {
				err = inputErr(line, "missing %q", name)
			}
			return "", false
		}
		var s string
		if uerr := json.Unmarshal(r, &s); uerr != nil {
			err = inputErr(line, "%q must be a string, got %s", name, r)
		}
		return s, true
	}
	e.index = num("index")
	e.time = num("time")
	p := num("process")
	if err == nil && (p < math.MinInt32 || p > math.MaxInt32) {
		err = inputErr(line, "process %d out of range", p)
	}
	e.process = int(p)
	e.typ, _ = str("type", true)
	e.f, _ = str("f", true)
	e.key, _ = str("key", false)
	e.tok, _ = str("token", false)
	e.value, _ = str("value", false)
	e.err, _ = str("error", false)
	e.highWater, e.hasHighWater = str("high_water", false)
	if err != nil {
		return e, err
	}
	if e.f == "" {
		return e, inputErr(line, `empty "f"`)
	}
	if e.process >= 0 {
		switch e.typ {
		case "invoke", "ok", "fail", "info":
		default:
			return e, inputErr(line, "type %q is not invoke, ok, fail or info", e.typ)
		}
	}
	if r, ok := m["extra"]; ok && string(r) != "null" {
		var x map[string]json.RawMessage
		if uerr := json.Unmarshal(r, &x); uerr != nil {
			return e, inputErr(line, `"extra" must be an object, got %s`, r)
		}
		_, e.hasExtraKind = x["action"]
	}
	return e, nil
}
