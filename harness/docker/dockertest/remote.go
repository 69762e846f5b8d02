package dockertest

import (
	"io"
	"net"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/fencecheck/fencecheck/harness/docker"
)

// Remote makes the engine look remote for the rest of the test, the way
// Docker Desktop, a rootless engine or a DOCKER_HOST elsewhere looks to
// fencecheck: DOCKER_HOST points at a TCP proxy on loopback that forwards
// to the engine's unix socket, and container faults are forced through the
// engine's API (docker.FaultPathEnv=api), since this machine could still
// see the containers' processes. Conns counts the connections the proxy
// forwarded: proof that the test's traffic went through it.
type Remote struct {
	Host  string // the DOCKER_HOST value, tcp://127.0.0.1:PORT
	conns atomic.Int64
}

// Conns is how many connections the proxy forwarded so far.
func (r *Remote) Conns() int64 { return r.conns.Load() }

// UseRemote starts the proxy and sets the environment (restored when the
// test ends, as t.Setenv does; not for parallel tests).
func UseRemote(t testing.TB) *Remote {
	t.Helper()
	Require(t)
	socket := "/var/run/docker.sock"
	if h := os.Getenv("DOCKER_HOST"); h != "" {
		u, err := url.Parse(h)
		if err != nil || u.Scheme != "unix" {
			t.Fatalf("the engine proxy forwards to a unix socket; DOCKER_HOST is %q", h)
		}
		socket = u.Path
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("engine proxy: %v", err)
	}
	r := &Remote{Host: "tcp://" + l.Addr().String()}
	var wg sync.WaitGroup
	var mu sync.Mutex
	open := map[net.Conn]bool{}
	track := func(c net.Conn, on bool) {
		mu.Lock()
		defer mu.Unlock()
		if on {
			open[c] = true
		} else {
			delete(open, c)
		}
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			r.conns.Add(1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				e, err := net.Dial("unix", socket)
				if err != nil {
					return
				}
				defer e.Close()
				track(c, true)
				track(e, true)
				defer track(c, false)
				defer track(e, false)
				done := make(chan struct{}, 2)
				// Each direction ends on its own (a hijacked attach
				// stream half-closes stdin and keeps reading).
				go func() { io.Copy(e, c); closeWrite(e); done <- struct{}{} }()
				go func() { io.Copy(c, e); closeWrite(c); done <- struct{}{} }()
				<-done
				<-done
			}()
		}
	}()
	t.Setenv("DOCKER_HOST", r.Host)
	t.Setenv(docker.FaultPathEnv, docker.PathAPI)
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for c := range open {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return r
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
}
