package netcut

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// LossTable is the nftables table in which a namespace loses a share of the
// packets it sends to some peers (the link-loss fault). It is a table apart
// from the cut's (Table), so a loss and a partition come and go
// independently: healing one leaves the other as it was.
const LossTable = "fencecheck-loss"

const lossSetName = "lossy"

// LossTableOf is the table a run's own loss lives in on a host that
// fencecheck shares with others (an SSH host), as TableOf is the cut's.
func LossTableOf(run string) string { return LossTable + "-" + run }

// Loss is what one namespace loses: Percent percent of the IPv4 packets it
// sends to the Peers, each packet drawn at random (nftables' `ip daddr
// @lossy numgen random mod 100 < Percent drop`, on the output hook). A link
// between two namespaces loses both ways when each loses to the other; the
// packets a namespace receives are never dropped here, so each direction of
// a link loses Percent percent, not more.
type Loss struct {
	Peers   []netip.Addr
	Percent int
}

func (l Loss) empty() bool { return len(l.Peers) == 0 || l.Percent <= 0 }

// SetLossIn makes the namespace of conn lose exactly l, in the table named
// name, replacing what it lost before; an empty loss (no peers, or 0 %)
// heals (removes the table).
func SetLossIn(conn *nftables.Conn, name string, l Loss) error {
	if l.Percent < 0 || l.Percent > 100 {
		return fmt.Errorf("netcut: a loss of %d%% is not a share of packets", l.Percent)
	}
	table := tableNamed(name)
	conn.AddTable(table)
	conn.DelTable(table)
	if !l.empty() {
		conn.AddTable(table)
		set, err := addSet(conn, table, lossSetName, l.Peers)
		if err != nil {
			return err
		}
		policy := nftables.ChainPolicyAccept
		chain := conn.AddChain(&nftables.Chain{Name: "output", Table: table, Type: nftables.ChainTypeFilter,
			Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityFilter, Policy: &policy})
		conn.AddRule(&nftables.Rule{Table: table, Chain: chain, Exprs: lossExprs(set, l.Percent)})
	}
	if err := conn.Flush(); err != nil {
		return fmt.Errorf("netcut: programming nftables: %w", err)
	}
	return nil
}

// lossExprs is `ip daddr @set numgen random mod 100 < percent counter
// drop`. numgen writes its number in host byte order; a comparison is of
// bytes, so, as nft itself does, the number is turned to network order
// before it is compared.
func lossExprs(set *nftables.Set, percent int) []expr.Any {
	limit := make([]byte, 4)
	binary.BigEndian.PutUint32(limit, uint32(percent))
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4}, // destination
		&expr.Lookup{SourceRegister: 1, SetName: set.Name, SetID: set.ID},
		&expr.Numgen{Register: 1, Modulus: 100, Type: unix.NFT_NG_RANDOM},
		&expr.Byteorder{SourceRegister: 1, DestRegister: 1, Op: expr.ByteorderHton, Len: 4, Size: 4},
		&expr.Cmp{Op: expr.CmpOpLt, Register: 1, Data: limit},
		&expr.Counter{},
		&expr.Verdict{Kind: expr.VerdictDrop},
	}
}

// LossOf reads back from the kernel the loss of the table named name
// (empty when the table is absent).
func LossOf(conn *nftables.Conn, name string) (Loss, error) {
	table := tableNamed(name)
	tables, err := conn.ListTablesOfFamily(nftables.TableFamilyIPv4)
	if err != nil {
		return Loss{}, fmt.Errorf("netcut: listing tables: %w", err)
	}
	if !slices.ContainsFunc(tables, func(t *nftables.Table) bool { return t.Name == name }) {
		return Loss{}, nil
	}
	var l Loss
	if l.Peers, err = readSet(conn, table, lossSetName); err != nil {
		return Loss{}, err
	}
	rules, err := conn.GetRules(table, &nftables.Chain{Name: "output", Table: table})
	if err != nil {
		return Loss{}, fmt.Errorf("netcut: reading the loss rule: %w", err)
	}
	for _, r := range rules {
		for _, e := range r.Exprs {
			if c, ok := e.(*expr.Cmp); ok && c.Op == expr.CmpOpLt && len(c.Data) == 4 {
				l.Percent = int(binary.BigEndian.Uint32(c.Data))
			}
		}
	}
	if l.Percent == 0 {
		return Loss{}, errors.New("netcut: the loss table has no loss rule")
	}
	return l, nil
}
