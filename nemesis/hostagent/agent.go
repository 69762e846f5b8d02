package hostagent

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/nftables"

	"github.com/fencecheck/fencecheck/nemesis/lazyfs"
	"github.com/fencecheck/fencecheck/nemesis/netcut"
	"github.com/fencecheck/fencecheck/nemesis/timewarp"
)

// Options configure an agent.
type Options struct {
	// Run is the run's id: it tags the agent's nftables table.
	Run string
	// Dir is the agent's folder on the host: nodes/<node>/{data,mnt,clock},
	// logs/<node>.log. Remove removes it (and whatever else is in it: the
	// agent's own binary) when the agent ends.
	Dir    string
	Remove bool
	// Lease is how long the agent waits for its controller's next line
	// (default DefaultLease).
	Lease time.Duration
	// Log receives what the agent does on its own (healing at a lost
	// lease); nil: discarded.
	Log io.Writer
	_   struct{}
}

// agent is one run's helper on one host.
type agent struct {
	opts  Options
	table string
	// lossTable is the run's table of link loss, apart from its cut's.
	lossTable string

	outMu sync.Mutex
	out   *json.Encoder

	mu    sync.Mutex
	nodes map[string]*node
	cut   bool // the run's table exists
	lost  bool // the run's loss table exists
	duped bool // the run's duplication table exists
	// delayer holds the packets of the run's delay (nil: no delay).
	delayer *netcut.Delayer
	nft     *nftables.Conn
	nftOK   error
}

// Serve is the agent: it answers requests from r on w until a bye, the end
// of r, or a lease that ran out; then it heals, stops every program it
// started, takes its layers down and, with Remove, removes its folder. It
// returns why it ended (nil for a bye).
func Serve(r io.Reader, w io.Writer, opts Options) error {
	if opts.Lease <= 0 {
		opts.Lease = DefaultLease
	}
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	if opts.Run == "" || opts.Dir == "" {
		return errors.New("hostagent: a run id and a folder are needed")
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return err
	}
	opts.Dir = dir
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o755); err != nil {
		return err
	}
	a := &agent{opts: opts, table: netcut.TableOf(opts.Run), lossTable: netcut.LossTableOf(opts.Run), out: json.NewEncoder(w), nodes: map[string]*node{}}
	a.nft, a.nftOK = netfilter()
	if err := claim(dir); err != nil {
		return err
	}
	if err := sweepDeadAgents(dir, a.nft, opts.Log); err != nil {
		fmt.Fprintf(opts.Log, "fencehost: sweeping what killed agents left: %v\n", err)
	}

	lines := make(chan []byte)
	readErr := make(chan error, 1)
	go func() {
		in := bufio.NewReader(r)
		for {
			line, err := in.ReadBytes('\n')
			if len(line) > 0 {
				lines <- line
			}
			if err != nil {
				readErr <- err
				return
			}
		}
	}()
	lease := time.NewTimer(opts.Lease)
	defer lease.Stop()
	var wg sync.WaitGroup
	var why error
loop:
	for {
		select {
		case line := <-lines:
			lease.Reset(opts.Lease)
			var req Request
			if err := json.Unmarshal(line, &req); err != nil {
				a.answer(Response{Error: fmt.Sprintf("a request that is not JSON: %v", err)})
				continue
			}
			switch req.Op {
			case OpRenew:
				continue
			case OpBye:
				wg.Wait()
				err := a.end()
				a.answer(Response{ID: req.ID, Error: errText(err)})
				return err
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp := a.do(req)
				resp.ID = req.ID
				if req.ID != 0 {
					a.answer(resp)
				}
			}()
		case err := <-readErr:
			why = fmt.Errorf("the controller's connection ended (%v)", err)
			break loop
		case <-lease.C:
			why = fmt.Errorf("the controller's lease ran out (no line for %s)", opts.Lease)
			break loop
		}
	}
	fmt.Fprintf(opts.Log, "fencehost: %v: healing and removing what the run left\n", why)
	// Requests in flight finish first (a start must not outlive the end).
	wg.Wait()
	if err := a.end(); err != nil {
		fmt.Fprintf(opts.Log, "fencehost: %v\n", err)
		return errors.Join(why, err)
	}
	return why
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// answer writes one response line; a controller that is gone is no error
// here (the lease ends the agent).
func (a *agent) answer(resp Response) {
	a.outMu.Lock()
	defer a.outMu.Unlock()
	_ = a.out.Encode(resp)
}

