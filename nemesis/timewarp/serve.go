package timewarp

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// Serve keeps the processes in scope at an offset it is told over r, one
// command a line, one answer a line on w. It is the helper's side of clock
// faults on a container that fencecheck cannot see from its own machine
// (Docker Desktop, a remote engine): cmd/timewarp runs it in a container
// that joins the target's PID namespace with only CAP_SYS_PTRACE, attached
// through the engine's API.
//
//	offset NS   move every process in scope to NS nanoseconds from real
//	            time, patching the ones not patched yet
//	            -> "ok processes=N injected=M preload-only=K"
//	sync        give processes that appeared since (a restart) the offset
//	            in force -> the same answer
//	status      -> "ok offset=NS"
//	quit        -> "ok", and Serve returns (the offset stays)
//
// A malformed or failed command answers "error <why>" (one line) and
// Serve goes on. At the end of r (the harness went away), Serve sets the
// offset back to 0 first, if it ever set one: a helper never leaves a
// skewed clock behind.
func Serve(r io.Reader, w io.Writer, scope Scope, opts GroupOptions) error {
	g := NewGroup(scope, opts)
	defer g.Close()
	in := bufio.NewScanner(r)
	answer := func(format string, args ...any) error {
		_, err := fmt.Fprintf(w, format+"\n", args...)
		return err
	}
	report := func(rep Report, err error) error {
		if err != nil {
			return answer("error %s", oneLine(err.Error()))
		}
		return answer("ok processes=%d injected=%d preload-only=%d", rep.Processes, rep.Injected, rep.PreloadOnly)
	}
	for in.Scan() {
		f := strings.Fields(in.Text())
		if len(f) == 0 {
			continue
		}
		var err error
		switch {
		case f[0] == "offset" && len(f) == 2:
			ns, perr := strconv.ParseInt(f[1], 10, 64)
			if perr != nil {
				err = answer("error offset %q is not a number of nanoseconds", f[1])
				break
			}
			err = report(g.SetOffset(time.Duration(ns)))
		case f[0] == "sync" && len(f) == 1:
			err = report(g.Sync())
		case f[0] == "status" && len(f) == 1:
			err = answer("ok offset=%d", int64(g.Offset()))
		case f[0] == "quit" && len(f) == 1:
			return answer("ok")
		default:
			err = answer("error unknown command %q (offset NS, sync, status, quit)", in.Text())
		}
		if err != nil {
			return err
		}
	}
	if g.Offset() != 0 {
		if _, err := g.SetOffset(0); err != nil {
			return fmt.Errorf("healing at the end of the commands: %w", err)
		}
	}
	return in.Err()
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
