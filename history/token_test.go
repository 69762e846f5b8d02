package history

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseToken(t *testing.T) {
	for _, s := range []string{"0", "1", "42", "18446744073709551615", "42.abc", "42.A-_z"} {
		_, _, err := SplitToken(s)
		assert.NoError(t, err, s)
	}
	for _, s := range []string{"", "-1", "+1", "01", "1.", ".5", "1.a.b", "1 ", " 1", "0x10", "18446744073709551616", "1.a b"} {
		_, _, err := SplitToken(s)
		assert.ErrorIs(t, err, ErrMalformedToken, s)
	}
	n, seal, err := SplitToken("42.9f")
	require.NoError(t, err)
	assert.Equal(t, uint64(42), n)
	assert.Equal(t, "9f", seal)
}

// The checkers read tokens by the same grammar: a spelling the resource must
// reject as malformed is never read as its number.
func TestParseTokenStates(t *testing.T) {
	assert.Equal(t, TokenNone, ParseToken("").State)
	for _, s := range []string{"007", "1.", "1.a b", "-1", "18446744073709551616"} {
		tok := ParseToken(s)
		assert.Equal(t, TokenMalformed, tok.State, s)
		assert.Equal(t, s, tok.Raw)
	}
	tok := ParseToken("42.9f")
	assert.Equal(t, Token{N: 42, Seal: "9f", State: TokenValid, Raw: "42.9f"}, tok)
}
