package netcut

import (
	"bufio"
	"fmt"
	"io"
	"net/netip"
	"strings"

	"github.com/google/nftables"
)

// Serve keeps the namespace of conn cut off from the peers it is told over
// r, one command a line, one answer a line on w: the helper's side of
// partitions (cmd/netcut).
//
//	drop IP...  drop every packet from and to exactly these peers (none:
//	            heal) -> "ok dropping=N"
//	heal        the same as "drop" with no peer
//	status      read back from the kernel -> "ok dropping=IP,IP" ("ok
//	            dropping=" when none)
//	quit        -> "ok", and Serve returns (the rules stay)
//
// A malformed or failed command answers "error <why>" (one line) and Serve
// goes on. At the end of r (the harness went away) Serve heals first, if it
// ever cut anything: a helper never leaves a partition behind.
func Serve(r io.Reader, w io.Writer, conn *nftables.Conn) error {
	in := bufio.NewScanner(r)
	answer := func(format string, args ...any) error {
		_, err := fmt.Fprintf(w, format+"\n", args...)
		return err
	}
	cut := false
	for in.Scan() {
		f := strings.Fields(in.Text())
		if len(f) == 0 {
			continue
		}
		var err error
		switch {
		case f[0] == "drop" || (f[0] == "heal" && len(f) == 1):
			peers, perr := ParsePeers(f[1:])
			if perr != nil {
				err = answer("error %s", perr)
				break
			}
			if serr := Set(conn, peers); serr != nil {
				err = answer("error %s", oneLine(serr.Error()))
				break
			}
			cut = cut || len(peers) > 0
			err = answer("ok dropping=%d", len(peers))
		case f[0] == "status" && len(f) == 1:
			peers, derr := Dropping(conn)
			if derr != nil {
				err = answer("error %s", oneLine(derr.Error()))
				break
			}
			err = answer("ok dropping=%s", join(peers))
		case f[0] == "quit" && len(f) == 1:
			return answer("ok")
		default:
			err = answer("error unknown command %q (drop IP..., heal, status, quit)", in.Text())
		}
		if err != nil {
			return err
		}
	}
	if cut {
		if err := Set(conn, nil); err != nil {
			return fmt.Errorf("healing at the end of the commands: %w", err)
		}
	}
	return in.Err()
}

func join(peers []netip.Addr) string {
	s := make([]string, len(peers))
	for i, p := range peers {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
