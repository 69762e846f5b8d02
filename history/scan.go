package history

import (
	"encoding/binary"
	"encoding/json"
	"math/bits"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// scanEvent is the reader's fast path: a scanner for the fixed schema of a
// history line. It returns ok only when it is sure its event is the one
// encoding/json would decode (decodeEvent); anything unusual (a field
// name in other letter case, a number with a fraction or out of range, a
// control byte or invalid UTF-8 in a string, a lone surrogate, a syntax
// error) returns !ok and the line goes through encoding/json, which also
// words the error. TestScanMatchesEncodingJSON and FuzzScanEvent hold the
// two paths to the same answers.
func scanEvent(b []byte, keys map[string]string) (e Event, ok bool) {
	s := scanner{b: b}
	s.ws()
	if !s.lit('{') {
		return e, false
	}
	var have uint8
	var seen uint16 // every known field once: a repeated one is left to encoding/json
	const (
		hIndex = 1 << iota
		hTime
		hProcess
		hType
		hF
	)
	s.ws()
	if s.lit('}') {
		return e, false // missing fields: let the slow path word it
	}
	for {
		s.ws()
		name, ok := s.rawString()
		if !ok {
			return e, false
		}
		s.ws()
		if !s.lit(':') {
			return e, false
		}
		s.ws()
		if f := fieldBit(name); f != 0 {
			if seen&f != 0 {
				return e, false
			}
			seen |= f
		}
		null := s.peekNull()
		switch string(name) {
		case "index", "time", "process":
			if null {
				return e, false
			}
			n, ok := s.int()
			if !ok {
				return e, false
			}
			switch name[0] {
			case 'i':
				e.Index, have = n, have|hIndex
			case 't':
				e.Time, have = n, have|hTime
			default:
				e.Process, have = int(n), have|hProcess
			}
		case "type", "f", "key", "token", "value", "error", "high_water", "node":
			var v string
			if null {
				s.i += 4
				if name[0] == 't' && len(name) == 4 || name[0] == 'f' {
					return e, false // a required field that is null
				}
			} else {
				raw, esc, ok := s.str()
				if !ok {
					return e, false
				}
				switch {
				case esc:
					if v, ok = unescape(raw); !ok {
						return e, false
					}
				case string(name) == "key":
					v = intern(keys, raw)
				case string(name) == "type" || string(name) == "f":
					v = constant(raw)
				default:
					v = string(raw)
				}
			}
			switch string(name) {
			case "type":
				e.Type, have = Type(v), have|hType
			case "f":
				e.F, have = v, have|hF
			case "key":
				e.Key = v
			case "token":
				e.Token = v
			case "value":
				e.Value = v
			case "error":
				e.Error = v
			case "high_water":
				e.HighWater = v
			case "node":
				e.Node = v
			}
		case "extra":
			if null {
				s.i += 4
				e.Extra = nil
				break
			}
			x, ok := s.extra()
			if !ok {
				return e, false
			}
			e.Extra = x
		default:
			if foldsToField(name) {
				return e, false
			}
			if !s.skip(0) {
				return e, false
			}
		}
		s.ws()
		if s.lit(',') {
			continue
		}
		if !s.lit('}') {
			return e, false
		}
		break
	}
	s.ws()
	if s.i != len(s.b) || have != hIndex|hTime|hProcess|hType|hF {
		return e, false
	}
	return e, true
}

var fieldNames = [...]string{"index", "time", "process", "type", "f", "key", "token", "value", "error", "high_water", "node", "extra"}

func fieldBit(name []byte) uint16 {
	// A switch, not a loop over fieldNames: it runs for every field of
	// every line.
	switch string(name) {
	case "index":
		return 1 << 0
	case "time":
		return 1 << 1
	case "process":
		return 1 << 2
	case "type":
		return 1 << 3
	case "f":
		return 1 << 4
	case "key":
		return 1 << 5
	case "token":
		return 1 << 6
	case "value":
		return 1 << 7
	case "error":
		return 1 << 8
	case "high_water":
		return 1 << 9
	case "node":
		return 1 << 10
	case "extra":
		return 1 << 11
	}
	return 0
}

// foldsToField: encoding/json matches field names without regard to case.
func foldsToField(name []byte) bool {
	for _, f := range fieldNames {
		if len(f) == len(name) && strings.EqualFold(f, string(name)) {
			return true
		}
	}
	return false
}

// intern returns one string per distinct key (keys repeat on every line).
func intern(keys map[string]string, b []byte) string {
	if s, ok := keys[string(b)]; ok {
		return s
	}
	s := string(b)
	if len(keys) < 1<<16 {
		keys[s] = s
	}
	return s
}

func constant(b []byte) string {
	switch string(b) {
	case "invoke":
		return "invoke"
	case "ok":
		return "ok"
	case "fail":
		return "fail"
	case "info":
		return "info"
	case "write":
		return Write
	case "read":
		return Read
	case "acquire":
		return Acquire
	case "renew":
		return Renew
	case "release":
		return Release
	}
	return string(b)
}

type scanner struct {
	b []byte
	i int
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\r', '\n':
			s.i++
		default:
			return
		}
	}
}

