package history

import (
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// Printable is s made safe for a terminal: values from the system under test
// (read values, error words, answers' bodies) may hold escape sequences that
// clear the screen, retitle the window or fake output. Every control
// character (C0, DEL, C1), bidirectional override, and byte that is not UTF-8
// is shown escaped, Go-style (\x1b, \u202e); the rest is kept. Newlines are
// escaped too: a value is one line. It is the one escaping of terminal
// output: the summary, anomaly lines, log and progress lines all go through
// it (PrintableLines, NewPrintableWriter).
func Printable(s string) string { return printable(s, false) }

// PrintableLines is Printable that keeps newlines (multi-line messages such
// as a log's last lines).
func PrintableLines(s string) string { return printable(s, true) }

func printable(s string, keepNewlines bool) string {
	if isPrintable(s, keepNewlines) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\n' && keepNewlines:
			b.WriteByte('\n')
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		case unsafeRune(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

func isPrintable(s string, keepNewlines bool) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 && !(c == '\n' && keepNewlines) || c == 0x7f {
			return false
		}
		if c >= 0x80 {
			// Slow path for non-ASCII: C1 controls, overrides, bad bytes.
			for _, r := range s[i:] {
				if r == utf8.RuneError || unsafeRune(r) {
					return false
				}
			}
			return true
		}
	}
	return true
}

// unsafeRune: C1 controls (ESC's 8-bit forms) and the bidirectional
// embeddings, overrides and isolates, which reorder the text around them.
func unsafeRune(r rune) bool {
	return r >= 0x80 && r <= 0x9f || r >= 0x202a && r <= 0x202e || r >= 0x2066 && r <= 0x2069 || r == 0x200e || r == 0x200f
}

// NewPrintableWriter writes to w what it is given with PrintableLines
// applied to each write: for text whose every write is whole lines or
// parts of one (fmt.Fprintf calls), such as the summary and the log.
func NewPrintableWriter(w io.Writer) io.Writer { return printableWriter{w} }

type printableWriter struct{ w io.Writer }

func (p printableWriter) Write(b []byte) (int, error) {
	if _, err := io.WriteString(p.w, PrintableLines(string(b))); err != nil {
		return 0, err
	}
	return len(b), nil
}
