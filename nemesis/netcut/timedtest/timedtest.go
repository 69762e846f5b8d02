// Package timedtest measures a link from its receiving side, for the tests
// of link delays: datagrams that carry their sequence number and send time
// (Send), and what a socket saw of them (Receive, Arrivals.Stats).
package timedtest

import (
	"encoding/binary"
	"net"
	"slices"
	"sync"
	"time"
)

// Arrivals is what a receiving socket saw: each datagram's one-way time
// (its send time is in it) and its sequence number, in arrival order.
type Arrivals struct {
	mu    sync.Mutex
	took  []time.Duration
	order []uint32
}

// Receive records what pc receives until it is closed.
func Receive(pc net.PacketConn) *Arrivals {
	a := &Arrivals{}
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
			a.mu.Lock()
			a.took = append(a.took, time.Since(sent))
			a.order = append(a.order, binary.BigEndian.Uint32(buf))
			a.mu.Unlock()
		}
	}()
	return a
}

// Reset forgets what arrived so far.
func (a *Arrivals) Reset() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.took, a.order = nil, nil
}

// Stats: the median one-way time, the spread (90th minus 10th percentile),
// how many arrived, and how many arrived after a later-sent one.
func (a *Arrivals) Stats() (median, spread time.Duration, n, reordered int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	took := slices.Clone(a.took)
	slices.Sort(took)
	if len(took) == 0 {
		return 0, 0, 0, 0
	}
	var highest uint32
	for i, s := range a.order {
		if i > 0 && s < highest {
			reordered++
		}
		highest = max(highest, s)
	}
	return took[len(took)/2], took[len(took)*9/10] - took[len(took)/10], len(took), reordered
}

// Send writes n datagrams to c, gap apart, each with its sequence number
// and send time.
func Send(c net.Conn, n int, gap time.Duration) {
	buf := make([]byte, 12)
	for i := range n {
		binary.BigEndian.PutUint32(buf, uint32(i))
		binary.BigEndian.PutUint64(buf[4:], uint64(time.Now().UnixNano()))
		_, _ = c.Write(buf)
		time.Sleep(gap)
	}
}
