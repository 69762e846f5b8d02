package ports

import (
	"bufio"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every port Stable gives is free to listen on and outside the range the
// kernel picks source ports from.
func TestStablePortsAreFreeAndNotEphemeral(t *testing.T) {
	lo, hi := ephemeralRange()
	require.Less(t, lo, hi)
	for i := 0; i < 50; i++ {
		p, err := Stable()
		require.NoError(t, err)
		assert.False(t, InEphemeralRange(p), "port %d is in the ephemeral range %d-%d", p, lo, hi)
		assert.GreaterOrEqual(t, p, floor)
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		require.NoError(t, err, "port %d", p)
		l.Close()
	}
}

// A port something listens on is not taken as free.
func TestAPortInUseIsNotFree(t *testing.T) {
	p, err := Stable()
	require.NoError(t, err)
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
	require.NoError(t, err)
	defer l.Close()
	assert.False(t, free(p))
}

// A port this process handed out is never handed out again while it lives,
// even while nothing listens on it (its node restarting).
func TestAPortIsHandedOutOnce(t *testing.T) {
	LockDir = t.TempDir()
	seen := map[int]bool{}
	for i := 0; i < 200; i++ {
		p, err := Stable()
		require.NoError(t, err)
		require.False(t, seen[p], "port %d handed out twice", p)
		seen[p] = true
	}
}

// holderEnv names the lock folder of a child that reserves a port for the
// parent's test (TestAPortReservedByAnotherProcess).
const holderEnv = "FENCECHECK_PORTS_TEST_HOLDER"

// TestMain runs as the child of TestAPortReservedByAnotherProcess when
// holderEnv is set: it reserves a port, prints it, and holds it until its
// stdin closes.
func TestMain(m *testing.M) {
	dir := os.Getenv(holderEnv)
	if dir == "" {
		os.Exit(m.Run())
	}
	LockDir = dir
	p, err := Stable()
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	fmt.Printf("port %d\n", p)
	io.Copy(io.Discard, os.Stdin)
	os.Exit(0)
}

// A port another process reserved is not handed out here while that
// process lives (nothing listens on it meanwhile), and is free again once
// it ended: the kernel drops the lock with the process.
func TestAPortReservedByAnotherProcess(t *testing.T) {
	// The other tests' ports are still reserved in this process: the
	// child's pick among them (1 run in about 100) would be taken here for
	// that reason alone, even after the child ended.
	mu.Lock()
	earlier := slices.Collect(maps.Keys(held))
	mu.Unlock()
	for _, p := range earlier {
		release(p)
	}
	LockDir = t.TempDir()
	child := exec.Command(os.Args[0])
	child.Env = append(os.Environ(), holderEnv+"="+LockDir)
	stdin, err := child.StdinPipe()
	require.NoError(t, err)
	out, err := child.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, child.Start())
	var port int
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if _, err := fmt.Sscanf(sc.Text(), "port %d", &port); err == nil {
			break
		}
	}
	require.Positive(t, port, "the child reserved a port")
	assert.True(t, free(port), "nothing listens on it")
	assert.False(t, reserve(port), "held by the child")
	stdin.Close()
	go io.Copy(io.Discard, out)
	require.NoError(t, child.Wait())
	assert.True(t, reserve(port), "the child ended: its lock went with it")
	release(port)
}
