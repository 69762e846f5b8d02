package zookeeper

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"
)

// session is one ZooKeeper session: a connection to the ensemble that the
// client library keeps alive with pings, and that the ensemble expires after
// the negotiated timeout without them.
type session struct {
	conn *zk.Conn
	id   int64
	// granted is the session timeout the ensemble answered with: it clamps
	// the timeout asked for to [minSessionTimeout, maxSessionTimeout].
	granted time.Duration
	link    *link
	// expired is closed when the ensemble told the client that the session
	// expired (the library would then open a new session under the same
	// connection; a lock holder's session is closed instead).
	expired     chan struct{}
	expiredOnce sync.Once
	closeOnce   sync.Once
}

// openSession connects to servers and waits (bounded by ctx) until the
// ensemble has granted a session. buf bounds the packets the session can
// send and receive (the library allocates it per connection).
func openSession(ctx context.Context, servers []string, timeout time.Duration, buf int, logw io.Writer) (*session, error) {
	s := &session{link: &link{}, expired: make(chan struct{})}
	ready := make(chan struct{})
	var readyOnce sync.Once
	callback := func(e zk.Event) {
		if e.Type != zk.EventSession {
			return
		}
		switch e.State {
		case zk.StateHasSession:
			readyOnce.Do(func() { close(ready) })
		case zk.StateExpired:
			s.expiredOnce.Do(func() { close(s.expired) })
		}
	}
	conn, _, err := zk.Connect(servers, timeout,
		zk.WithDialer(s.link.dial),
		zk.WithEventCallback(callback),
		zk.WithLogger(s.link.logger(logw)),
		zk.WithLogInfo(false),
		zk.WithMaxBufferSize(buf),
		zk.WithMaxConnBufferSize(buf),
	)
	if err != nil {
		return nil, err
	}
	s.conn = conn
	select {
	case <-ready:
	case <-ctx.Done():
		go conn.Close()
		return nil, fmt.Errorf("no session from %v: %w", servers, ctx.Err())
	}
	s.id = conn.SessionID()
	s.granted = time.Duration(s.link.granted.Load()) * time.Millisecond
	if s.granted <= 0 {
		go conn.Close()
		return nil, errors.New("the ensemble's connect answer carried no session timeout")
	}
	return s, nil
}

// lost reports whether the session this value stands for is gone: expired
// on the ensemble, or replaced by a new one under the same connection.
func (s *session) lost() bool {
	select {
	case <-s.expired:
		return true
	default:
	}
	return s.conn.SessionID() != s.id
}

// close ends the session: the ensemble deletes its ephemeral nodes at once.
func (s *session) close() { s.closeOnce.Do(s.conn.Close) }

// die ends the session the way a crashed client does: the connection goes
// and no other is made, so the ensemble expires the session after its
// timeout (deleting its ephemeral nodes only then). The client's goroutines
// are stopped once that has happened.
func (s *session) die() {
	s.link.cut()
	time.AfterFunc(s.granted+time.Second, s.close)
}

// link is the session's network connection as the library dials it. It
// reads the session timeout out of the ensemble's connect answer (the
// library keeps it to itself) and can cut the connection for good.
type link struct {
	granted atomic.Int64 // ms, from the latest connect answer
	mu      sync.Mutex
	current net.Conn
	dead    bool
}

var errCut = errors.New("connection cut on purpose: the session is left to expire")

func (l *link) dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	l.mu.Lock()
	dead := l.dead
	l.mu.Unlock()
	if dead {
		return nil, errCut
	}
	c, err := net.DialTimeout(network, addr, timeout)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dead {
		c.Close()
		return nil, errCut
	}
	l.current = c
	return &handshake{Conn: c, granted: &l.granted}, nil
}

func (l *link) cut() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.dead = true
	if l.current != nil {
		l.current.Close()
	}
}

// logger writes the library's messages to w, except once the link was cut
// on purpose (then the failed reconnects are expected).
func (l *link) logger(w io.Writer) zk.Logger {
	if w == nil {
		w = io.Discard
	}
	return linkLogger{l: l, log: log.New(w, "zookeeper client: ", log.LstdFlags|log.Lmicroseconds)}
}

type linkLogger struct {
	l   *link
	log *log.Logger
}

func (g linkLogger) Printf(format string, args ...any) {
	g.l.mu.Lock()
	dead := g.l.dead
	g.l.mu.Unlock()
	if !dead {
		g.log.Printf(format, args...)
	}
}

// handshake watches the first bytes a connection receives: the ensemble's
// connect answer, a length-prefixed ConnectResponse {int protocolVersion;
// int timeOut; long sessionId; buffer passwd} (ZooKeeper's wire protocol),
// whose timeOut is the session timeout granted.
type handshake struct {
	net.Conn
	head    []byte
	done    bool
	granted *atomic.Int64
}

func (h *handshake) Read(p []byte) (int, error) {
	n, err := h.Conn.Read(p)
	if !h.done && n > 0 {
		need := 12 - len(h.head)
		h.head = append(h.head, p[:min(n, need)]...)
		if len(h.head) == 12 {
			h.granted.Store(int64(int32(binary.BigEndian.Uint32(h.head[8:12]))))
			h.done, h.head = true, nil
		}
	}
	return n, err
}
