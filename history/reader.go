package history

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
)

// MaxValue is the largest value the Fencing API allows (1 MiB).
const MaxValue = 1 << 20

// MaxLine is the longest history line accepted: the worst case the
// recorder writes for a legal value (every byte a control byte, escaped as
// \u00XX: 6 bytes each) plus room for the other fields.
const MaxLine = 6*MaxValue + 1<<20

// ParseError names the line of a history that could not be read.
type ParseError struct {
	Line int
	Err  error
}

func (e *ParseError) Error() string { return fmt.Sprintf("history line %d: %v", e.Line, e.Err) }
func (e *ParseError) Unwrap() error { return e.Err }

// Reader streams events from a JSON Lines history, one at a time, validating
// each. Blank lines are skipped, and so is a UTF-8 byte-order mark at the
// start. A truncated last line (a run killed while writing it: no newline,
// and the JSON ends early) is skipped and Truncated set; any other malformed
// line is a *ParseError naming it.
//
// Every line must have "index", "time", "process", "type" and "f"; a client
// event (process 0 or more) must have an f of the models (acquire, renew,
// release, write, read), a type of invoke, ok, fail or info, and a key.
type Reader struct {
	s    *bufio.Scanner
	line int
	// BytesRead counts input consumed so far (for progress on large files).
	BytesRead int64
	// Truncated is set when the last line was cut short (a run killed
	// while writing it) and skipped: everything before it is checkable.
	Truncated bool
	pending   []byte
	keys      map[string]string // interned keys
}

// NewReader reads events from r.
func NewReader(r io.Reader) *Reader {
	s := bufio.NewScanner(r)
	s.Buffer(make([]byte, 0, 64<<10), MaxLine)
	return &Reader{s: s, keys: map[string]string{}}
}

// Next returns the next event, or io.EOF at the end.
func (r *Reader) Next() (Event, error) {
	for r.s.Scan() {
		r.line++
		b := r.s.Bytes()
		r.BytesRead += int64(len(b)) + 1
		if len(bytes.TrimSpace(b)) == 0 {
			continue
		}
		if r.line == 1 {
			b = bytes.TrimPrefix(b, utf8BOM)
		}
		e, ok := scanEvent(b, r.keys)
		var err error
		if !ok {
			e, err = decodeEvent(b)
		}
		if err != nil {
			// A recorder writes whole lines, so only the last line can be
			// cut short by a crash: skip it, but fail on any other.
			var syn *json.SyntaxError
			if errors.As(err, &syn) && syn.Offset >= int64(len(b)) && !r.s.Scan() && r.s.Err() == nil {
				r.Truncated = true
				return Event{}, io.EOF
			}
			var fe fieldError
			if errors.As(err, &fe) {
				return Event{}, &ParseError{Line: r.line, Err: err}
			}
			return Event{}, &ParseError{Line: r.line, Err: fmt.Errorf("not a JSON event: %v", err)}
		}
		if err := validate(&e); err != nil {
			return Event{}, &ParseError{Line: r.line, Err: err}
		}
		return e, nil
	}
	if err := r.s.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return Event{}, &ParseError{Line: r.line + 1, Err: fmt.Errorf("line longer than %d bytes", MaxLine)}
		}
		return Event{}, err
	}
	return Event{}, io.EOF
}

// Line is the line number of the last event returned.
func (r *Reader) Line() int { return r.line }

var utf8BOM = []byte("\xef\xbb\xbf")

// fieldError is a line that is JSON but misses a field or has one of the
// wrong kind.
type fieldError struct{ msg string }

func (e fieldError) Error() string { return e.msg }

// wireEvent is Event with presence: a missing field is an error, never a
// zero.
type wireEvent struct {
	Index   *int64  `json:"index"`
	Time    *int64  `json:"time"`
	Process *int    `json:"process"`
	Type    *Type   `json:"type"`
	F       *string `json:"f"`
	Event
}

func decodeEvent(b []byte) (Event, error) {
	var w wireEvent
	if err := json.Unmarshal(b, &w); err != nil {
		var ute *json.UnmarshalTypeError
		if errors.As(err, &ute) && ute.Field != "" {
			return Event{}, fieldError{fmt.Sprintf("%q must be %s, not a JSON %s", ute.Field, ute.Type, ute.Value)}
		}
		return Event{}, err
	}
	e := w.Event
	for _, f := range [...]struct {
		name    string
		present bool
	}{{"index", w.Index != nil}, {"time", w.Time != nil}, {"process", w.Process != nil}, {"type", w.Type != nil}, {"f", w.F != nil}} {
		if !f.present {
			return Event{}, fieldError{fmt.Sprintf("missing %q", f.name)}
		}
	}
	e.Index, e.Time, e.Process, e.Type, e.F = *w.Index, *w.Time, *w.Process, *w.Type, *w.F
	return e, nil
}

func validate(e *Event) error {
	if e.F == "" {
		return errors.New(`empty "f"`)
	}
	if e.Process < NemesisProcess {
		return fmt.Errorf("process %d: clients are 0 or more, the nemesis -1", e.Process)
	}
	if e.Process == NemesisProcess {
		if IsClientOp(e.F) {
			return fmt.Errorf("client operation %q with the nemesis's process -1", e.F)
		}
		return nil // nemesis and annotation events are carried through
	}
	if !IsClientOp(e.F) {
		return fmt.Errorf("f %q of process %d is not a client operation (acquire, renew, release, write, read); nemesis and annotation events have process -1", e.F, e.Process)
	}
	if !e.Type.Valid() {
		return fmt.Errorf("type %q is not invoke, ok, fail or info", e.Type)
	}
	if e.Key == "" {
		return fmt.Errorf("%s without a key", e.F)
	}
	return nil
}

// ReadFile reads a whole history into memory. Use NewReader to stream large
// ones.
func ReadFile(path string) ([]Event, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ReadAll(f)
}

// ReadAll reads every event from r.
func ReadAll(r io.Reader) ([]Event, error) {
	rd := NewReader(r)
	var out []Event
	for {
		e, err := rd.Next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, e)
	}
}
