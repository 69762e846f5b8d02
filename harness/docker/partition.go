package docker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/fencecheck/fencecheck/nemesis/netcut"
)

// PartitionChain is the iptables chain, inside a container's own network
// namespace, that holds every rule the project adds from this machine (the
// host path; a helper uses netcut's own nftables table instead). INPUT and
// OUTPUT jump to it; healing flushes it and nothing else. The host's rules
// are never touched: the rules live and die with the container's namespace.
const PartitionChain = "FENCECHECK"

// PartitionTools names the host programs partitions need, and why.
func PartitionTools() error {
	for _, tool := range []string{"nsenter", "iptables"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("partitions need %s on the host (Debian: apt-get install util-linux iptables): %w", tool, err)
		}
	}
	return nil
}

// Cut is what one node drops: every packet from and to the Both peers,
// and, one way, the connections it opens to the To peers (the first packet
// and everything after, both ways), while the To peers' own connections to
// it carry on, its answers included. Conntrack tells the two apart (the
// direction of the side that opened the connection): dropping every packet
// one way would also kill the other side's TCP connections, whose
// handshakes need answers, a two-way cut in all but name. For UDP the side
// that cannot reach may still answer datagrams the other sent first.
type Cut struct {
	Both, To []string
}

func (c Cut) empty() bool { return len(c.Both) == 0 && len(c.To) == 0 }

// Partition makes node drop every packet from and to the given peer IPs
// (replacing any earlier cut of that node).
func (r *Runtime) Partition(ctx context.Context, node string, peerIPs []string) error {
	return r.SetCut(ctx, node, Cut{Both: peerIPs})
}

// SetCut makes node drop exactly c (replacing any earlier cut of that
// node). It is idempotent, and Start re-applies it after a restart,
// because a stopped container's namespace and its rules are gone.
func (r *Runtime) SetCut(ctx context.Context, node string, c Cut) error {
	c = Cut{Both: sortedIPs(c.Both), To: sortedIPs(c.To)}
	defer r.lockRules(node)()
	r.mu.Lock()
	if r.blocked == nil {
		r.blocked = map[string]Cut{}
	}
	r.blocked[node] = c
	r.mu.Unlock()
	return r.applyPartition(ctx, node, c)
}

func sortedIPs(ips []string) []string {
	if len(ips) == 0 {
		return nil
	}
	out := slices.Clone(ips)
	slices.Sort(out)
	return slices.Compact(out)
}

// Heal removes node's partition rules (flushes our chain in its namespace).
func (r *Runtime) Heal(ctx context.Context, node string) error {
	defer r.lockRules(node)()
	r.mu.Lock()
	delete(r.blocked, node)
	r.mu.Unlock()
	return r.applyPartition(ctx, node, Cut{})
}

