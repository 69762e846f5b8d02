package reports

import (
	"bufio"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The report server sets every timeout: an idle keep-alive connection, or
// one whose request never arrives, is closed by the server rather than held
// for ever (the 3000 held connections).
func TestServeClosesIdleAndSlowConnections(t *testing.T) {
	hs := NewHTTPServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) }))
	assert.Positive(t, hs.ReadHeaderTimeout)
	assert.Positive(t, hs.ReadTimeout)
	assert.Positive(t, hs.WriteTimeout)
	assert.Positive(t, hs.IdleTimeout)
	assert.LessOrEqual(t, hs.IdleTimeout, time.Minute)

	// The same server with its timeouts shortened, to see them act.
	hs.IdleTimeout, hs.ReadHeaderTimeout = 300*time.Millisecond, 300*time.Millisecond
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go hs.Serve(ln)
	defer hs.Close()

	closedWithin := func(c net.Conn, limit time.Duration) bool {
		c.SetReadDeadline(time.Now().Add(limit))
		_, err := bufio.NewReader(c).ReadByte()
		for err == nil {
			_, err = c.Read(make([]byte, 4096))
		}
		ne, timeout := err.(net.Error)
		return !(timeout && ne.Timeout())
	}
	idle, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer idle.Close()
	_, err = idle.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
	require.NoError(t, err)
	assert.True(t, closedWithin(idle, 5*time.Second), "an idle keep-alive connection must be closed")

	slow, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer slow.Close()
	_, err = slow.Write([]byte("GET / HTTP/1.1\r\n"))
	require.NoError(t, err)
	assert.True(t, closedWithin(slow, 5*time.Second), "a request whose headers never end must be cut off")
}