// do carries out one request.
func (a *agent) do(req Request) Response {
	if req.Op == OpHello {
		return Response{Hello: a.hello()}
	}
	if req.Op == OpCut {
		return Response{Error: errText(a.setCut(req.Peers, req.To))}
	}
	if req.Op == OpLose {
		return Response{Error: errText(a.setLoss(req.Peers, req.Percent))}
	}
	if req.Op == OpDup {
		return Response{Error: errText(a.setDup(req.Peers, req.Percent))}
	}
	if req.Op == OpDelay {
		return Response{Error: errText(a.setDelay(req.Peers, req.Delay, req.Jitter))}
	}
	// A layer at given folders needs no prepare (a local agent's nodes).
	n, err := a.node(req.Node, req.Op == OpPrepare || req.Op == OpLayer && req.Backing != "")
	if err != nil {
		return Response{Error: err.Error()}
	}
	return n.do(req)
}

// node finds (or, for prepare, makes) a node's state.
func (a *agent) node(name string, create bool) (*node, error) {
	if name == "" || strings.ContainsAny(name, "/\\") || name == "." || name == ".." {
		return nil, fmt.Errorf("node name %q cannot name a folder", name)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	n, ok := a.nodes[name]
	if !ok && create {
		n = newNode(a, name)
		a.nodes[name] = n
	}
	if n == nil {
		return nil, fmt.Errorf("node %s was never prepared on this host", name)
	}
	return n, nil
}

func (a *agent) hello() *Hello {
	h := &Hello{Version: Version, PID: os.Getpid(), UID: os.Geteuid(), Dir: a.opts.Dir, Lease: a.opts.Lease.String()}
	if err := lazyfs.Supported(); err != nil {
		h.FUSEWhy = err.Error()
	} else if os.Geteuid() != 0 {
		h.FUSEWhy = "the agent does not run as root (the layer is mounted directly, without fusermount)"
	}
	if a.nftOK != nil {
		h.NetfilterWhy = a.nftOK.Error()
	}
	if !timewarp.Supported() {
		h.ClockWhy = timewarp.ErrUnsupported.Error()
	}
	if f := strings.Fields(os.Getenv("SSH_CONNECTION")); len(f) > 0 {
		h.Controller = f[0]
	}
	return h
}

// netfilter opens nftables in the agent's network namespace and proves it
// may change it (a listing needs the same capability as a change).
func netfilter() (*nftables.Conn, error) {
	conn, err := nftables.New()
	if err != nil {
		return nil, fmt.Errorf("no nftables: %v", err)
	}
	if _, err := conn.ListTablesOfFamily(nftables.TableFamilyIPv4); err != nil {
		return nil, fmt.Errorf("nftables cannot be read here (root or CAP_NET_ADMIN is needed): %v", err)
	}
	return conn, nil
}

// setCut drops every packet between this host and peers, and the
// connections it opens to the to peers (netcut.Cut), in the run's own
// table; no peers heals. The controller's own address is never cut: the
// run would lose the host.
func (a *agent) setCut(peers, to []string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.nftOK != nil {
		return a.nftOK
	}
	addrs, err := netcut.ParsePeers(peers)
	if err != nil {
		return err
	}
	toAddrs, err := netcut.ParsePeers(to)
	if err != nil {
		return err
	}
	if c := a.hello().Controller; c != "" {
		if ca, err := netip.ParseAddr(c); err == nil && (slices.Contains(addrs, ca) || slices.Contains(toAddrs, ca)) {
			return fmt.Errorf("peer %s is the controller's own address: cutting it would cut fencecheck off from this host", c)
		}
	}
	if err := netcut.SetCutIn(a.nft, a.table, netcut.Cut{Both: addrs, To: toAddrs}); err != nil {
		return err
	}
	a.cut = len(addrs) > 0 || len(toAddrs) > 0
	return nil
}

// linkPeers parses the peers a link fault names, refusing the
// controller's own address (why says what the fault would do to it).
// Called with a.mu held.
func (a *agent) linkPeers(peers []string, why string) ([]netip.Addr, error) {
	if a.nftOK != nil {
		return nil, a.nftOK
	}
	addrs, err := netcut.ParsePeers(peers)
	if err != nil {
		return nil, err
	}
	if c := a.hello().Controller; c != "" {
		if ca, err := netip.ParseAddr(c); err == nil && slices.Contains(addrs, ca) {
			return nil, fmt.Errorf("peer %s is the controller's own address: %s", c, why)
		}
	}
	return addrs, nil
}

// setDup makes this host send percent percent of its packets to peers
// twice (netcut.SetDupIn), in the run's own table; no peers heals.
func (a *agent) setDup(peers []string, percent int) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	addrs, err := a.linkPeers(peers, "its link to this host is left alone")
	if err != nil {
		return err
	}
	if err := netcut.SetDupIn(a.nft, netcut.DupTableOf(a.opts.Run), netcut.Loss{Peers: addrs, Percent: percent}); err != nil {
		return err
	}
	a.duped = len(addrs) > 0 && percent > 0
	return nil
}

