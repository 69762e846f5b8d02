package netcut

import (
	"bufio"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"

	"github.com/google/nftables"
)

// Serve keeps the namespace of conn cut off from the peers it is told over
// r, one command a line, one answer a line on w: the helper's side of
// partitions (cmd/netcut).
//
//	drop IP... [to IP...]
//	            drop every packet from and to exactly the first peers, and
//	            the connections this namespace opens to the peers after
//	            "to" (a one-way cut, Cut); none: heal -> "ok dropping=N"
//	            ("ok dropping=N to=M" when M > 0)
//	heal        the same as "drop" with no peer
//	status      read back from the kernel -> "ok dropping=IP,IP" ("ok
//	            dropping=" when none; " to=IP,IP" follows when one-way)
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
			c, perr := parseCut(f[1:])
			if perr != nil {
				err = answer("error %s", perr)
				break
			}
			if serr := SetCutIn(conn, Table, c); serr != nil {
				err = answer("error %s", oneLine(serr.Error()))
				break
			}
			cut = cut || len(c.Both) > 0 || len(c.To) > 0
			err = answer("ok %s", counts(c))
		case f[0] == "status" && len(f) == 1:
			c, derr := CutIn(conn, Table)
			if derr != nil {
				err = answer("error %s", oneLine(derr.Error()))
				break
			}
			if len(c.To) > 0 {
				err = answer("ok dropping=%s to=%s", join(c.Both), join(c.To))
				break
			}
			err = answer("ok dropping=%s", join(c.Both))
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
		if err := SetCutIn(conn, Table, Cut{}); err != nil {
			return fmt.Errorf("healing at the end of the commands: %w", err)
		}
	}
	return in.Err()
}

// parseCut reads "IP... [to IP...]".
func parseCut(f []string) (Cut, error) {
	both, to := f, []string(nil)
	if i := slices.Index(f, "to"); i >= 0 {
		both, to = f[:i], f[i+1:]
	}
	var c Cut
	var err error
	if c.Both, err = ParsePeers(both); err != nil {
		return Cut{}, err
	}
	if c.To, err = ParsePeers(to); err != nil {
		return Cut{}, err
	}
	return c, nil
}

// Command is the helper's drop command for c (Serve).
func Command(both, to []string) string {
	cmd := strings.TrimSpace("drop " + strings.Join(both, " "))
	if len(to) > 0 {
		cmd += " to " + strings.Join(to, " ")
	}
	return cmd
}

// counts is Serve's answer to a drop of c.
func counts(c Cut) string { return Counts(len(c.Both), len(c.To)) }

// Counts is Serve's answer to a drop of both and to peers, past "ok ".
func Counts(both, to int) string {
	if to > 0 {
		return fmt.Sprintf("dropping=%d to=%d", both, to)
	}
	return fmt.Sprintf("dropping=%d", both)
}

func join(peers []netip.Addr) string {
	s := make([]string, len(peers))
	for i, p := range peers {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
