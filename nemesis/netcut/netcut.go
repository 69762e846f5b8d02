// Package netcut cuts one network namespace off from a set of peer
// addresses: every IPv4 packet from or to a peer is dropped, or, one way,
// the connections the namespace opens to a peer (Cut), by an nftables
// table of the project's own in that namespace. It is the partition fault
// for a container whose namespace fencecheck cannot enter from its own
// machine (Docker Desktop, a rootless or remote engine): cmd/netcut runs it
// in a helper container that joins the target container's network
// namespace with only CAP_NET_ADMIN, spoken to over its attached stdin and
// stdout (Serve).
//
// It programs nftables through netlink from Go (package
// github.com/google/nftables), so the helper is one static binary that
// cross-compiles for whatever engine it goes to, rather than Debian's
// iptables and its libraries and plugins copied out of this machine (which
// a macOS or Windows host running Docker Desktop does not have).
//
// The table (family ip, named Table) holds a set of the peers, a set of the
// peers cut one way, and two base chains, on the input and output hooks,
// that drop packets whose source (input) or destination (output) is in the
// first set, or in the second with the conntrack direction of a connection
// this side opened. Set replaces the whole
// table in one netlink batch, so a change is atomic and a heal leaves
// nothing behind: the namespace's other rules (Docker's own DNS rules) are
// never touched. A drop in any base chain is final, whatever the other
// tables accept.
package netcut

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
)

// Table is the nftables table netcut owns in a namespace.
const Table = "fencecheck"

const setName = "peers"

// TableOf is the table a run's own cut lives in on a host that fencecheck
// shares with others (an SSH host): tagged with the run, so that neither a
// second run nor a sweep takes another run's rules for its own.
func TableOf(run string) string { return Table + "-" + run }

func tableNamed(name string) *nftables.Table {
	return &nftables.Table{Family: nftables.TableFamilyIPv4, Name: name}
}

// ParsePeers parses IPv4 addresses, sorted and without duplicates.
func ParsePeers(addrs []string) ([]netip.Addr, error) {
	out := make([]netip.Addr, 0, len(addrs))
	for _, s := range addrs {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("peer %q is not an IP address", s)
		}
		if !a.Is4() {
			return nil, fmt.Errorf("peer %s: only IPv4 peers can be cut (the run networks are IPv4)", s)
		}
		out = append(out, a)
	}
	slices.SortFunc(out, func(a, b netip.Addr) int { return a.Compare(b) })
	return slices.Compact(out), nil
}

// Cut is what one namespace drops. Both: every packet from and to these
// peers. To: the peers it cannot reach, one way: the connections it opens
// to them are dropped (their first packet and everything after, both ways),
// while the connections they open to it carry on as before, its answers
// included. A one-way cut is by connection, not by packet, because of TCP:
// dropping every packet one way would also kill the other side's
// connections (their handshakes need answers), which is a two-way cut in
// all but name. Conntrack tells the two apart (ct direction original is the
// side that opened the connection); for UDP a "connection" is a flow of
// datagrams, so the side that cannot reach may still answer datagrams the
// other side sent first.
type Cut struct {
	Both, To []netip.Addr
}

// Set makes the namespace of conn drop every packet from and to peers,
// replacing what it dropped before; no peers heals (removes the table).
func Set(conn *nftables.Conn, peers []netip.Addr) error { return SetIn(conn, Table, peers) }

// SetIn is Set on the table named name.
func SetIn(conn *nftables.Conn, name string, peers []netip.Addr) error {
	return SetCutIn(conn, name, Cut{Both: peers})
}