// HealAll heals every node that has partition rules.
func (r *Runtime) HealAll(ctx context.Context) error {
	r.mu.Lock()
	var nodes []string
	for n := range r.blocked {
		nodes = append(nodes, n)
	}
	r.mu.Unlock()
	var firstErr error
	for _, n := range nodes {
		if err := r.Heal(ctx, n); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	return firstErr
}

// Blocked returns the peer IPs node currently drops both ways.
func (r *Runtime) Blocked(node string) []string {
	return r.CutOf(node).Both
}

// CutOf returns what node currently drops.
func (r *Runtime) CutOf(node string) Cut {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.blocked[node]
	return Cut{Both: slices.Clone(c.Both), To: slices.Clone(c.To)}
}

// lockRules locks node's rule changes until the returned func is called. A
// change and a start's re-apply each read what the node should drop and put
// it in under it, so the last one puts in what is current: a partition
// healed while its node started again was put back into the new namespace
// by the start, which had read the cut just before the heal (etcd under
// all: a member cut off for 25 s with no fault on it, until a member
// replacement recreated it).
func (r *Runtime) lockRules(node string) func() { return r.lockKey(&r.rulesMu, node) }

// lockKey locks key's mutex in locks (made on first use) until the
// returned func is called.
func (r *Runtime) lockKey(locks *map[string]*sync.Mutex, key string) func() {
	r.mu.Lock()
	if *locks == nil {
		*locks = map[string]*sync.Mutex{}
	}
	m := (*locks)[key]
	if m == nil {
		m = &sync.Mutex{}
		(*locks)[key] = m
	}
	r.mu.Unlock()
	m.Lock()
	return m.Unlock
}

func (r *Runtime) reapplyPartition(ctx context.Context, node string) error {
	defer r.lockRules(node)()
	c := r.CutOf(node)
	if c.empty() {
		return nil
	}
	cutRead(node)
	return r.applyPartition(ctx, node, c)
}

// cutRead is called between a start's read of the node's cut and its
// putting it in (a test widens the window there).
var cutRead = func(node string) {}

// applyPartition sets node's cut to exactly c, from this machine or
// through a helper (faultpath.go). A node that is not running has no
// namespace; its rules are applied when it starts. A node that another
// fault stops or restarts while the rules go in (its namespace gone under
// nsenter) is looked at again: stopped, its start applies them; started
// anew, they go into its new namespace.
func (r *Runtime) applyPartition(ctx context.Context, node string, cut Cut) error {
	c, st, err := r.inspect(ctx, node)
	if err != nil {
		return err
	}
	return onTheNodesProcess(st, func(st *container.State) error { return r.partitionNamespace(ctx, node, c, st, cut) },
		func() (*container.State, error) { return r.State(ctx, node) }, hostProcessGone)
}

// onTheNodesProcess applies a change to the process st names, looking again
// when it fails: a node no longer running needs nothing (its start
// applies the change); one started anew gets it in its new process, up to
// three tries; the same process failing is a real failure. A process that
// died while Docker still calls it running (a kill just sent: CI saw
// nsenter find no /proc/PID/ns/net for a pid the engine still reported) is
// not the same process failing: the engine is asked again, up to
// deathLag, until it sees the death, and one still gone then is taken as
// stopped.
func onTheNodesProcess(st *container.State, apply func(*container.State) error, state func() (*container.State, error), gone func(pid int) bool) error {
	for try := 0; ; try++ {
		if !st.Running || st.Pid == 0 {
			return nil
		}
		err := apply(st)
		if err == nil || try == 2 {
			return err
		}
		now, serr := state()
		same := func() bool { return now.Running && now.Pid == st.Pid && now.StartedAt == st.StartedAt }
		for wait := time.Duration(0); serr == nil && same() && gone(st.Pid) && wait < deathLag; wait += deathPoll {
			time.Sleep(deathPoll)
			now, serr = state()
		}
		if serr == nil && same() && gone(st.Pid) {
			// Gone as this machine sees it, its namespace with it, while
			// the engine, slow under load, still calls it running: it has
			// no rules to change, and its start applies the cut. (make
			// check: an etcd member removed late, by a removal its
			// cluster had declined, exited on its own as the heal undid
			// the link faults, and the engine listed it running for
			// more than deathLag; the heal failed.)
			return nil
		}
		if serr != nil || same() {
			return err
		}
		st = now
	}
}

// deathLag bounds how long the engine may take to see a node's process die;
// deathPoll is how often it is asked meanwhile.
const (
	deathLag  = 5 * time.Second
	deathPoll = 100 * time.Millisecond
)

// hostProcessGone says whether host pid has exited or is exiting (no such
// process, a zombie not yet reaped, or one whose namespaces its exit has
// already let go: its /proc/PID/ns/net is gone while its state still reads
// running, and a link fault applied then failed twice in three postgres
// runs under random faults) as this machine sees it.
func hostProcessGone(pid int) bool {
	if _, err := os.Stat(fmt.Sprintf("/proc/%d/ns/net", pid)); errors.Is(err, fs.ErrNotExist) {
		return true
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return errors.Is(err, fs.ErrNotExist)
	}
	// The state follows the command's closing parenthesis.
	if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) {
		return b[i+2] == 'Z' || b[i+2] == 'X'
	}
	return false
}

