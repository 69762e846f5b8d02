package memory

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/fencecheck/fencecheck/fencing"
	"github.com/fencecheck/fencecheck/harness/ports"
)

// Config describes one reference node.
type Config struct {
	// Name identifies the node in logs and nemesis events ("reference").
	Name string
	// Dir is the data directory; Restart(false) reopens it.
	Dir string
	// Addr is where Start listens when given ""; default a loopback port of ports.Stable.
	Addr string
	// SealKey switches on authenticated tokens (see fencing.ServerOptions).
	// With the accept-forged bug and no key, a fixed key is used: the bug
	// only means something when tokens are sealed.
	SealKey []byte
	// Bugs switches on deliberate faults.
	Bugs Bugs
	// Clock, when set, replaces the node's own OffsetClock (a container's
	// FileOffsetClock); Node.Clock then returns nil.
	Clock fencing.Clock
	// Log receives one line per lifecycle change; nil is silent.
	Log io.Writer
}

// defaultForgedKey seals tokens under accept-forged when no key was given.
var defaultForgedKey = []byte("fencecheck-accept-forged-default-key")

// ServerOptions are the HTTP layer's options for a reference with sealKey
// and bugs: the server-layer bugs, and a fixed seal key under accept-forged
// when none was given (the bug only means something when tokens are sealed).
func ServerOptions(sealKey []byte, bugs Bugs) fencing.ServerOptions {
	if bugs.Has(AcceptForged) && len(sealKey) == 0 {
		sealKey = defaultForgedKey
	}
	return fencing.ServerOptions{SealKey: sealKey, Bugs: bugs.Server()}
}

// Node is a reference server running in this process: the embedded target.
// Start, Stop, Kill, Restart, Pause and Resume are what the harness and the
// restart and pause nemeses call; Clock is what the clock nemesis sets. The
// node keeps its address across restarts so clients' URLs stay valid.
type Node struct {
	cfg   Config
	clock *fencing.OffsetClock

	// extra mounts more routes ahead of the Fencing API (the split-issuers
	// leader's counter endpoint); upstream feeds StoreOptions.Upstream.
	extra    func(mux *http.ServeMux, st *Store)
	upstream func(ctx context.Context, lock string) (uint64, error)
	// confirmer makes StoreOptions.Confirm for each start (the
	// one-way-failover leader's).
	confirmer func() func(ctx context.Context, lock string, n uint64) (uint64, error)

	mu   sync.Mutex
	addr string
	inst *instance
}

// instance is one incarnation of the node's process: killed as a whole.
type instance struct {
	store *Store
	srv   *http.Server
	gate  *gate
	done  chan struct{}
}

// NewNode checks cfg and returns a stopped node.
func NewNode(cfg Config) (*Node, error) {
	if cfg.Dir == "" {
		return nil, errors.New("memory: Config.Dir is required")
	}
	if cfg.Bugs.Paired() {
		return nil, errors.New("memory: split-issuers, one-way-failover and rejoin-empty need two nodes: use NewSplitIssuers or NewMemberPair")
	}
	if cfg.Name == "" {
		cfg.Name = "reference"
	}
	cfg.SealKey = ServerOptions(cfg.SealKey, cfg.Bugs).SealKey
	return &Node{cfg: cfg, clock: fencing.NewOffsetClock()}, nil
}

// Name is the node's name.
func (n *Node) Name() string { return n.cfg.Name }

// Clock is the node's clock, for the clock nemesis; nil when Config.Clock
// replaced it.
func (n *Node) Clock() *fencing.OffsetClock {
	if n.cfg.Clock != nil {
		return nil
	}
	return n.clock
}

func (n *Node) storeClock() fencing.Clock {
	if n.cfg.Clock != nil {
		return n.cfg.Clock
	}
	return n.clock
}

// URL is the node's base URL ("" before the first Start).
func (n *Node) URL() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.addr == "" {
		return ""
	}
	return "http://" + n.addr
}

// Running reports whether the node is up (started and not stopped or killed).
func (n *Node) Running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.inst != nil
}

// Start opens the data dir and listens on addr ("" means the address of the
// previous start, else Config.Addr, else a free port of ports.Stable), returning the base
// URL. Restarts reuse the address so clients' URLs stay valid.
func (n *Node) Start(addr string) (string, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.inst != nil {
		return "", errors.New("memory: node already running")
	}
	if addr == "" {
		addr = n.defaultAddrLocked()
	}
	if err := n.startLocked(addr); err != nil {
		return "", err
	}
	return "http://" + n.addr, nil
}