// setLoss makes this host lose percent percent of the packets it sends to
// peers (netcut.Loss), in the run's own loss table; no peers heals. The
// controller's own address is never made lossy.
func (a *agent) setLoss(peers []string, percent int) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	addrs, err := a.linkPeers(peers, "losing its packets would slow fencecheck's own link to this host")
	if err != nil {
		return err
	}
	l := netcut.Loss{Peers: addrs, Percent: percent}
	if err := netcut.SetLossIn(a.nft, a.lossTable, l); err != nil {
		return err
	}
	a.lost = len(addrs) > 0 && percent > 0
	return nil
}

// setDelay makes what this host sends to peers wait mean ± jitter
// (netcut.Delay), in the run's own delay table, with a delayer in this
// agent; no peers heals. The controller's own address is never delayed.
func (a *agent) setDelay(peers []string, mean, jitter time.Duration) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if mean < 0 || jitter < 0 || jitter > mean {
		return fmt.Errorf("a delay of %v ± %v: the jitter must be at most the delay", mean, jitter)
	}
	addrs, err := a.linkPeers(peers, "delaying it would slow fencecheck's own link to this host")
	if err != nil {
		return err
	}
	d := netcut.Delay{Peers: addrs, Mean: mean, Jitter: jitter}
	if len(addrs) == 0 || mean == 0 {
		d = netcut.Delay{}
	}
	return netcut.SetDelayNamed(a.nft, netcut.DelayTableOf(a.opts.Run), &a.delayer, 0, d)
}

// end heals and removes what the run left on the host: cuts lifted,
// clocks back to real time, every program continued and killed, layers
// taken down, the folder removed (with Remove).
func (a *agent) end() error {
	var errs []error
	a.mu.Lock()
	cut, lost, duped, delayed := a.cut, a.lost, a.duped, a.delayer != nil
	a.mu.Unlock()
	if cut {
		errs = append(errs, a.setCut(nil, nil))
	}
	if lost {
		errs = append(errs, a.setLoss(nil, 0))
	}
	if duped {
		errs = append(errs, a.setDup(nil, 0))
	}
	if delayed {
		errs = append(errs, a.setDelay(nil, 0, 0))
	}
	a.mu.Lock()
	nodes := make([]*node, 0, len(a.nodes))
	for _, n := range a.nodes {
		nodes = append(nodes, n)
	}
	a.mu.Unlock()
	for _, n := range nodes {
		errs = append(errs, n.end())
	}
	if a.opts.Remove {
		errs = append(errs, os.RemoveAll(a.opts.Dir))
	}
	return errors.Join(errs...)
}
