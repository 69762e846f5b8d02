package netcut

import (
	"net/netip"
	"testing"

	"github.com/google/nftables"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Duplication measured from the receiving socket: of 2000 datagrams sent
// to the peer, about 2000 × (1 + P) arrive; another address gets each
// once; the heal leaves no table.
func TestSetDupSendsItsShareTwice(t *testing.T) {
	ns := newNetNS(t)
	conn, err := nftables.New(nftables.WithNetNSFd(ns))
	require.NoError(t, err)
	t.Cleanup(func() { SetDupIn(conn, DupTable, Loss{}) })
	twice, got := countDatagrams(t, ns, "127.0.0.2:0")
	other, gotOther := countDatagrams(t, ns, "127.0.0.1:0")
	const n = 2000
	require.Equal(t, n, received(t, ns, twice, got, n))

	peers, err := ParsePeers([]string{"127.0.0.2"})
	require.NoError(t, err)
	require.NoError(t, SetDupIn(conn, DupTable, Loss{Peers: peers, Percent: 20}))
	arrived := received(t, ns, twice, got, n)
	t.Logf("20%% sent twice: %d datagrams arrived of %d sent (%.1f%% more)", arrived, n, 100*float64(arrived-n)/n)
	assert.InDelta(t, n*120/100, arrived, 100, "about 2400 arrive")
	assert.Equal(t, n, received(t, ns, other, gotOther, n), "another address gets each once")

	require.NoError(t, SetDupIn(conn, DupTable, Loss{}))
	assert.Equal(t, n, received(t, ns, twice, got, n), "healed")
	tables, err := conn.ListTablesOfFamily(nftables.TableFamilyIPv4)
	require.NoError(t, err)
	assert.Empty(t, tables)
	assert.Error(t, SetDupIn(conn, DupTable, Loss{Peers: []netip.Addr{netip.MustParseAddr("10.0.0.1")}, Percent: 101}))
}
