package netcut

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/xt"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// DelayTable is the nftables table in which a namespace's packets to some
// peers are held back (the link-delay fault): its one rule queues them
// (`ip daddr @delayed queue num DelayQueue bypass`, as xtables' NFQUEUE
// target where the kernel has no nft_queue) to a Delayer of the
// project's own in user space, which lets each go after the link's delay
// plus a jitter drawn per packet. Packets with different jitters overtake
// each other: jitter larger than the gap between two packets reorders
// them, as netem's delay with jitter does. A table apart from the cut's and
// the loss's: each fault comes and goes on its own.
const DelayTable = "fencecheck-delay"

// DelayQueue is the NFQUEUE number the rule queues to (queues are per
// network namespace).
const DelayQueue = 4071

const delaySetName = "delayed"

// DelayTableOf is the table a run's own delay lives in on a shared host.
func DelayTableOf(run string) string { return DelayTable + "-" + run }

// Delay is what one namespace's packets to the Peers wait: Mean, plus or
// minus Jitter (uniform), each packet drawn on its own.
type Delay struct {
	Peers        []netip.Addr
	Mean, Jitter time.Duration
}

func (d Delay) empty() bool { return len(d.Peers) == 0 || d.Mean <= 0 }

// SetDelayIn makes the namespace of conn queue what it sends to d's peers
// to DelayQueue, in the table named name, replacing the earlier rule; an
// empty delay removes the table. Without a Delayer bound to the queue the
// packets pass undelayed (bypass): a delayer that died never cuts a link.
func SetDelayIn(conn *nftables.Conn, name string, d Delay) error {
	table := tableNamed(name)
	conn.AddTable(table)
	conn.DelTable(table)
	if !d.empty() {
		conn.AddTable(table)
		set, err := addSet(conn, table, delaySetName, d.Peers)
		if err != nil {
			return err
		}
		policy := nftables.ChainPolicyAccept
		chain := conn.AddChain(&nftables.Chain{Name: "output", Table: table, Type: nftables.ChainTypeFilter,
			Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityFilter, Policy: &policy})
		conn.AddRule(&nftables.Rule{Table: table, Chain: chain, Exprs: []expr.Any{
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4}, // destination
			&expr.Lookup{SourceRegister: 1, SetName: set.Name, SetID: set.ID},
			&expr.Counter{},
			nfqueueTarget(),
		}})
	}
	if err := conn.Flush(); err != nil {
		return fmt.Errorf("netcut: programming nftables: %w", err)
	}
	return nil
}

// SetDelay makes the namespace netns (a file descriptor; 0: the caller's,
// whose nftables conn is) hold what it sends to d's peers for d's delay,
// with the Delayer *dp (made when needed, closed when the delay is healed),
// in the table DelayTable. The delayer is bound before the rule goes in and
// closed after it is gone, so no packet waits on a queue nobody reads.
func SetDelay(conn *nftables.Conn, dp **Delayer, netns int, d Delay) error {
	return SetDelayNamed(conn, DelayTable, dp, netns, d)
}

// SetDelayNamed is SetDelay in the table named name.
func SetDelayNamed(conn *nftables.Conn, name string, dp **Delayer, netns int, d Delay) error {
	if d.empty() {
		err := SetDelayIn(conn, name, Delay{})
		if *dp != nil {
			err = errors.Join(err, (*dp).Close())
			*dp = nil
		}
		return err
	}
	if *dp == nil {
		dl, err := NewDelayer(netns, d.Mean, d.Jitter, uint64(time.Now().UnixNano()))
		if err != nil {
			return err
		}
		*dp = dl
	}
	(*dp).Set(d.Mean, d.Jitter)
	return SetDelayIn(conn, name, d)
}

// nfqueueTarget is `queue num DelayQueue bypass` as xtables' NFQUEUE
// target (revision 3) through nft_compat: kernels built without nft_queue
// (this machine's) still have it. Its info is xt_NFQ_info_v3, in host byte
// order: the queue, the number of queues, the flags (1: bypass), padded to
// 8 bytes.
func nfqueueTarget() *expr.Target {
	info := make(xt.Unknown, 8)
	binary.NativeEndian.PutUint16(info[0:], DelayQueue)
	binary.NativeEndian.PutUint16(info[2:], 1)
	binary.NativeEndian.PutUint16(info[4:], 1)
	return &expr.Target{Name: "NFQUEUE", Rev: 3, Info: &info}
}

// nfnetlink_queue's messages and attributes (linux/netfilter/nfnetlink_queue.h).
const (
	nfqnlMsgPacket  = 0
	nfqnlMsgVerdict = 1
	nfqnlMsgConfig  = 2

	nfqaPacketHdr  = 1
	nfqaVerdictHdr = 2
	nfqaCfgCmd     = 1
	nfqaCfgParams  = 2
	nfqaCfgMask    = 4
	nfqaCfgFlags   = 5

	nfqnlCfgCmdBind  = 1
	nfqnlCopyMeta    = 1
	nfqaCfgFFailOpen = 1

	nfAccept = 1
)

// Delayer is the user-space half of a link delay: bound to DelayQueue in
// one network namespace, it holds each queued packet for the delay in
// force and then lets it go (an accept verdict, by packet id, in any
// order). Close lets every held packet go at once and unbinds.
type Delayer struct {
	conn *netlink.Conn

	mu     sync.Mutex
	mean   time.Duration
	jitter time.Duration
	rng    *rand.Rand
	held   map[uint32]*time.Timer
	closed bool
	done   chan struct{}
}

