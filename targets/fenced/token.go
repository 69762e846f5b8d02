package fenced

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
)

// Token grammar (Fencing API v1):
//
//	token  = number [ "." seal ]
//	number = "0" / %x31-39 *19DIGIT      ; canonical decimal uint64, no sign, no leading zeros
//	seal   = 1*256( ALPHA / DIGIT / "-" / "_" )
//
// Only the number orders tokens. The grammar is canonical on purpose: one
// number has exactly one spelling, so histories can compare tokens as strings
// and a garbled header can never be read as a different valid number by one
// side and rejected by the other.

// ErrMalformedToken: the token does not match the grammar (400).
var ErrMalformedToken = errors.New("malformed token")

// maxSealLen bounds the opaque seal of other implementations; ours is 64 hex
// characters.
const maxSealLen = 256

// ParseToken splits a token into its number and its seal ("" when unsealed).
func ParseToken(s string) (n uint64, seal string, err error) {
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
	n, err = strconv.ParseUint(num, 10, 64)
	if err != nil {
		return 0, "", ErrMalformedToken
	}
	return n, seal, nil
}

func validSeal(s string) bool {
	if s == "" || len(s) > maxSealLen {
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

// Sealer authenticates tokens: the seal is the lowercase hex HMAC-SHA256,
// under a shared key, of the token's decimal number. A resource that knows
// the key rejects numbers no issuer signed (a forged or guessed token).
type Sealer struct{ key []byte }

// NewSealer returns a Sealer for key, or nil when key is empty (no sealing).
func NewSealer(key []byte) *Sealer {
	if len(key) == 0 {
		return nil
	}
	return &Sealer{key: append([]byte(nil), key...)}
}

func (s *Sealer) mac(n uint64) []byte {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte(FormatToken(n)))
	return m.Sum(nil)
}

// Seal returns n's sealed spelling "N.HEXHMAC".
func (s *Sealer) Seal(n uint64) string {
	return FormatToken(n) + "." + hex.EncodeToString(s.mac(n))
}

// Verify reports whether seal is the right seal for n (constant time).
func (s *Sealer) Verify(n uint64, seal string) bool {
	got, err := hex.DecodeString(seal)
	if err != nil {
		return false
	}
	return hmac.Equal(got, s.mac(n))
}