// SetCutIn makes the namespace of conn drop exactly c, replacing what it
// dropped before; an empty cut heals (removes the table).
func SetCutIn(conn *nftables.Conn, name string, c Cut) error {
	table := tableNamed(name)
	// "add table" is a no-op when it exists, so the delete that follows
	// never fails: the nft command's own way to replace a table atomically.
	conn.AddTable(table)
	conn.DelTable(table)
	if len(c.Both) > 0 || len(c.To) > 0 {
		conn.AddTable(table)
		both, err := addSet(conn, table, setName, c.Both)
		if err != nil {
			return err
		}
		to, err := addSet(conn, table, toSetName, c.To)
		if err != nil {
			return err
		}
		policy := nftables.ChainPolicyAccept
		for _, hook := range []struct {
			name   string
			hook   *nftables.ChainHook
			offset uint32 // of the address to match in the IPv4 header
			// dir is the conntrack direction dropped from and to To's
			// peers: on output, what this side opened; on input, the
			// answers to it.
			dir byte
		}{
			{"input", nftables.ChainHookInput, 12, ctDirReply},      // source
			{"output", nftables.ChainHookOutput, 16, ctDirOriginal}, // destination
		} {
			chain := conn.AddChain(&nftables.Chain{Name: hook.name, Table: table, Type: nftables.ChainTypeFilter,
				Hooknum: hook.hook, Priority: nftables.ChainPriorityFilter, Policy: &policy})
			addr := &expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: hook.offset, Len: 4}
			conn.AddRule(&nftables.Rule{Table: table, Chain: chain, Exprs: []expr.Any{
				addr,
				&expr.Lookup{SourceRegister: 1, SetName: both.Name, SetID: both.ID},
				&expr.Counter{},
				&expr.Verdict{Kind: expr.VerdictDrop},
			}})
			if len(c.To) > 0 {
				conn.AddRule(&nftables.Rule{Table: table, Chain: chain, Exprs: []expr.Any{
					addr,
					&expr.Lookup{SourceRegister: 1, SetName: to.Name, SetID: to.ID},
					&expr.Ct{Register: 1, Key: expr.CtKeyDIRECTION},
					&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{hook.dir}},
					&expr.Counter{},
					&expr.Verdict{Kind: expr.VerdictDrop},
				}})
			}
		}
	}
	if err := conn.Flush(); err != nil {
		return fmt.Errorf("netcut: programming nftables: %w", err)
	}
	return nil
}

// Conntrack's directions (IP_CT_DIR_ORIGINAL, IP_CT_DIR_REPLY).
const (
	ctDirOriginal = 0
	ctDirReply    = 1
)

const toSetName = "unreachable"

func addSet(conn *nftables.Conn, table *nftables.Table, name string, peers []netip.Addr) (*nftables.Set, error) {
	set := &nftables.Set{Table: table, Name: name, KeyType: nftables.TypeIPAddr}
	elems := make([]nftables.SetElement, len(peers))
	for i, p := range peers {
		b := p.As4()
		elems[i] = nftables.SetElement{Key: b[:]}
	}
	if err := conn.AddSet(set, elems); err != nil {
		return nil, fmt.Errorf("netcut: %w", err)
	}
	return set, nil
}

// Dropping reads back from the kernel which peers the namespace drops
// both ways (none when the table is absent).
func Dropping(conn *nftables.Conn) ([]netip.Addr, error) { return DroppingIn(conn, Table) }

// DroppingIn is Dropping of the table named name.
func DroppingIn(conn *nftables.Conn, name string) ([]netip.Addr, error) {
	c, err := CutIn(conn, name)
	return c.Both, err
}

// CutIn reads back from the kernel the cut of the table named name (empty
// when the table is absent).
func CutIn(conn *nftables.Conn, name string) (Cut, error) {
	table := tableNamed(name)
	tables, err := conn.ListTablesOfFamily(nftables.TableFamilyIPv4)
	if err != nil {
		return Cut{}, fmt.Errorf("netcut: listing tables: %w", err)
	}
	if !slices.ContainsFunc(tables, func(t *nftables.Table) bool { return t.Name == name }) {
		return Cut{}, nil
	}
	var c Cut
	if c.Both, err = readSet(conn, table, setName); err != nil {
		return Cut{}, err
	}
	// A table written before one-way cuts has no such set.
	if sets, err := conn.GetSets(table); err == nil && slices.ContainsFunc(sets, func(s *nftables.Set) bool { return s.Name == toSetName }) {
		if c.To, err = readSet(conn, table, toSetName); err != nil {
			return Cut{}, err
		}
	}
	return c, nil
}

func readSet(conn *nftables.Conn, table *nftables.Table, name string) ([]netip.Addr, error) {
	set, err := conn.GetSetByName(table, name)
	if err != nil {
		return nil, fmt.Errorf("netcut: reading the peer set: %w", err)
	}
	elems, err := conn.GetSetElements(set)
	if err != nil {
		return nil, fmt.Errorf("netcut: reading the peer set: %w", err)
	}
	out := make([]netip.Addr, 0, len(elems))
	for _, e := range elems {
		a, ok := netip.AddrFromSlice(e.Key)
		if !ok {
			return nil, errors.New("netcut: a peer set element is not an address")
		}
		out = append(out, a)
	}
	slices.SortFunc(out, func(a, b netip.Addr) int { return a.Compare(b) })
	return out, nil
}
