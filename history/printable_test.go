package history

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestPrintableEscapesWhatATerminalWouldObey(t *testing.T) {
	for in, want := range map[string]string{
		"plain value c3-17":           "plain value c3-17",
		"ünïcödé ok":                  "ünïcödé ok",
		"\x1b[2J\x1b[H cleared":       `\x1b[2J\x1b[H cleared`,
		"\x1b]0;owned\x07 title":      `\x1b]0;owned\x07 title`,
		"two\nlines\r\tx\x7f":         `two\nlines\r\tx\x7f`,
		"c1 \u009b31m csi":            `c1 \u009b31m csi`,
		"bidi \u202egnp.exe":          `bidi \u202egnp.exe`,
		"bad utf8 \xff\xfe":           `bad utf8 \xff\xfe`,
		"a real \uFFFD stays visible": "a real \uFFFD stays visible", // only a bad byte is escaped
	} {
		assert.Equal(t, want, Printable(in), "%q", in)
	}
	assert.Equal(t, "line 1\nline \\x1b[31m2\n", PrintableLines("line 1\nline \x1b[31m2\n"))
	var buf bytes.Buffer
	fmt.Fprintf(NewPrintableWriter(&buf), "verdict: %s\n", "valid\x1b[2J")
	assert.Equal(t, "verdict: valid\\x1b[2J\n", buf.String())
}
