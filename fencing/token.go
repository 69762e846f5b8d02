package fencing

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"

	"github.com/fencecheck/fencecheck/history"
)

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
	m.Write([]byte(history.FormatToken(n)))
	return m.Sum(nil)
}

// Seal returns n's sealed spelling "N.HEXHMAC".
func (s *Sealer) Seal(n uint64) string {
	return history.FormatToken(n) + "." + hex.EncodeToString(s.mac(n))
}

// Verify reports whether seal is the right seal for n (constant time).
func (s *Sealer) Verify(n uint64, seal string) bool {
	got, err := hex.DecodeString(seal)
	if err != nil {
		return false
	}
	return hmac.Equal(got, s.mac(n))
}
