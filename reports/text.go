package reports

import (
	"strings"
	"unicode/utf8"
)

// sanitize makes a string from the system under test safe to carry: invalid
// UTF-8 becomes U+FFFD (html/template, encoding/json and encoding/xml then
// escape the rest). It is the one place the report cleans such strings.
func sanitize(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

// clip sanitizes s and shortens it to at most n runes, marking the cut.
func clip(s string, n int) string {
	s = sanitize(s)
	if len(s) <= n {
		return s
	}
	i := 0
	for j := range s {
		if i == n {
			return s[:j] + "…"
		}
		i++
	}
	return s
}
