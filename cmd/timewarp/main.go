// Command timewarp moves the wall clock of running, unmodified processes
// (fencecheck's clock faults) without touching the machine's clock. It is
// the injector of package nemesis/timewarp as a small static program, made
// to run in a helper container that joins a target container's PID
// namespace with only CAP_SYS_PTRACE:
//
//	docker run -i --rm --pid container:TARGET --cap-drop ALL --cap-add SYS_PTRACE \
//	    IMAGE /timewarp serve
//
// Usage:
//
//	timewarp serve [--pid PID | --pgid PGID] [--syscall]
//	    keep the processes in PID's PID namespace (default 1: this
//	    container's, the helper itself excluded), or in process group PGID,
//	    at the offset given on stdin: "offset NS", "sync", "status", "quit",
//	    one answer line each; at the end of stdin the offset goes back to 0
//	timewarp set --pid PID --offset DURATION [--syscall]
//	    patch one process if it is not patched yet, and set its offset
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/fencecheck/fencecheck/nemesis/timewarp"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

const usage = `usage: timewarp serve [--pid PID | --pgid PGID] [--syscall]
       timewarp set --pid PID --offset DURATION [--syscall]`

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, usage)
		return 64
	}
	fs := flag.NewFlagSet("timewarp "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	pid := fs.Int("pid", 0, "a process (serve: every process in its PID namespace)")
	pgid := fs.Int("pgid", 0, "serve: the processes of this process group")
	offset := fs.Duration("offset", 0, "set: the offset from real time (e.g. -90s)")
	sys := fs.Bool("syscall", false, "read the real clock with the system call, not the vDSO's code")
	if err := fs.Parse(args[1:]); err != nil {
		return 64
	}
	opts := timewarp.Options{Syscall: *sys}
	switch args[0] {
	case "serve":
		if *pid != 0 && *pgid != 0 {
			fmt.Fprintln(stderr, "timewarp serve: give --pid or --pgid, not both")
			return 64
		}
		scope := timewarp.PIDNamespace(1)
		switch {
		case *pgid != 0:
			scope = timewarp.ProcessGroup(*pgid)
		case *pid != 0:
			scope = timewarp.PIDNamespace(*pid)
		}
		if err := timewarp.Serve(stdin, stdout, scope, timewarp.GroupOptions{Inject: opts}); err != nil {
			fmt.Fprintln(stderr, "timewarp serve:", err)
			return 1
		}
		return 0
	case "set":
		if *pid == 0 {
			fmt.Fprintln(stderr, "timewarp set: --pid is required")
			return 64
		}
		if err := set(*pid, *offset, opts, stdout); err != nil {
			fmt.Fprintln(stderr, "timewarp set:", err)
			return 1
		}
		return 0
	}
	fmt.Fprintln(stderr, usage)
	return 64
}

func set(pid int, offset time.Duration, opts timewarp.Options, stdout io.Writer) error {
	p, err := timewarp.Inject(pid, opts)
	if err != nil {
		return err
	}
	defer p.Close()
	if err := p.SetOffset(offset); err != nil {
		return err
	}
	got, err := p.Offset()
	if err != nil {
		return err
	}
	if got != offset {
		return errors.New("the offset did not stick")
	}
	how := "patched"
	if p.Reused {
		how = "already patched"
	}
	fmt.Fprintf(stdout, "pid %d %s (%v, real clock through %s): offset %v\n", pid, how, p.Patched, p.Real, offset)
	return nil
}