// partitionNamespace sets the cut in the namespace of the process st names.
func (r *Runtime) partitionNamespace(ctx context.Context, node string, c *Container, st *container.State, cut Cut) error {
	if r.faultPath(faultPartition, c, st.Pid) == PathAPI {
		return r.helperPartition(ctx, node, c, st.StartedAt, cut)
	}
	if err := PartitionTools(); err != nil {
		return err
	}
	if err := hostPartition(ctx, st.Pid, cut); err != nil {
		return fmt.Errorf("partition %s: %w", node, err)
	}
	return nil
}

// helperPartition hands the cut to node's netcut helper. A heal needs no
// helper where none joined the namespace the node runs in now: nothing
// was cut there.
func (r *Runtime) helperPartition(ctx context.Context, node string, c *Container, started string, cut Cut) error {
	if cut.empty() && !r.joined(ImageNetcut, node, c, started) {
		return nil
	}
	h, err := r.helperFor(ctx, ImageNetcut, node, c, started)
	if err != nil {
		return fmt.Errorf("partition %s: %w", node, err)
	}
	ans, err := h.ask(ctx, netcut.Command(cut.Both, cut.To))
	if err != nil {
		return fmt.Errorf("partition %s: %w", node, err)
	}
	if want := netcut.Counts(len(cut.Both), len(cut.To)); ans != want {
		return fmt.Errorf("partition %s: the helper answered %q, want %q", node, ans, want)
	}
	return nil
}

// hostPartition sets the chain in the network namespace of host pid to
// exactly cut, with nsenter and iptables (a one-way cut with the conntrack
// match: --ctdir ORIGINAL is the side that opened the connection).
func hostPartition(ctx context.Context, pid int, cut Cut) error {
	ipt := func(args ...string) error { return nsIptables(ctx, pid, args...) }
	// Create the chain once; "already exists" is the idempotent case, also
	// when another change of the same namespace created it between our
	// look and our create (seen in runs: "Chain already exists").
	if nsIptables(ctx, pid, "-n", "-L", PartitionChain) != nil {
		if err := ipt("-N", PartitionChain); err != nil && nsIptables(ctx, pid, "-n", "-L", PartitionChain) != nil {
			return err
		}
	}
	for _, hook := range []string{"INPUT", "OUTPUT"} {
		if nsIptables(ctx, pid, "-C", hook, "-j", PartitionChain) != nil {
			if err := ipt("-I", hook, "1", "-j", PartitionChain); err != nil {
				return err
			}
		}
	}
	if err := ipt("-F", PartitionChain); err != nil {
		return err
	}
	for _, ip := range cut.Both {
		if err := ipt("-A", PartitionChain, "-s", ip, "-j", "DROP"); err != nil {
			return err
		}
		if err := ipt("-A", PartitionChain, "-d", ip, "-j", "DROP"); err != nil {
			return err
		}
	}
	for _, ip := range cut.To {
		// What this node sends in the connections it opened, and the
		// answers to them; the peer's connections pass both ways.
		if err := ipt("-A", PartitionChain, "-d", ip, "-m", "conntrack", "--ctdir", "ORIGINAL", "-j", "DROP"); err != nil {
			return err
		}
		if err := ipt("-A", PartitionChain, "-s", ip, "-m", "conntrack", "--ctdir", "REPLY", "-j", "DROP"); err != nil {
			return err
		}
	}
	return nil
}

// nsIptables runs iptables -w inside the network namespace of host pid.
func nsIptables(ctx context.Context, pid int, args ...string) error {
	full := append([]string{"-t", strconv.Itoa(pid), "-n", "iptables", "-w"}, args...)
	cmd := exec.CommandContext(ctx, "nsenter", full...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("nsenter %v: %w: %s", full, err, bytes.TrimSpace(out.Bytes()))
	}
	return nil
}
