package history

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// The token grammar of the Fencing API v1, the one grammar of the project:
// the server, the client, the conformance preflight and the checkers all read
// tokens through ParseToken.
//
//	token  = number [ "." seal ]
//	number = "0" / %x31-39 *19DIGIT      ; canonical decimal uint64, no sign, no leading zeros
//	seal   = 1*256( ALPHA / DIGIT / "-" / "_" )
//
// Only the number orders tokens. The grammar is canonical on purpose: one
// number has exactly one spelling, so histories can compare tokens as strings
// and a garbled header can never be read as a different valid number by one
// side and rejected by the other.

// ErrMalformedToken: a token that does not match the grammar (the resource
// answers 400).
var ErrMalformedToken = errors.New("malformed token")

// MaxSealLen bounds the opaque seal of other implementations; the
// reference's is 64 hex characters.
const MaxSealLen = 256

// TokenState says what kind of token an operation carried.
type TokenState uint8

const (
	// TokenNone: no token (header absent or empty).
	TokenNone TokenState = iota
	// TokenValid: matches the grammar.
	TokenValid
	// TokenMalformed: anything else.
	TokenMalformed
)

// Token is a parsed fencing token. Only N orders tokens.
type Token struct {
	N     uint64
	Seal  string
	State TokenState
	// Raw is the spelling as sent or received ("" for TokenNone).
	Raw string
}

// ParseToken reads s by the grammar above; "" is TokenNone.
func ParseToken(s string) Token {
	if s == "" {
		return Token{State: TokenNone}
	}
	n, seal, err := splitToken(s)
	if err != nil {
		return Token{State: TokenMalformed, Raw: s}
	}
	return Token{N: n, Seal: seal, State: TokenValid, Raw: s}
}

// SplitToken splits a token into its number and its seal ("" when unsealed),
// or returns ErrMalformedToken.
func SplitToken(s string) (n uint64, seal string, err error) { return splitToken(s) }

func splitToken(s string) (uint64, string, error) {
	num, seal, sealed := strings.Cut(s, ".")
	if sealed && !validSeal(seal) {
		return 0, "", ErrMalformedToken
	}
	if num == "" || len(num) > 20 || (len(num) > 1 && num[0] == '0') {
		return 0, "", ErrMalformedToken
	}
	for i := 0; i < len(num); i++ {
		if num[i] < '0' || num[i] > '9' {
			return 0, "", ErrMalformedToken
		}
	}
	n, err := strconv.ParseUint(num, 10, 64)
	if err != nil {
		return 0, "", ErrMalformedToken
	}
	return n, seal, nil
}

func validSeal(s string) bool {
	if s == "" || len(s) > MaxSealLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// FormatToken is the unsealed spelling of n.
func FormatToken(n uint64) string { return strconv.FormatUint(n, 10) }

func (t Token) String() string {
	switch t.State {
	case TokenNone:
		return "no token"
	case TokenMalformed:
		return fmt.Sprintf("malformed token %q", t.Raw)
	}
	return FormatToken(t.N)
}
