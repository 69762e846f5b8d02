package spec

import (
	"encoding/binary"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/fencecheck/fencecheck/harness/docker"
)

// timedCounter listens for datagrams in a node's namespace and records,
// for each, its one-way time (its send time is in it) and its sequence
// number, in arrival order: the receiving side's view of a delayed link.
type timedCounter struct {
	addr  string
	mu    sync.Mutex
	took  []time.Duration
	order []uint32
}

func timedAt(t *testing.T, rt *docker.Runtime, node, ip string) *timedCounter {
	t.Helper()
	c := &timedCounter{}
	var pc net.PacketConn
	inNamespaceOf(t, rt, node, func() (err error) {
		pc, err = net.ListenPacket("udp4", net.JoinHostPort(ip, "0"))
		return err
	})
	t.Cleanup(func() { pc.Close() })
	c.addr = pc.LocalAddr().String()
	go func() {
		buf := make([]byte, 64)
		for {
			n, _, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if n < 12 {
				continue
			}
			sent := time.Unix(0, int64(binary.BigEndian.Uint64(buf[4:12])))
			c.mu.Lock()
			c.took = append(c.took, time.Since(sent))
			c.order = append(c.order, binary.BigEndian.Uint32(buf))
			c.mu.Unlock()
		}
	}()
	return c
}

func (c *timedCounter) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.took, c.order = nil, nil
}

// stats: the median one-way time, the spread (90th minus 10th percentile),
// how many arrived, and how many arrived after a later-sent one.
func (c *timedCounter) stats() (median, spread time.Duration, n, reordered int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	took := slices.Clone(c.took)
	slices.Sort(took)
	if len(took) == 0 {
		return 0, 0, 0, 0
	}
	var highest uint32
	for i, s := range c.order {
		if i > 0 && s < highest {
			reordered++
		}
		highest = max(highest, s)
	}
	return took[len(took)/2], took[len(took)*9/10] - took[len(took)/10], len(took), reordered
}

// sendTimedFrom sends n datagrams, gap apart, each with its sequence number
// and send time, from node's namespace to addr.
func sendTimedFrom(t *testing.T, rt *docker.Runtime, node, addr string, n int, gap time.Duration) {
	t.Helper()
	inNamespaceOf(t, rt, node, func() error {
		conn, err := net.Dial("udp4", addr)
		if err != nil {
			return err
		}
		defer conn.Close()
		buf := make([]byte, 12)
		for i := range n {
			binary.BigEndian.PutUint32(buf, uint32(i))
			binary.BigEndian.PutUint64(buf[4:], uint64(time.Now().UnixNano()))
			_, _ = conn.Write(buf)
			time.Sleep(gap)
		}
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
