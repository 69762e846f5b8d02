// Command fencehost is fencecheck's helper on a host it reaches over SSH
// (package nemesis/hostagent): fencecheck copies it to each host of a run
// (by SFTP, into the run's folder there) and runs it for the run's length.
// It starts the nodes' programs and carries out every fault on them; it
// holds a lease its controller renews every second, and when the lease runs
// out or the connection ends it heals what it did, kills what it started,
// unmounts its layers, removes its folder (itself included) and exits.
//
// Usage:
//
//	fencehost serve --run RUN --dir DIR [--lease 5s] [--keep]
//	    JSON lines on stdin and stdout (hostagent.Request, Response)
//	fencehost version
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/fencecheck/fencecheck/nemesis/hostagent"
)

func main() { os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)) }

const usage = `usage: fencehost serve --run RUN --dir DIR [--lease 5s] [--keep]
       fencehost version`

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, usage)
		return 64
	}
	switch args[0] {
	case "version":
		fmt.Fprintln(stdout, hostagent.Version)
		return 0
	case "serve":
	default:
		fmt.Fprintln(stderr, usage)
		return 64
	}
	fs := flag.NewFlagSet("fencehost serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var opts hostagent.Options
	keep := fs.Bool("keep", false, "keep the folder at the end (the nodes' data and logs, for a look)")
	fs.StringVar(&opts.Run, "run", "", "the run's id")
	fs.StringVar(&opts.Dir, "dir", "", "the agent's folder on this host")
	fs.DurationVar(&opts.Lease, "lease", hostagent.DefaultLease, "how long to wait for the controller's next line before healing and exiting")
	if err := fs.Parse(args[1:]); err != nil || fs.NArg() > 0 || opts.Run == "" || opts.Dir == "" {
		fmt.Fprintln(stderr, usage)
		return 64
	}
	opts.Remove = !*keep
	opts.Log = stderr
	// A hang-up (sshd closing the session) or a broken pipe must not kill
	// the agent before it heals: the end of stdin tells it the same.
	signal.Ignore(syscall.SIGHUP, syscall.SIGPIPE)
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM, syscall.SIGINT)
	r, w := io.Pipe()
	go func() { _, err := io.Copy(w, stdin); w.CloseWithError(err) }()
	go func() { <-term; w.CloseWithError(fmt.Errorf("terminated by a signal")) }()
	if err := hostagent.Serve(r, stdout, opts); err != nil {
		fmt.Fprintln(stderr, "fencehost:", err)
		return 1
	}
	return 0
}
