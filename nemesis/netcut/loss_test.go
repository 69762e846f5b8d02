package netcut

import (
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// received sends n datagrams from inside namespace ns to addr (a listener
// of countDatagrams) and says how many the listener got.
func received(t *testing.T, ns int, addr string, got *atomic.Int64, n int) int {
	t.Helper()
	before := got.Load()
	inNS(t, ns, func() error {
		c, err := net.Dial("udp", addr)
		if err != nil {
			return err
		}
		defer c.Close()
		for i := range n {
			// A dropped datagram is a send error (EPERM) on the output
			// hook: lost as a netem loss would lose it.
			_, _ = c.Write([]byte("x"))
			if i%100 == 99 {
				// Paced, so the listener's buffer never overflows.
				time.Sleep(2 * time.Millisecond)
			}
		}
		return nil
	})
	time.Sleep(100 * time.Millisecond)
	return int(got.Load() - before)
}

// countDatagrams listens for UDP on addr inside ns and counts what arrives.
func countDatagrams(t *testing.T, ns int, addr string) (string, *atomic.Int64) {
	t.Helper()
	pc := packetConnIn(t, ns, addr)
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
	ask, quit := askServe(t, conn)
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
	require.NoError(t, quit())
	l, err = LossOf(conn, LossTable)
	require.NoError(t, err)
	assert.Equal(t, Loss{}, l)
	tables, err := conn.ListTablesOfFamily(nftables.TableFamilyIPv4)
	require.NoError(t, err)
	assert.Empty(t, tables, "the duplication healed too")
}
