package netcut

import (
	"bufio"
	"io"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// newNetNS makes a network namespace of the test's own, with its loopback
// up, and returns a handle to it. Only root (CAP_SYS_ADMIN) can.
func newNetNS(t *testing.T) int {
	t.Helper()
	var fd int
	var err error
	inThread(func() {
		// The thread stays locked and dies with its goroutine: it is never
		// reused in the wrong namespace.
		if err = unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return
		}
		if fd, err = unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0); err != nil {
			return
		}
		err = loopbackUp()
	})
	if err != nil {
		if os.Geteuid() != 0 {
			t.Skipf("a network namespace of the test's own needs root: %v", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

// inThread runs fn on a locked thread that exits afterwards.
func inThread(fn func()) {
	done := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		fn()
		close(done)
	}()
	<-done
}

// inNS runs fn on a thread of its own in namespace ns.
func inNS(t *testing.T, ns int, fn func() error) {
	t.Helper()
	var err error
	inThread(func() {
		if err = unix.Setns(ns, unix.CLONE_NEWNET); err == nil {
			err = fn()
		}
	})
	require.NoError(t, err)
}

// packetConnIn listens for UDP on addr inside ns, closed with the test.
func packetConnIn(t *testing.T, ns int, addr string) net.PacketConn {
	t.Helper()
	var pc net.PacketConn
	inNS(t, ns, func() (err error) {
		pc, err = net.ListenPacket("udp", addr)
		return err
	})
	t.Cleanup(func() { pc.Close() })
	return pc
}

// askServe runs Serve on conn as the harness's helper would: ask sends a
// command line and returns the answer; quit closes its input (the harness
// going away) and returns what Serve returned.
func askServe(t *testing.T, conn *nftables.Conn) (ask func(string) string, quit func() error) {
	pr, pw := io.Pipe()
	out, ow := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- Serve(pr, ow, conn); ow.Close() }()
	lines := bufio.NewScanner(out)
	ask = func(cmd string) string {
		t.Helper()
		_, err := io.WriteString(pw, cmd+"\n")
		require.NoError(t, err)
		require.True(t, lines.Scan(), "no answer to %q", cmd)
		return lines.Text()
	}
	quit = func() error {
		require.NoError(t, pw.Close())
		return <-done
	}
	return ask, quit
}

func loopbackUp() error {
	s, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(s)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(s, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(s, unix.SIOCSIFFLAGS, ifr)
}

// reachable dials addr from inside namespace ns.
func reachable(ns int, addr string) bool {
	var err error
	inThread(func() {
		if err = unix.Setns(ns, unix.CLONE_NEWNET); err != nil {
			return
		}
		var c net.Conn
		if c, err = net.DialTimeout("tcp", addr, 300*time.Millisecond); err == nil {
			c.Close()
		}
	})
	return err == nil
}

func listen(t *testing.T, ns int, addr string) string {
	t.Helper()
	var l net.Listener
	var err error
	inThread(func() {
		if err = unix.Setns(ns, unix.CLONE_NEWNET); err == nil {
			l, err = net.Listen("tcp", addr)
		}
	})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return l.Addr().String()
}

// The cut measured from the other side: a connection to a dropped peer
// fails, one to another address of the namespace does not, and the heal
// leaves no table behind.
func TestSetDropsExactlyThePeers(t *testing.T) {
	ns := newNetNS(t)
	conn, err := nftables.New(nftables.WithNetNSFd(ns))
	require.NoError(t, err)
	// Loopback connections leave from 127.0.0.1 whatever they go to, so
	// the peer cut is .2: a connection to it fails, one to .1 does not.
	other := listen(t, ns, "127.0.0.1:0")
	cut := listen(t, ns, "127.0.0.2:0")
	require.True(t, reachable(ns, cut))

	peers, err := ParsePeers([]string{"127.0.0.2", "127.0.0.2"})
	require.NoError(t, err)
	require.NoError(t, Set(conn, peers))
	got, err := Dropping(conn)
	require.NoError(t, err)
	assert.Equal(t, []netip.Addr{netip.MustParseAddr("127.0.0.2")}, got)
	assert.False(t, reachable(ns, cut), "a dropped peer is unreachable")
	assert.True(t, reachable(ns, other), "another address is not")

	// Replacing the set is one change: the old peer is reachable again.
	require.NoError(t, Set(conn, []netip.Addr{netip.MustParseAddr("127.0.0.3")}))
	assert.True(t, reachable(ns, cut))
	got, err = Dropping(conn)
	require.NoError(t, err)
	assert.Equal(t, []netip.Addr{netip.MustParseAddr("127.0.0.3")}, got)

	require.NoError(t, Set(conn, nil))
	got, err = Dropping(conn)
	require.NoError(t, err)
	assert.Empty(t, got)
	tables, err := conn.ListTablesOfFamily(nftables.TableFamilyIPv4)
	require.NoError(t, err)
	assert.Empty(t, tables, "the heal removes the table")
	assert.True(t, reachable(ns, other))
	require.NoError(t, Set(conn, nil), "healing twice is fine")

	_, err = ParsePeers([]string{"fe80::1"})
	assert.ErrorContains(t, err, "only IPv4")
	_, err = ParsePeers([]string{"peer"})
	assert.ErrorContains(t, err, "not an IP address")
}

func TestServe(t *testing.T) {
	ns := newNetNS(t)
	conn, err := nftables.New(nftables.WithNetNSFd(ns))
	require.NoError(t, err)
	ask, quit := askServe(t, conn)
	assert.Equal(t, "ok dropping=", ask("status"))
	assert.Equal(t, "ok dropping=2", ask("drop 10.213.0.12 10.213.0.11"))
	assert.Equal(t, "ok dropping=10.213.0.11,10.213.0.12", ask("status"))
	assert.Equal(t, "ok dropping=1", ask("drop 10.213.0.13"))
	assert.True(t, strings.HasPrefix(ask("drop nowhere"), "error peer"))
	assert.Equal(t, "ok dropping=10.213.0.13", ask("status"), "a bad command changes nothing")
	assert.True(t, strings.HasPrefix(ask("cut 1.2.3.4"), "error unknown command"))
	assert.Equal(t, "ok dropping=1 to=2", ask(Command([]string{"10.213.0.13"}, []string{"10.213.0.14", "10.213.0.15"})))
	assert.Equal(t, "ok dropping=10.213.0.13 to=10.213.0.14,10.213.0.15", ask("status"))
	assert.Equal(t, "ok dropping=0 to=1", ask(Command(nil, []string{"10.213.0.14"})))
	// The harness goes away: the helper heals before it returns.
	require.NoError(t, quit())
	got, err := Dropping(conn)
	require.NoError(t, err)
	assert.Empty(t, got)
}

// echo listens in ns at addr and echoes each connection's bytes back.
func echo(t *testing.T, ns int, addr string) string {
	t.Helper()
	var l net.Listener
	var err error
	inThread(func() {
		if err = unix.Setns(ns, unix.CLONE_NEWNET); err == nil {
			l, err = net.Listen("tcp", addr)
		}
	})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	return l.Addr().String()
}

// dialFrom opens a connection from local to addr inside ns.
func dialFrom(ns int, local, addr string) (net.Conn, error) {
	var c net.Conn
	var err error
	inThread(func() {
		if err = unix.Setns(ns, unix.CLONE_NEWNET); err != nil {
			return
		}
		d := net.Dialer{Timeout: 300 * time.Millisecond, LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}
		c, err = d.Dial("tcp", addr)
	})
	return c, err
}

// roundTrip says whether a byte sent on c comes back within 300 ms.
func roundTrip(c net.Conn) bool {
	_ = c.SetDeadline(time.Now().Add(300 * time.Millisecond))
	if _, err := c.Write([]byte{'x'}); err != nil {
		return false
	}
	b := make([]byte, 1)
	_, err := io.ReadFull(c, b)
	return err == nil
}

// A one-way cut measured from both sides: with .2 and .3 standing for two
// nodes and the cut "cannot reach .3", a connection from .2 to .3 fails
// and one .2 had opened before dies, while .3's connection to .2 opens and
// carries bytes both ways.
func TestSetCutOneWay(t *testing.T) {
	ns := newNetNS(t)
	conn, err := nftables.New(nftables.WithNetNSFd(ns))
	require.NoError(t, err)
	a, b := echo(t, ns, "127.0.0.2:0"), echo(t, ns, "127.0.0.3:0")
	before, err := dialFrom(ns, "127.0.0.2", b)
	require.NoError(t, err)
	defer before.Close()
	require.True(t, roundTrip(before))

	require.NoError(t, SetCutIn(conn, Table, Cut{To: []netip.Addr{netip.MustParseAddr("127.0.0.3")}}))
	got, err := CutIn(conn, Table)
	require.NoError(t, err)
	assert.Equal(t, []netip.Addr{netip.MustParseAddr("127.0.0.3")}, got.To)
	assert.Empty(t, got.Both)

	_, err = dialFrom(ns, "127.0.0.2", b)
	assert.Error(t, err, ".2 cannot open a connection to .3")
	assert.False(t, roundTrip(before), "nor use one it opened before the cut")
	back, err := dialFrom(ns, "127.0.0.3", a)
	require.NoError(t, err, ".3 still opens connections to .2")
	defer back.Close()
	assert.True(t, roundTrip(back), "and .2's answers on it reach .3")

	require.NoError(t, SetCutIn(conn, Table, Cut{}))
	c, err := dialFrom(ns, "127.0.0.2", b)
	require.NoError(t, err, "healed")
	c.Close()
}
