// Package ports picks the loopback ports that a run's nodes keep across
// restarts.
//
// A node that is killed and started again must listen on the same port
// (clients hold their endpoint for the whole run). A port from the kernel's
// ephemeral range (what listening on port 0 gives) is unsafe for that:
// while the node is down, any outgoing connection on the machine may get it
// as its source port, and the node then cannot start ("address already in
// use"; seen in CI, where a PostgreSQL container stayed down for the rest of
// its run). Ports below the ephemeral range are never handed out that way.
package ports

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// floor is the lowest port Stable picks: above the well-known and most
// registered service ports.
const floor = 10000

// A port Stable hands out is reserved for the rest of the process's life:
// its node gives it up at every restart, and until it listens again any
// other listener may take it. Another run on the machine did (a container
// published on it: the memory reference then could not start, and a valid
// run of a matrix with two runs at a time ended unknown), and so could
// another node of the same run. The reservation is a lock file per port
// under LockDir, held (flock) while this process lives: the kernel lets it
// go when the process ends, however it ends.
var (
	mu   sync.Mutex
	held = map[int]*os.File{}
)

// LockDir holds the ports' lock files: empty files, one per port ever
// reserved (at most the ~27,000 ports outside the ephemeral range), left in
// place, since a lock is the open descriptor, not the file.
var LockDir = filepath.Join(os.TempDir(), "fencecheck-ports")

// Stable returns a loopback TCP port that nothing listens on and that the
// kernel does not hand out to outgoing connections.
func Stable() (int, error) {
	lo, hi := ephemeralRange()
	var pool [][2]int // [first, last] ranges outside the ephemeral range
	if lo-1 >= floor+1000 {
		pool = append(pool, [2]int{floor, lo - 1})
	}
	if hi+1 <= 65535-1000 {
		pool = append(pool, [2]int{hi + 1, 65535})
	}
	for try := 0; try < 100 && len(pool) > 0; try++ {
		r := pool[rand.IntN(len(pool))]
		p := r[0] + rand.IntN(r[1]-r[0]+1)
		if !reserve(p) {
			continue
		}
		if free(p) {
			return p, nil
		}
		release(p)
	}
	// The ephemeral range covers nearly every port (an unusual setting):
	// the kernel's pick is the best there is.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("no free loopback port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// reserve takes port for this process unless this process or another
// holds it. Where lock files cannot be made, only this process's own
// reservations are kept.
func reserve(port int) bool {
	mu.Lock()
	defer mu.Unlock()
	if _, taken := held[port]; taken {
		return false
	}
	held[port] = nil
	if err := os.MkdirAll(LockDir, 0o777); err != nil {
		return true
	}
	os.Chmod(LockDir, 0o777|os.ModeSticky) // runs of other users share it
	f, err := os.OpenFile(filepath.Join(LockDir, strconv.Itoa(port)), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return true
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		delete(held, port)
		return false
	}
	held[port] = f
	return true
}

// release gives up a reservation that found the port in use.
func release(port int) {
	mu.Lock()
	defer mu.Unlock()
	if f := held[port]; f != nil {
		f.Close() // the lock goes with the descriptor
	}
	delete(held, port)
}

func free(port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// ephemeralRange is the kernel's range of source ports for outgoing
// connections (Linux's default when it cannot be read).
func ephemeralRange() (lo, hi int) {
	lo, hi = 32768, 60999
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return lo, hi
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return lo, hi
	}
	l, err1 := strconv.Atoi(f[0])
	h, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil || l > h {
		return lo, hi
	}
	return l, h
}

// InEphemeralRange says whether the kernel may hand port out to an
// outgoing connection.
func InEphemeralRange(port int) bool {
	lo, hi := ephemeralRange()
	return port >= lo && port <= hi
}
