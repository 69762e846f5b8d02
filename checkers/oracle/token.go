package oracle

import (
	"regexp"
	"strconv"
)

// tokenGrammar is the Fencing API v1 token grammar (fencing/PROTOCOL.md,
// "Tokens"), written out again from the protocol rather than taken from
// history.ParseToken, so that the shared parser is tested against it:
//
//	token  = number [ "." seal ]
//	number = "0" / %x31-39 *19DIGIT     ; decimal uint64, canonical
//	seal   = 1*256( ALPHA / DIGIT / "-" / "_" )
var tokenGrammar = regexp.MustCompile(`^(0|[1-9][0-9]{0,19})(\.[A-Za-z0-9_-]{1,256})?$`)

// bareNumber is the grammar of a stale rejection's high_water: "the bare
// number (no seal)".
var bareNumber = regexp.MustCompile(`^(0|[1-9][0-9]{0,19})$`)

type tokenKind uint8

const (
	tokMissing   tokenKind = iota // absent or "": never read as 0
	tokValid                      // matches the grammar
	tokMalformed                  // anything else
)

// token is what the oracle knows of a token: only the number orders tokens,
// and a seal is opaque (the oracle only knows whether there is one).
type token struct {
	kind   tokenKind
	n      uint64
	sealed bool
	raw    string
}

func parseToken(s string) token {
	if s == "" {
		return token{kind: tokMissing}
	}
	m := tokenGrammar.FindStringSubmatch(s)
	if m == nil {
		return token{kind: tokMalformed, raw: s}
	}
	n, err := strconv.ParseUint(m[1], 10, 64)
	if err != nil { // 20 digits above 2^64-1
		return token{kind: tokMalformed, raw: s}
	}
	return token{kind: tokValid, n: n, sealed: m[2] != "", raw: s}
}

// parseHighWater reads a stale rejection's reported mark; ok is false when
// it is not a bare canonical number.
func parseHighWater(s string) (uint64, bool) {
	if !bareNumber.MatchString(s) {
		return 0, false
	}
	n, err := strconv.ParseUint(s, 10, 64)
	return n, err == nil
}