// NewDelayer binds DelayQueue in the network namespace netns (a file
// descriptor; 0: the caller's), holding packets for mean ± jitter.
func NewDelayer(netns int, mean, jitter time.Duration, seed uint64) (*Delayer, error) {
	conn, err := netlink.Dial(unix.NETLINK_NETFILTER, &netlink.Config{NetNS: netns})
	if err != nil {
		return nil, fmt.Errorf("netcut: opening nfnetlink: %w", err)
	}
	_ = conn.SetOption(netlink.NoENOBUFS, true)
	_ = conn.SetReadBuffer(1 << 20)
	d := &Delayer{conn: conn, mean: mean, jitter: jitter, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		held: map[uint32]*time.Timer{}, done: make(chan struct{})}
	cmd := func(c byte) []byte {
		ae := netlink.NewAttributeEncoder()
		ae.Bytes(nfqaCfgCmd, []byte{c, 0, 0, 0}) // command, pad, pf (unspecified)
		b, _ := ae.Encode()
		return b
	}
	// A queue bound by another socket (a second run's delayer in the same
	// namespace) is refused; one whose socket closed was unbound with it.
	if err := d.config(cmd(nfqnlCfgCmdBind)); err != nil {
		conn.Close()
		return nil, fmt.Errorf("netcut: binding queue %d: %w", DelayQueue, err)
	}
	ae := netlink.NewAttributeEncoder()
	params := make([]byte, 5)
	binary.BigEndian.PutUint32(params, 0) // copy range: no payload
	params[4] = nfqnlCopyMeta
	ae.Bytes(nfqaCfgParams, params)
	// Fail open: a full queue lets packets pass rather than dropping them.
	flags := make([]byte, 4)
	binary.BigEndian.PutUint32(flags, nfqaCfgFFailOpen)
	ae.Bytes(nfqaCfgFlags, flags)
	ae.Bytes(nfqaCfgMask, flags)
	b, _ := ae.Encode()
	if err := d.config(b); err != nil {
		conn.Close()
		return nil, fmt.Errorf("netcut: configuring queue %d: %w", DelayQueue, err)
	}
	go d.serve()
	return d, nil
}

// header is nfgenmsg: family, version, the queue number (big endian).
func header() []byte {
	h := []byte{unix.AF_UNSPEC, 0, 0, 0}
	binary.BigEndian.PutUint16(h[2:], DelayQueue)
	return h
}

func (d *Delayer) config(attrs []byte) error {
	_, err := d.conn.Execute(netlink.Message{
		Header: netlink.Header{Type: netlink.HeaderType(unix.NFNL_SUBSYS_QUEUE<<8 | nfqnlMsgConfig),
			Flags: netlink.Request | netlink.Acknowledge},
		Data: append(header(), attrs...),
	})
	return err
}

// Set changes the delay of the packets queued from now on.
func (d *Delayer) Set(mean, jitter time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.mean, d.jitter = mean, jitter
}

func (d *Delayer) serve() {
	defer close(d.done)
	for {
		msgs, err := d.conn.Receive()
		if err != nil {
			d.mu.Lock()
			closed := d.closed
			d.mu.Unlock()
			if closed {
				return
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		for _, m := range msgs {
			if m.Header.Type != netlink.HeaderType(unix.NFNL_SUBSYS_QUEUE<<8|nfqnlMsgPacket) || len(m.Data) < 4 {
				continue
			}
			ad, err := netlink.NewAttributeDecoder(m.Data[4:])
			if err != nil {
				continue
			}
			for ad.Next() {
				if ad.Type() == nfqaPacketHdr && len(ad.Bytes()) >= 4 {
					d.hold(binary.BigEndian.Uint32(ad.Bytes()))
				}
			}
		}
	}
}

// hold lets packet id go after the delay in force.
func (d *Delayer) hold(id uint32) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		d.accept(id)
		return
	}
	wait := d.mean
	if d.jitter > 0 {
		wait += time.Duration(d.rng.Int64N(int64(2*d.jitter)+1)) - d.jitter
	}
	if wait <= 0 {
		d.accept(id)
		return
	}
	d.held[id] = time.AfterFunc(wait, func() {
		d.mu.Lock()
		_, ok := d.held[id]
		delete(d.held, id)
		d.mu.Unlock()
		if ok {
			d.accept(id)
		}
	})
}

// accept sends the verdict that lets packet id go.
func (d *Delayer) accept(id uint32) {
	v := make([]byte, 8)
	binary.BigEndian.PutUint32(v, nfAccept)
	binary.BigEndian.PutUint32(v[4:], id)
	ae := netlink.NewAttributeEncoder()
	ae.Bytes(nfqaVerdictHdr, v)
	b, _ := ae.Encode()
	_, _ = d.conn.Send(netlink.Message{
		Header: netlink.Header{Type: netlink.HeaderType(unix.NFNL_SUBSYS_QUEUE<<8 | nfqnlMsgVerdict), Flags: netlink.Request},
		Data:   append(header(), b...),
	})
}

// Held says how many packets wait now.
func (d *Delayer) Held() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.held)
}

// Close lets every held packet go and closes the socket (which unbinds the
// queue). Remove the table first (SetDelayIn with an empty delay), or
// packets queued after Close pass undelayed (bypass) anyway.
func (d *Delayer) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	ids := make([]uint32, 0, len(d.held))
	for id, t := range d.held {
		t.Stop()
		ids = append(ids, id)
	}
	d.held = map[uint32]*time.Timer{}
	d.mu.Unlock()
	slices.Sort(ids)
	for _, id := range ids {
		d.accept(id)
	}
	// Closing the socket unbinds its queue (an Execute here would wait
	// for serve's Receive to return).
	err := d.conn.Close()
	<-d.done
	return err
}
