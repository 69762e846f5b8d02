package ports

import (
	"net"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every port Stable gives is free to listen on and outside the range the
// kernel picks source ports from.
func TestStablePortsAreFreeAndNotEphemeral(t *testing.T) {
	lo, hi := ephemeralRange()
	require.Less(t, lo, hi)
	for i := 0; i < 50; i++ {
		p, err := Stable()
		require.NoError(t, err)
		assert.False(t, InEphemeralRange(p), "port %d is in the ephemeral range %d-%d", p, lo, hi)
		assert.GreaterOrEqual(t, p, floor)
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		require.NoError(t, err, "port %d", p)
		l.Close()
	}
}

// A port something listens on is not taken as free.
func TestAPortInUseIsNotFree(t *testing.T) {
	p, err := Stable()
	require.NoError(t, err)
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
	require.NoError(t, err)
	defer l.Close()
	assert.False(t, free(p))
}
