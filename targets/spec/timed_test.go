package spec

import (
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/fencecheck/fencecheck/harness/docker"
	"github.com/fencecheck/fencecheck/nemesis/netcut/timedtest"
)

// timedCounter listens for timed datagrams in a node's namespace: the
// receiving side's view of a delayed link.
type timedCounter struct {
	addr string
	*timedtest.Arrivals
}

func timedAt(t *testing.T, rt *docker.Runtime, node, ip string) *timedCounter {
	t.Helper()
	var pc net.PacketConn
	inNamespaceOf(t, rt, node, func() (err error) {
		pc, err = net.ListenPacket("udp4", net.JoinHostPort(ip, "0"))
		return err
	})
	t.Cleanup(func() { pc.Close() })
	return &timedCounter{addr: pc.LocalAddr().String(), Arrivals: timedtest.Receive(pc)}
}

// sendTimedFrom sends n timed datagrams, gap apart, from node's namespace
// to addr.
func sendTimedFrom(t *testing.T, rt *docker.Runtime, node, addr string, n int, gap time.Duration) {
	t.Helper()
	inNamespaceOf(t, rt, node, func() error {
		conn, err := net.Dial("udp4", addr)
		if err != nil {
			return err
		}
		defer conn.Close()
		timedtest.Send(conn, n, gap)
		return nil
	})
}

// assertHeld100ms40 asserts that a link held 100 ms ± 40 ms took effect: the
// median is at least the mean less a margin, the jitter spread the times
// (a plain delay's p10-p90 spread is a few ms) and reordered a quarter of
// them. The upper bounds are loose on purpose: a loaded machine adds its own
// scheduling delay on top of the delayer's, which says nothing of the fault.
func assertHeld100ms40(t *testing.T, median, spread time.Duration, reordered, sent int, what string) {
	t.Helper()
	assert.GreaterOrEqual(t, median, 80*time.Millisecond, "%s: delayed by the mean", what)
	assert.Less(t, median, 250*time.Millisecond, "%s: not stuck", what)
	assert.GreaterOrEqual(t, spread, 30*time.Millisecond, "%s: the jitter spreads the times", what)
	assert.Less(t, spread, 400*time.Millisecond, "%s", what)
	assert.Greater(t, reordered, sent/4, "%s: the jitter reorders", what)
}
