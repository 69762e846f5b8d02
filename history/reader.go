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

// MaxLine is the longest history line accepted (values are at most 1 MiB,
// plus the other fields).
const MaxLine = 4 << 20

// ParseError names the line of a history that could not be read.
type ParseError struct {
	Line int
	Err  error
}

func (e *ParseError) Error() string { return fmt.Sprintf("history line %d: %v", e.Line, e.Err) }
func (e *ParseError) Unwrap() error { return e.Err }

// Reader streams events from a JSON Lines history, one at a time, validating
// each. Blank lines are skipped. A truncated last line (a run killed while
// writing it) is reported as an error like any other malformed line.
type Reader struct {
	s    *bufio.Scanner
	line int
	// BytesRead counts input consumed so far (for progress on large files).
	BytesRead int64
	// Truncated is set when the last line was cut short (a run killed
	// while writing it) and skipped: everything before it is checkable.
	Truncated bool
	pending   []byte
}

// NewReader reads events from r.
func NewReader(r io.Reader) *Reader {
	s := bufio.NewScanner(r)
	s.Buffer(make([]byte, 0, 64<<10), MaxLine)
	return &Reader{s: s}
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
		var e Event
		if err := json.Unmarshal(b, &e); err != nil {
			// A recorder writes whole lines, so only the last line can be
			// cut short by a crash: skip it, but fail on any other.
			var syn *json.SyntaxError
			if errors.As(err, &syn) && syn.Offset >= int64(len(b)) && !r.s.Scan() && r.s.Err() == nil {
				r.Truncated = true
				return Event{}, io.EOF
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

func validate(e *Event) error {
	if e.F == "" {
		return errors.New(`missing "f"`)
	}
	if !IsClientOp(e.F) {
		return nil // nemesis and annotation events are carried through
	}
	if e.Process < 0 {
		return fmt.Errorf("client operation %q with negative process %d", e.F, e.Process)
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
