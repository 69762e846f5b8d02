package docker

import (
	"context"
	"fmt"
	"net"
	"strings"

	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/errdefs"
)

// Network is the run's user-defined bridge network. Containers get static
// addresses on it so that partition rules naming peer IPs stay right across
// restarts.
type Network struct {
	ID     string
	Name   string
	Subnet *net.IPNet
}

// HostIP is the address of the i-th host (i >= 0) on the network: .10+i, well
// clear of the gateway at .1.
func (n *Network) HostIP(i int) string {
	ip := n.Subnet.IP.To4()
	return net.IPv4(ip[0], ip[1], ip[2], byte(10+i)).String()
}

// candidateSubnets are the /24s tried for run networks, in order: 10.213.x.0/24
// is far from Docker's default pools (172.17-31/16, 192.168/20) and from
// common LAN ranges.
func candidateSubnets() []*net.IPNet {
	var out []*net.IPNet
	for x := 0; x < 256; x++ {
		out = append(out, &net.IPNet{IP: net.IPv4(10, 213, byte(x), 0).To4(), Mask: net.CIDRMask(24, 32)})
	}
	return out
}

func overlaps(a, b *net.IPNet) bool { return a.Contains(b.IP) || b.Contains(a.IP) }

// usedSubnets are the subnets of every Docker network and host interface:
// a run network must clash with none of them.
func (r *Runtime) usedSubnets(ctx context.Context) ([]*net.IPNet, error) {
	var used []*net.IPNet
	nets, err := r.cli.NetworkList(ctx, network.ListOptions{})
	if err != nil {
		return nil, wrapUnavailable(err)
	}
	for _, n := range nets {
		for _, c := range n.IPAM.Config {
			if _, sn, err := net.ParseCIDR(c.Subnet); err == nil {
				used = append(used, sn)
			}
		}
	}
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil {
				used = append(used, &net.IPNet{IP: ipn.IP.Mask(ipn.Mask), Mask: ipn.Mask})
			}
		}
	}
	return used, nil
}

// Network creates the run's network on first use (a free /24 from
// 10.213.0.0/16) and returns it.
func (r *Runtime) Network(ctx context.Context) (*Network, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.network != nil {
		return r.network, nil
	}
	used, err := r.usedSubnets(ctx)
	if err != nil {
		return nil, err
	}
	name := "fencecheck-" + r.runID
	var lastErr error
	for _, sn := range candidateSubnets() {
		clash := false
		for _, u := range used {
			if overlaps(sn, u) {
				clash = true
				break
			}
		}
		if clash {
			continue
		}
		gw := net.IPv4(sn.IP[0], sn.IP[1], sn.IP[2], 1).String()
		resp, err := r.cli.NetworkCreate(ctx, name, network.CreateOptions{
			Driver: "bridge",
			IPAM:   &network.IPAM{Config: []network.IPAMConfig{{Subnet: sn.String(), Gateway: gw}}},
			Labels: r.labels(nil),
		})
		if err != nil {
			// Another run may have taken the subnet between our look and our
			// create: try the next one.
			if errdefs.IsForbidden(err) || strings.Contains(err.Error(), "overlap") {
				lastErr = err
				continue
			}
			return nil, fmt.Errorf("creating network %s: %w", name, wrapUnavailable(err))
		}
		r.network = &Network{ID: resp.ID, Name: name, Subnet: sn}
		return r.network, nil
	}
	return nil, fmt.Errorf("creating network %s: no free /24 in 10.213.0.0/16 (last error: %v)", name, lastErr)
}