func (n *Node) startLocked(addr string) error {
	opts := StoreOptions{Clock: n.storeClock(), Bugs: n.cfg.Bugs, Upstream: n.upstream}
	if n.confirmer != nil {
		opts.Confirm = n.confirmer()
	}
	st, err := OpenStore(n.cfg.Dir, opts)
	if err != nil {
		return err
	}
	ln, err := listen(addr)
	if err != nil {
		st.Close()
		return err
	}
	g := &gate{}
	api := fencing.NewServer(st, ServerOptions(n.cfg.SealKey, n.cfg.Bugs))
	mux := http.NewServeMux()
	if n.extra != nil {
		n.extra(mux, st)
	}
	mux.Handle("/", api)
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			g.wait()
			mux.ServeHTTP(w, r)
		}),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          nil,
	}
	inst := &instance{store: st, srv: srv, gate: g, done: make(chan struct{})}
	go func() {
		defer close(inst.done)
		srv.Serve(ln)
	}()
	n.addr = ln.Addr().String()
	n.inst = inst
	n.logf("%s up at http://%s (data %s, bugs %q)", n.cfg.Name, n.addr, n.cfg.Dir, n.cfg.Bugs.String())
	return nil
}

// listen binds addr, retrying briefly: right after a kill the old
// listener's port is free but the kernel may take a moment to agree.
func listen(addr string) (net.Listener, error) {
	var err error
	for i := 0; i < 50; i++ {
		var ln net.Listener
		if ln, err = net.Listen("tcp", addr); err == nil {
			return ln, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil, err
}

// Stop shuts the node down gracefully: paused requests are let go, in-flight
// requests finish (up to 1 s), then the store closes. The grace is short: a
// client's connection dialled for a request cancelled meanwhile (the main
// phase's end) never sends one, and net/http's Shutdown waits 5 s for such
// a connection, which made every run's teardown 5 s longer.
func (n *Node) Stop() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	inst := n.inst
	if inst == nil {
		return nil
	}
	n.inst = nil
	inst.gate.resume()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err := inst.srv.Shutdown(ctx)
	if err != nil {
		inst.srv.Close()
	}
	inst.store.Close()
	<-inst.done
	n.logf("%s stopped", n.cfg.Name)
	return nil
}

// Kill simulates a crash (kill -9): the store is fenced off from its data
// dir first, so nothing not yet durable will ever be, then the listener and
// every connection are dropped mid-flight. State kept only in memory (by a
// bug switch) is lost with the instance.
func (n *Node) Kill() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.killLocked()
}

func (n *Node) killLocked() error {
	inst := n.inst
	if inst == nil {
		return nil
	}
	n.inst = nil
	inst.store.kill()
	inst.srv.Close()
	inst.gate.resume() // stalled handlers meet the dead store and give up
	<-inst.done
	n.logf("%s killed", n.cfg.Name)
	return nil
}

// Restart kills the node if it runs and starts it again on the same
// address, not paused; wipe removes the data dir first (the counter-reset
// fault every implementation fails).
func (n *Node) Restart(wipe bool) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.killLocked(); err != nil {
		return err
	}
	if wipe {
		if err := wipeDir(n.cfg.Dir); err != nil {
			return err
		}
	}
	return n.startLocked(n.defaultAddrLocked())
}

func (n *Node) defaultAddrLocked() string {
	switch {
	case n.addr != "":
		return n.addr
	case n.cfg.Addr != "":
		return n.cfg.Addr
	}
	// A port the node keeps across restarts: outside the kernel's
	// ephemeral range, or an outgoing connection may take it while the
	// node is down (ports.Stable).
	if p, err := ports.Stable(); err == nil {
		return net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
	}
	return "127.0.0.1:0"
}

func wipeDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

// Pause freezes the node: every request that arrives (or is between
// arrival and handling) stalls until Resume, as under SIGSTOP; wall time and
// so leases go on.
func (n *Node) Pause() { n.setPaused(true) }

// Resume thaws a paused node; stalled requests then run, late.
func (n *Node) Resume() { n.setPaused(false) }

func (n *Node) setPaused(on bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.inst == nil {
		return
	}
	if on {
		n.inst.gate.pause()
		n.logf("%s paused", n.cfg.Name)
	} else {
		n.inst.gate.resume()
		n.logf("%s resumed", n.cfg.Name)
	}
}

func (n *Node) logf(format string, args ...any) {
	if n.cfg.Log != nil {
		fmt.Fprintf(n.cfg.Log, format+"\n", args...)
	}
}

// gate stalls requests while a node is paused.
type gate struct {
	mu     sync.Mutex
	paused chan struct{} // nil when running; closed on resume
}

func (g *gate) pause() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.paused == nil {
		g.paused = make(chan struct{})
	}
}

func (g *gate) resume() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.paused != nil {
		close(g.paused)
		g.paused = nil
	}
}

func (g *gate) wait() {
	g.mu.Lock()
	ch := g.paused
	g.mu.Unlock()
	if ch != nil {
		<-ch
	}
}

// Serve runs a reference node until ctx is done, then stops it gracefully:
// what `fencecheck reference` runs.
func Serve(ctx context.Context, cfg Config) error {
	n, err := NewNode(cfg)
	if err != nil {
		return err
	}
	if _, err := n.Start(""); err != nil {
		return err
	}
	<-ctx.Done()
	return n.Stop()
}