func (s *scanner) lit(c byte) bool {
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

func (s *scanner) peekNull() bool {
	return len(s.b)-s.i >= 4 && string(s.b[s.i:s.i+4]) == "null"
}

// int reads an integer without fraction or exponent, in int64's range.
func (s *scanner) int() (int64, bool) {
	neg := s.lit('-')
	start := s.i
	var n uint64
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		if n > (1<<63)/10 {
			return 0, false
		}
		n = n*10 + uint64(s.b[s.i]-'0')
		s.i++
	}
	digits := s.i - start
	if digits == 0 || (digits > 1 && s.b[start] == '0') {
		return 0, false
	}
	if s.i < len(s.b) {
		switch s.b[s.i] {
		case '.', 'e', 'E':
			return 0, false
		}
	}
	if neg {
		if n > 1<<63 {
			return 0, false
		}
		return -int64(n), true
	}
	if n > 1<<63-1 {
		return 0, false
	}
	return int64(n), true
}

// str reads a string: its raw bytes between the quotes, and whether they
// hold escapes. Control bytes and invalid UTF-8 are left to encoding/json.
func (s *scanner) str() (raw []byte, esc, ok bool) {
	if !s.lit('"') {
		return nil, false, false
	}
	start := s.i
	ascii := true
	for s.i < len(s.b) {
		// Eight bytes at a time up to the first that needs a look (a
		// quote, a backslash, a control byte or a byte of a multi-byte
		// character): most strings of a history are short and plain.
		for s.i+8 <= len(s.b) {
			m := special(binary.LittleEndian.Uint64(s.b[s.i:]))
			if m != 0 {
				s.i += bits.TrailingZeros64(m) / 8
				break
			}
			s.i += 8
		}
		if s.i >= len(s.b) {
			break
		}
		c := s.b[s.i]
		switch {
		case c == '"':
			raw = s.b[start:s.i]
			s.i++
			if !ascii && !utf8.Valid(raw) {
				return nil, false, false
			}
			return raw, esc, true
		case c == '\\':
			esc = true
			s.i += 2
			continue
		case c < 0x20:
			return nil, false, false
		case c >= 0x80:
			ascii = false
		}
		s.i++
	}
	return nil, false, false
}

// special marks (the high bit of each byte) the bytes of v, eight bytes
// of a string read little-endian, that str must look at: '"', '\\', a
// control byte (< 0x20) or one >= 0x80. A byte above the lowest marked one
// may be marked wrongly (a borrow), never the lowest: str looks only at
// that one.
func special(v uint64) uint64 {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	quote := v ^ (ones * '"')
	slash := v ^ (ones * '\\')
	zero := func(x uint64) uint64 { return (x - ones) &^ x } // high bit where a byte of x is 0
	return (zero(quote) | zero(slash) | (v-ones*0x20)&^v | v) & highs
}

// rawString is a field name, unescaped only when plain.
func (s *scanner) rawString() ([]byte, bool) {
	raw, esc, ok := s.str()
	if !ok || esc {
		return nil, false
	}
	return raw, true
}

