// Package netcut cuts one network namespace off from a set of peer
// addresses: every IPv4 packet from or to a peer is dropped, by an nftables
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
// The table (family ip, named Table) holds a set of the peers and two base
// chains, on the input and output hooks, that drop packets whose source
// (input) or destination (output) is in the set. Set replaces the whole
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

// Set makes the namespace of conn drop every packet from and to peers,
// replacing what it dropped before; no peers heals (removes the table).
func Set(conn *nftables.Conn, peers []netip.Addr) error { return SetIn(conn, Table, peers) }

// SetIn is Set on the table named name.
func SetIn(conn *nftables.Conn, name string, peers []netip.Addr) error {
	table := tableNamed(name)
	// "add table" is a no-op when it exists, so the delete that follows
	// never fails: the nft command's own way to replace a table atomically.
	conn.AddTable(table)
	conn.DelTable(table)
	if len(peers) > 0 {
		conn.AddTable(table)
		set := &nftables.Set{Table: table, Name: setName, KeyType: nftables.TypeIPAddr}
		elems := make([]nftables.SetElement, len(peers))
		for i, p := range peers {
			b := p.As4()
			elems[i] = nftables.SetElement{Key: b[:]}
		}
		if err := conn.AddSet(set, elems); err != nil {
			return fmt.Errorf("netcut: %w", err)
		}
		policy := nftables.ChainPolicyAccept
		for _, hook := range []struct {
			name   string
			hook   *nftables.ChainHook
			offset uint32 // of the address to match in the IPv4 header
		}{
			{"input", nftables.ChainHookInput, 12},   // source
			{"output", nftables.ChainHookOutput, 16}, // destination
		} {
			chain := conn.AddChain(&nftables.Chain{Name: hook.name, Table: table, Type: nftables.ChainTypeFilter,
				Hooknum: hook.hook, Priority: nftables.ChainPriorityFilter, Policy: &policy})
			conn.AddRule(&nftables.Rule{Table: table, Chain: chain, Exprs: []expr.Any{
				&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: hook.offset, Len: 4},
				&expr.Lookup{SourceRegister: 1, SetName: set.Name, SetID: set.ID},
				&expr.Counter{},
				&expr.Verdict{Kind: expr.VerdictDrop},
			}})
		}
	}
	if err := conn.Flush(); err != nil {
		return fmt.Errorf("netcut: programming nftables: %w", err)
	}
	return nil
}

// Dropping reads back from the kernel which peers the namespace drops (none
// when the table is absent).
func Dropping(conn *nftables.Conn) ([]netip.Addr, error) { return DroppingIn(conn, Table) }

// DroppingIn is Dropping of the table named name.
func DroppingIn(conn *nftables.Conn, name string) ([]netip.Addr, error) {
	table := tableNamed(name)
	tables, err := conn.ListTablesOfFamily(nftables.TableFamilyIPv4)
	if err != nil {
		return nil, fmt.Errorf("netcut: listing tables: %w", err)
	}
	if !slices.ContainsFunc(tables, func(t *nftables.Table) bool { return t.Name == name }) {
		return nil, nil
	}
	set, err := conn.GetSetByName(table, setName)
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
