// Command netcut cuts the network namespace it runs in off from peer
// addresses (fencecheck's partitions) with an nftables table of its own. It
// is package nemesis/netcut as a small static program, made to run in a
// helper container that joins a target container's network namespace with
// only CAP_NET_ADMIN:
//
//	docker run -i --rm --network container:TARGET --cap-drop ALL --cap-add NET_ADMIN \
//	    IMAGE /netcut serve
//
// Usage:
//
//	netcut serve
//	    keep the namespace cut off from the peers given on stdin: "drop IP...",
//	    "heal", "status", "quit", one answer line each; at the end of stdin
//	    the cut is healed
//	netcut drop IP...
//	    cut once and exit (no IP: heal)
//	netcut status
//	    print the peers dropped now
package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/google/nftables"

	"github.com/fencecheck/fencecheck/nemesis/netcut"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

const usage = `usage: netcut serve
       netcut drop [IP...]
       netcut status`

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, usage)
		return 64
	}
	conn := &nftables.Conn{} // this process's network namespace
	switch args[0] {
	case "serve":
		if len(args) != 1 {
			break
		}
		if err := netcut.Serve(stdin, stdout, conn); err != nil {
			fmt.Fprintln(stderr, "netcut serve:", err)
			return 1
		}
		return 0
	case "drop":
		peers, err := netcut.ParsePeers(args[1:])
		if err != nil {
			fmt.Fprintln(stderr, "netcut drop:", err)
			return 64
		}
		if err := netcut.Set(conn, peers); err != nil {
			fmt.Fprintln(stderr, "netcut drop:", err)
			return 1
		}
		return 0
	case "status":
		if len(args) != 1 {
			break
		}
		peers, err := netcut.Dropping(conn)
		if err != nil {
			fmt.Fprintln(stderr, "netcut status:", err)
			return 1
		}
		s := make([]string, len(peers))
		for i, p := range peers {
			s[i] = p.String()
		}
		fmt.Fprintln(stdout, strings.Join(s, " "))
		return 0
	}
	fmt.Fprintln(stderr, usage)
	return 64
}