func hexVal(c byte) rune {
	switch {
	case c >= '0' && c <= '9':
		return rune(c - '0')
	case c >= 'a' && c <= 'f':
		return rune(c - 'a' + 10)
	case c >= 'A' && c <= 'F':
		return rune(c - 'A' + 10)
	}
	return -1
}

func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		v := hexVal(c)
		if v < 0 {
			return 0, false
		}
		r = r<<4 | v
	}
	return r, true
}

// unescape decodes a string's escapes as encoding/json does; a lone
// surrogate (which it turns into U+FFFD) is left to it.
func unescape(raw []byte) (string, bool) {
	out := make([]byte, 0, len(raw))
	for i := 0; i < len(raw); {
		c := raw[i]
		if c != '\\' {
			out = append(out, c)
			i++
			continue
		}
		if i+1 >= len(raw) {
			return "", false
		}
		switch raw[i+1] {
		case '"', '\\', '/':
			out = append(out, raw[i+1])
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, ok := hex4(raw[i+2:])
			if !ok {
				return "", false
			}
			i += 6
			if utf16.IsSurrogate(r) {
				if i+1 >= len(raw) || raw[i] != '\\' || raw[i+1] != 'u' {
					return "", false
				}
				r2, ok := hex4(raw[i+2:])
				if !ok {
					return "", false
				}
				dec := utf16.DecodeRune(r, r2)
				if dec == utf8.RuneError {
					return "", false
				}
				r = dec
				i += 6
			}
			out = utf8.AppendRune(out, r)
			continue
		default:
			return "", false
		}
		i += 2
	}
	return string(out), true
}

// skip passes over one JSON value, checking its syntax.
func (s *scanner) skip(depth int) bool {
	if depth > 100 || s.i >= len(s.b) {
		return false
	}
	switch c := s.b[s.i]; {
	case c == '"':
		_, _, ok := s.str()
		return ok
	case c == '{' || c == '[':
		close := byte('}')
		if c == '[' {
			close = ']'
		}
		s.i++
		s.ws()
		if s.lit(close) {
			return true
		}
		for {
			s.ws()
			if c == '{' {
				if _, _, ok := s.str(); !ok {
					return false
				}
				s.ws()
				if !s.lit(':') {
					return false
				}
				s.ws()
			}
			if !s.skip(depth + 1) {
				return false
			}
			s.ws()
			if s.lit(',') {
				continue
			}
			return s.lit(close)
		}
	case c == 't':
		return s.word("true")
	case c == 'f':
		return s.word("false")
	case c == 'n':
		return s.word("null")
	default:
		return s.number()
	}
}

func (s *scanner) word(w string) bool {
	if len(s.b)-s.i >= len(w) && string(s.b[s.i:s.i+len(w)]) == w {
		s.i += len(w)
		return true
	}
	return false
}

// number passes over a JSON number.
func (s *scanner) number() bool {
	s.lit('-')
	start := s.i
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		s.i++
	}
	if s.i == start || (s.i-start > 1 && s.b[start] == '0') {
		return false
	}
	if s.lit('.') {
		f := s.i
		for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
			s.i++
		}
		if s.i == f {
			return false
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		if !s.lit('+') {
			s.lit('-')
		}
		f := s.i
		for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
			s.i++
		}
		if s.i == f {
			return false
		}
	}
	return true
}

// extra reads the "extra" object: each member's raw value, as
// json.RawMessage holds it (the bytes as written).
func (s *scanner) extra() (map[string]json.RawMessage, bool) {
	if !s.lit('{') {
		return nil, false
	}
	m := map[string]json.RawMessage{}
	s.ws()
	if s.lit('}') {
		return m, true
	}
	for {
		s.ws()
		raw, esc, ok := s.str()
		if !ok {
			return nil, false
		}
		k := string(raw)
		if esc {
			if k, ok = unescape(raw); !ok {
				return nil, false
			}
		}
		s.ws()
		if !s.lit(':') {
			return nil, false
		}
		s.ws()
		start := s.i
		if !s.skip(0) {
			return nil, false
		}
		m[k] = append(json.RawMessage(nil), s.b[start:s.i]...)
		s.ws()
		if s.lit(',') {
			continue
		}
		if !s.lit('}') {
			return nil, false
		}
		return m, true
	}
}
