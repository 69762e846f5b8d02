package netcut

import (
	"bufio"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// received sends n datagrams from inside namespace ns to addr (a listener
// of countDatagrams) and says how many the listener got.
func received(t *testing.T, ns int, addr string, got *atomic.Int64, n int) int {
	t.Helper()
	before := got.Load()
	var err error
	inThread(func() {
		if err = unix.Setns(ns, unix.CLONE_NEWNET); err != nil {
			return
		}
		var c net.Conn
		if c, err = net.Dial("udp", addr); err != nil {
			return
		}
		defer c.Close()
		for i := range n {
			if _, err = c.Write([]byte("x")); err != nil {
				// A dropped datagram is a send error (EPERM) on the
				// output hook: lost as a netem loss would lose it.
				err = nil
			}
			if i%100 == 99 {
				// Paced, so the listener's buffer never overflows.
				time.Sleep(2 * time.Millisecond)
			}
		}
	})
	require.NoError(t, err)
	time.Sleep(100 * time.Millisecond)
	return int(got.Load() - before)
}

// countDatagrams listens for UDP on addr inside ns and counts what arrives.
func countDatagrams(t *testing.T, ns int, addr string) (string, *atomic.Int64) {
	t.Helper()
	var pc net.PacketConn
	var err error
	inThread(func() {
		if err = unix.Setns(ns, unix.CLONE_NEWNET); err == nil {
			pc, err = net.ListenPacket("udp", addr)
		}
	})
	require.NoError(t, err)
	t.Cleanup(func() { pc.Close() })
	var got atomic.Int64
	go func() {
		buf := make([]byte, 64)
		for {
			if _, _, err := pc.ReadFrom(buf); err != nil {
				return
			}
			got.Add(1)
		}
	}()
	return pc.LocalAddr().String(), &got
}

// The loss measured from the other side: of 2000 datagrams sent to a lossy
// peer, the peer's socket receives about (100-P) %, those to another
// address all arrive, and the heal brings the rate back and leaves no table.
func TestSetLossLosesItsShare(t *testing.T) {
	ns := newNetNS(t)
	conn, err := nftables.New(nftables.WithNetNSFd(ns))
	require.NoError(t, err)
	t.Cleanup(func() { SetLossIn(conn, LossTable, Loss{}) })
	lossy, got := countDatagrams(t, ns, "127.0.0.2:0")
	other, gotOther := countDatagrams(t, ns, "127.0.0.1:0")
	const n = 2000
	require.Equal(t, n, received(t, ns, lossy, got, n), "no loss before the fault")

	peers, err := ParsePeers([]string{"127.0.0.2"})
	require.NoError(t, err)
	require.NoError(t, SetLossIn(conn, LossTable, Loss{Peers: peers, Percent: 30}))
	l, err := LossOf(conn, LossTable)
	require.NoError(t, err)
	assert.Equal(t, Loss{Peers: []netip.Addr{netip.MustParseAddr("127.0.0.2")}, Percent: 30}, l)
	// A partition's table is another table: its heal leaves the loss on.
	require.NoError(t, SetCutIn(conn, Table, Cut{}))

	arrived := received(t, ns, lossy, got, n)
	t.Logf("30%% loss: %d of %d datagrams arrived (%.1f%% lost)", arrived, n, 100*float64(n-arrived)/n)
	// 30 % of 2000: 600 lost, standard deviation about 20; 5 sigma each way.
	assert.InDelta(t, n*70/100, arrived, 100, "about 70 %% arrive")
	assert.Equal(t, n, received(t, ns, other, gotOther, n), "another address loses nothing")

	require.NoError(t, SetLossIn(conn, LossTable, Loss{Peers: peers, Percent: 50}))
	arrived = received(t, ns, lossy, got, n)
	t.Logf("50%% loss: %d of %d datagrams arrived", arrived, n)
	assert.InDelta(t, n/2, arrived, 120, "about half arrive")

	require.NoError(t, SetLossIn(conn, LossTable, Loss{}))
	assert.Equal(t, n, received(t, ns, lossy, got, n), "the heal brings every datagram back")
	l, err = LossOf(conn, LossTable)
	require.NoError(t, err)
	assert.Equal(t, Loss{}, l, "no table left")
}

func TestSetLossRefusesAShareOverAHundred(t *testing.T) {
	ns := newNetNS(t)
	conn, err := nftables.New(nftables.WithNetNSFd(ns))
	require.NoError(t, err)
	assert.Error(t, SetLossIn(conn, LossTable, Loss{Peers: []netip.Addr{netip.MustParseAddr("10.0.0.1")}, Percent: 101}))
}

func TestServeLose(t *testing.T) {
	ns := newNetNS(t)
	conn, err := nftables.New(nftables.WithNetNSFd(ns))
	require.NoError(t, err)
	pr, pw := io.Pipe()
	out, ow := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- Serve(pr, ow, conn); ow.Close() }()
	lines := bufio.NewScanner(out)
	ask := func(cmd string) string {
		t.Helper()
		_, err := io.WriteString(pw, cmd+"\n")
		require.NoError(t, err)
		require.True(t, lines.Scan(), "no answer to %q", cmd)
		return lines.Text()
	}
	assert.Equal(t, "ok "+LossCounts(2, 25), ask(LossCommand(25, []string{"10.213.0.12", "10.213.0.11"})))
	assert.Equal(t, "ok dropping=1", ask("drop 10.213.0.13"))
	assert.True(t, strings.HasPrefix(ask("lose 200 10.213.0.12"), "error \"200\" is not a percentage"))
	assert.Equal(t, "ok "+DupCounts(1, 10), ask(DupCommand(10, []string{"10.213.0.12"})))
	assert.Equal(t, "ok duplicating=1 percent=10", "ok "+DupCounts(1, 10))
	assert.True(t, strings.HasPrefix(ask("lose 20 nowhere"), "error peer"))
	l, err := LossOf(conn, LossTable)
	require.NoError(t, err)
	assert.Equal(t, 25, l.Percent, "a bad command changes nothing")
	assert.Len(t, l.Peers, 2)
	// The harness goes away: the helper heals the loss too.
	require.NoError(t, pw.Close())
	require.NoError(t, <-done)
	l, err = LossOf(conn, LossTable)
	require.NoError(t, err)
	assert.Equal(t, Loss{}, l)
	tables, err := conn.ListTablesOfFamily(nftables.TableFamilyIPv4)
	require.NoError(t, err)
	assert.Empty(t, tables, "the duplication healed too")
}
