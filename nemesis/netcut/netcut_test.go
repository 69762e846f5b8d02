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
	assert.Equal(t, "ok dropping=", ask("status"))
	assert.Equal(t, "ok dropping=2", ask("drop 10.213.0.12 10.213.0.11"))
	assert.Equal(t, "ok dropping=10.213.0.11,10.213.0.12", ask("status"))
	assert.Equal(t, "ok dropping=1", ask("drop 10.213.0.13"))
	assert.True(t, strings.HasPrefix(ask("drop nowhere"), "error peer"))
	assert.Equal(t, "ok dropping=10.213.0.13", ask("status"), "a bad command changes nothing")
	assert.True(t, strings.HasPrefix(ask("cut 1.2.3.4"), "error unknown command"))
	// The harness goes away: the helper heals before it returns.
	require.NoError(t, pw.Close())
	require.NoError(t, <-done)
	got, err := Dropping(conn)
	require.NoError(t, err)
	assert.Empty(t, got)
}
