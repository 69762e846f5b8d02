package netcut

import (
	"encoding/binary"
	"fmt"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// DupTable is the nftables table in which a namespace sends a share of its
// packets to some peers twice (the link-duplicate fault): `ip daddr @twice
// numgen random mod 100 < Percent dup to ip daddr` on the output hook, a
// copy of the packet sent to the same peer beside the packet itself. A
// table apart from the cut's, the loss's and the delay's.
const DupTable = "fencecheck-dup"

const dupSetName = "twice"

// DupTableOf is the table a run's own duplication lives in on a shared host.
func DupTableOf(run string) string { return DupTable + "-" + run }

// SetDupIn makes the namespace of conn send d.Percent percent of the
// packets to d.Peers twice (a Loss names the peers and the share), in the
// table named name, replacing the earlier rule; an empty one removes the
// table.
func SetDupIn(conn *nftables.Conn, name string, d Loss) error {
	if d.Percent < 0 || d.Percent > 100 {
		return fmt.Errorf("netcut: %d%% of packets sent twice is not a share", d.Percent)
	}
	table := tableNamed(name)
	conn.AddTable(table)
	conn.DelTable(table)
	if !d.empty() {
		conn.AddTable(table)
		set, err := addSet(conn, table, dupSetName, d.Peers)
		if err != nil {
			return err
		}
		limit := make([]byte, 4)
		binary.BigEndian.PutUint32(limit, uint32(d.Percent))
		policy := nftables.ChainPolicyAccept
		chain := conn.AddChain(&nftables.Chain{Name: "output", Table: table, Type: nftables.ChainTypeFilter,
			Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityFilter, Policy: &policy})
		conn.AddRule(&nftables.Rule{Table: table, Chain: chain, Exprs: []expr.Any{
			// The destination stays in register 1 for dup; the draw is in 2.
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
			&expr.Lookup{SourceRegister: 1, SetName: set.Name, SetID: set.ID},
			&expr.Numgen{Register: 2, Modulus: 100, Type: unix.NFT_NG_RANDOM},
			&expr.Byteorder{SourceRegister: 2, DestRegister: 2, Op: expr.ByteorderHton, Len: 4, Size: 4},
			&expr.Cmp{Op: expr.CmpOpLt, Register: 2, Data: limit},
			&expr.Counter{},
			&expr.Dup{RegAddr: 1},
		}})
	}
	if err := conn.Flush(); err != nil {
		return fmt.Errorf("netcut: programming nftables: %w", err)
	}
	return nil
}
