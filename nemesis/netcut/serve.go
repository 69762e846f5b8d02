package netcut

import (
	"bufio"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

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
//	lose P IP...
//	            lose P percent of the packets sent to exactly these peers,
//	            at random (Loss, a table apart from the cut's); no peer or
//	            P 0: the loss healed -> "ok losing=N percent=P"
//	dup P IP... send P percent of the packets to exactly these peers
//	            twice (SetDupIn); no peer or P 0: healed -> "ok
//	            duplicating=N percent=P"
//	delay MS JITTER IP...
//	            hold what is sent to exactly these peers MS ± JITTER
//	            milliseconds (Delay, a Delayer in this process); no peer
//	            or MS 0: healed -> "ok delaying=N ms=MS jitter=JITTER"
//	status      read back from the kernel -> "ok dropping=IP,IP" ("ok
//	            dropping=" when none; " to=IP,IP" follows when one-way)
//	quit        -> "ok", and Serve returns (the rules stay)
//
// A malformed or failed command answers "error <why>" (one line) and Serve
// goes on. At the end of r (the harness went away) Serve heals first, if it
// ever cut or lost anything: a helper never leaves a partition or a loss
// behind.
func Serve(r io.Reader, w io.Writer, conn *nftables.Conn) error {
	in := bufio.NewScanner(r)
	answer := func(format string, args ...any) error {
		_, err := fmt.Fprintf(w, format+"\n", args...)
		return err
	}
	cut, lost, duped := false, false, false
	var delayer *Delayer
	defer func() {
		if delayer != nil {
			delayer.Close()
		}
	}()
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
		case f[0] == "lose" && len(f) >= 2:
			l, perr := parseLoss(f[1:])
			if perr != nil {
				err = answer("error %s", perr)
				break
			}
			if serr := SetLossIn(conn, LossTable, l); serr != nil {
				err = answer("error %s", oneLine(serr.Error()))
				break
			}
			lost = lost || !l.empty()
			err = answer("ok %s", LossCounts(len(l.Peers), l.Percent))
		case f[0] == "dup" && len(f) >= 2:
			l, perr := parseLoss(f[1:])
			if perr != nil {
				err = answer("error %s", perr)
				break
			}
			if serr := SetDupIn(conn, DupTable, l); serr != nil {
				err = answer("error %s", oneLine(serr.Error()))
				break
			}
			duped = duped || !l.empty()
			err = answer("ok %s", DupCounts(len(l.Peers), l.Percent))
		case f[0] == "delay" && len(f) >= 3:
			d, perr := parseDelay(f[1:])
			if perr != nil {
				err = answer("error %s", perr)
				break
			}
			if serr := SetDelay(conn, &delayer, 0, d); serr != nil {
				err = answer("error %s", oneLine(serr.Error()))
				break
			}
			err = answer("ok %s", DelayCounts(len(d.Peers), d.Mean, d.Jitter))
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
			err = answer("error unknown command %q (drop IP..., lose P IP..., dup P IP..., delay MS JITTER IP..., heal, status, quit)", in.Text())
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
	if lost {
		if err := SetLossIn(conn, LossTable, Loss{}); err != nil {
			return fmt.Errorf("healing the loss at the end of the commands: %w", err)
		}
	}
	if duped {
		if err := SetDupIn(conn, DupTable, Loss{}); err != nil {
			return fmt.Errorf("healing the duplication at the end of the commands: %w", err)
		}
	}
	if delayer != nil {
		if err := SetDelay(conn, &delayer, 0, Delay{}); err != nil {
			return fmt.Errorf("healing the delay at the end of the commands: %w", err)
		}
	}
	return in.Err()
}

// parseLoss reads "P IP...".
func parseLoss(f []string) (Loss, error) {
	p, err := strconv.Atoi(f[0])
	if err != nil || p < 0 || p > 100 {
		return Loss{}, fmt.Errorf("%q is not a percentage", f[0])
	}
	peers, err := ParsePeers(f[1:])
	if err != nil {
		return Loss{}, err
	}
	return Loss{Peers: peers, Percent: p}, nil
}

// parseDelay reads "MS JITTER IP...".
func parseDelay(f []string) (Delay, error) {
	ms, err := strconv.Atoi(f[0])
	jitter, jerr := strconv.Atoi(f[1])
	if err != nil || jerr != nil || ms < 0 || jitter < 0 || jitter > ms {
		return Delay{}, fmt.Errorf("delay: %q ± %q are not milliseconds (jitter at most the delay)", f[0], f[1])
	}
	peers, err := ParsePeers(f[2:])
	if err != nil {
		return Delay{}, err
	}
	return Delay{Peers: peers, Mean: time.Duration(ms) * time.Millisecond, Jitter: time.Duration(jitter) * time.Millisecond}, nil
}

// DelayCommand is the helper's delay command (Serve): what is sent to
// peers held mean ± jitter; no peer heals the delay.
func DelayCommand(mean, jitter time.Duration, peers []string) string {
	return strings.TrimSpace(fmt.Sprintf("delay %d %d %s", mean.Milliseconds(), jitter.Milliseconds(), strings.Join(peers, " ")))
}

// DelayCounts is Serve's answer to a delay command, past "ok ".
func DelayCounts(peers int, mean, jitter time.Duration) string {
	if peers == 0 || mean <= 0 {
		return "delaying=0"
	}
	return fmt.Sprintf("delaying=%d ms=%d jitter=%d", peers, mean.Milliseconds(), jitter.Milliseconds())
}

// LossCommand is the helper's lose command (Serve): percent percent of the
// packets to peers lost; no peer heals the loss.
func LossCommand(percent int, peers []string) string {
	return strings.TrimSpace(fmt.Sprintf("lose %d %s", percent, strings.Join(peers, " ")))
}

// DupCommand is the helper's dup command (Serve).
func DupCommand(percent int, peers []string) string {
	return "dup" + strings.TrimPrefix(LossCommand(percent, peers), "lose")
}

// DupCounts is Serve's answer to a dup command, past "ok ".
func DupCounts(peers, percent int) string {
	return "duplicating" + strings.TrimPrefix(LossCounts(peers, percent), "losing")
}

// LossCounts is Serve's answer to a lose command, past "ok ".
func LossCounts(peers, percent int) string {
	if peers == 0 || percent == 0 {
		return "losing=0"
	}
	return fmt.Sprintf("losing=%d percent=%d", peers, percent)
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
