package netcut

import (
	"bufio"
	"io"
	"net"
	"net/netip"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/fencecheck/fencecheck/nemesis/netcut/timedtest"
)

func timedListener(t *testing.T, ns int, addr string) (string, *timedtest.Arrivals) {
	t.Helper()
	pc := packetConnIn(t, ns, addr)
	return pc.LocalAddr().String(), timedtest.Receive(pc)
}

// sendTimed sends n timed datagrams, gap apart, from inside ns to addr.
func sendTimed(t *testing.T, ns int, addr string, n int, gap time.Duration) {
	t.Helper()
	inNS(t, ns, func() error {
		c, err := net.Dial("udp", addr)
		if err != nil {
			return err
		}
		defer c.Close()
		timedtest.Send(c, n, gap)
		return nil
	})
}

// The delay measured from the receiving socket: with 100 ms ± 40 ms on the
// link, the median one-way time is about 100 ms, its spread about 64 ms
// (the 10th to the 90th percentile of a uniform ±40), datagrams sent 2 ms
// apart arrive out of order, none is lost; another address is not
// delayed; after the heal the link is fast and in order again.
func TestDelayHoldsPacketsForTheDelayWithJitter(t *testing.T) {
	ns := newNetNS(t)
	conn, err := nftables.New(nftables.WithNetNSFd(ns))
	require.NoError(t, err)
	t.Cleanup(func() { SetDelayIn(conn, DelayTable, Delay{}) })
	slow, at := timedListener(t, ns, "127.0.0.2:0")
	fast, atOther := timedListener(t, ns, "127.0.0.1:0")
	const n = 300
	sendTimed(t, ns, slow, n, 2*time.Millisecond)
	time.Sleep(50 * time.Millisecond)
	before, _, got, reordered := at.Stats()
	require.Equal(t, n, got)
	require.Less(t, before, 5*time.Millisecond)
	require.Zero(t, reordered)

	d, err := NewDelayer(ns, 100*time.Millisecond, 40*time.Millisecond, 1)
	require.NoError(t, err)
	t.Cleanup(func() { d.Close() })
	require.NoError(t, SetDelayIn(conn, DelayTable, Delay{Peers: []netip.Addr{netip.MustParseAddr("127.0.0.2")},
		Mean: 100 * time.Millisecond, Jitter: 40 * time.Millisecond}))
	at.Reset()
	sendTimed(t, ns, slow, n, 2*time.Millisecond)
	sendTimed(t, ns, fast, n, time.Millisecond)
	time.Sleep(300 * time.Millisecond)
	median, spread, got, reordered := at.Stats()
	t.Logf("100 ms ± 40 ms: median one-way %v, spread (p10-p90) %v, %d of %d arrived, %d out of order",
		median.Round(time.Millisecond), spread.Round(time.Millisecond), got, n, reordered)
	assert.Equal(t, n, got, "nothing lost")
	assert.InDelta(t, 100, median.Milliseconds(), 15, "about the mean")
	assert.InDelta(t, 64, spread.Milliseconds(), 20, "about the jitter's spread")
	assert.Greater(t, reordered, n/4, "jitter over the gap reorders")
	otherMedian, _, otherGot, _ := atOther.Stats()
	assert.Equal(t, n, otherGot)
	assert.Less(t, otherMedian, 5*time.Millisecond, "another address is not delayed")

	// Packets held when the fault ends are let go at once.
	sendTimed(t, ns, slow, 10, 0)
	assert.Eventually(t, func() bool { return d.Held() > 0 }, 50*time.Millisecond, time.Millisecond)
	require.NoError(t, SetDelayIn(conn, DelayTable, Delay{}))
	require.NoError(t, d.Close())
	assert.Zero(t, d.Held())
	time.Sleep(50 * time.Millisecond)
	at.Reset()
	sendTimed(t, ns, slow, n, time.Millisecond)
	time.Sleep(50 * time.Millisecond)
	median, _, got, reordered = at.Stats()
	assert.Equal(t, n, got)
	assert.Less(t, median, 5*time.Millisecond, "healed")
	assert.Zero(t, reordered)
	tables, err := conn.ListTablesOfFamily(nftables.TableFamilyIPv4)
	require.NoError(t, err)
	assert.Empty(t, tables)
}

// A rule without a delayer (one that died) lets packets pass undelayed.
func TestDelayWithoutADelayerBypasses(t *testing.T) {
	ns := newNetNS(t)
	conn, err := nftables.New(nftables.WithNetNSFd(ns))
	require.NoError(t, err)
	t.Cleanup(func() { SetDelayIn(conn, DelayTable, Delay{}) })
	slow, at := timedListener(t, ns, "127.0.0.2:0")
	require.NoError(t, SetDelayIn(conn, DelayTable, Delay{Peers: []netip.Addr{netip.MustParseAddr("127.0.0.2")}, Mean: time.Second}))
	sendTimed(t, ns, slow, 50, time.Millisecond)
	time.Sleep(50 * time.Millisecond)
	median, _, got, _ := at.Stats()
	assert.Equal(t, 50, got)
	assert.Less(t, median, 5*time.Millisecond)
}

// The helper's delay command: the delay measured from the receiving
// socket, then healed by the end of the commands.
func TestServeDelay(t *testing.T) {
	ns := newNetNS(t)
	conn, err := nftables.New(nftables.WithNetNSFd(ns))
	require.NoError(t, err)
	slow, at := timedListener(t, ns, "127.0.0.2:0")
	pr, pw := io.Pipe()
	out, ow := io.Pipe()
	done := make(chan error, 1)
	// The helper runs in the namespace it joined: here, a thread in ns.
	go func() {
		runtime.LockOSThread()
		if err := unix.Setns(ns, unix.CLONE_NEWNET); err != nil {
			done <- err
			return
		}
		done <- Serve(pr, ow, conn)
		ow.Close()
	}()
	lines := bufio.NewScanner(out)
	ask := func(cmd string) string {
		t.Helper()
		_, err := io.WriteString(pw, cmd+"\n")
		require.NoError(t, err)
		require.True(t, lines.Scan(), "no answer to %q", cmd)
		return lines.Text()
	}
	assert.True(t, strings.HasPrefix(ask("delay 10 20 127.0.0.2"), "error delay"), "jitter over the delay")
	assert.Equal(t, "ok "+DelayCounts(1, 80*time.Millisecond, 0), ask(DelayCommand(80*time.Millisecond, 0, []string{"127.0.0.2"})))
	sendTimed(t, ns, slow, 50, time.Millisecond)
	time.Sleep(150 * time.Millisecond)
	median, _, got, _ := at.Stats()
	assert.Equal(t, 50, got)
	assert.InDelta(t, 80, median.Milliseconds(), 10)
	require.NoError(t, pw.Close())
	require.NoError(t, <-done)
	tables, err := conn.ListTablesOfFamily(nftables.TableFamilyIPv4)
	require.NoError(t, err)
	assert.Empty(t, tables, "healed at the end of the commands")
}
