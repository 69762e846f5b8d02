// Command fenced is fencecheck's Fencing API v1 server as a static binary:
// the reference (--backend memory) or the adapter in front of etcd or Redis,
// run in a container built FROM scratch.
//
//	fenced --addr HOST:PORT --backend memory --data DIR [--seal-key K]
//	       [--bug NAME,...] [--clock-offset-file PATH]
//
// It stops gracefully on SIGTERM or SIGINT: in-flight requests finish, then
// the store closes. Exit status: 0 after a clean stop, 1 when it could not
// run, 64 on a usage error.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/fencecheck/fencecheck/fencing"
	"github.com/fencecheck/fencecheck/targets/memory"
)

const (
	exitOK    = 0
	exitError = 1
	exitUsage = 64
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stderr, os.Getenv, nil))
}

// run is the whole command; ready, when set, gets the listening address.
func run(ctx context.Context, args []string, stderr io.Writer, getenv func(string) string, ready func(addr string)) int {
	fs := flag.NewFlagSet("fenced", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:7000", "listen address HOST:PORT (port 0: any free port)")
	backend := fs.String("backend", "memory", "store backend (see below)")
	data := fs.String("data", "", "data directory (memory backend)")
	sealKey := fs.String("seal-key", "", "authenticate tokens with this HMAC-SHA256 key (env FENCECHECK_SEAL_KEY)")
	bugs := fs.String("bug", "", "comma-separated bug switches of the reference (memory backend only)")
	clockFile := fs.String("clock-offset-file", "", "read a clock offset (ns) from this file (env "+fencing.ClockFileEnv+")")
	for _, n := range backendNames() {
		if f := backends[n].Flags; f != nil {
			f(fs)
		}
	}
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: fenced --addr HOST:PORT --backend NAME [flags]\n\nbackends:\n%s\nflags:\n", backendHelp())
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "fenced: unexpected arguments %q\n", fs.Args())
		return exitUsage
	}
	b, ok := backends[*backend]
	if !ok {
		fmt.Fprintf(stderr, "fenced: unknown backend %q\nbackends:\n%s", *backend, backendHelp())
		return exitUsage
	}
	if *bugs != "" && !b.Bugs {
		fmt.Fprintf(stderr, "fenced: --bug applies to the memory backend only, not %s\n", *backend)
		return exitUsage
	}
	if *bugs != "" {
		if _, err := memory.ParseBugs(*bugs); err != nil {
			fmt.Fprintf(stderr, "fenced: %v\n", err)
			return exitUsage
		}
	}
	cfg := Config{Data: *data, Clock: fencing.SystemClock, Getenv: getenv, Log: stderr}
	if *bugs != "" {
		cfg.Bugs = []string{*bugs}
	}
	if *sealKey == "" {
		*sealKey = getenv("FENCECHECK_SEAL_KEY")
	}
	if *sealKey != "" {
		cfg.SealKey = []byte(*sealKey)
	}
	if *clockFile == "" {
		*clockFile = getenv(fencing.ClockFileEnv)
	}
	if *clockFile != "" {
		cfg.Clock = fencing.FileOffsetClock(*clockFile)
	}

	store, opts, err := b.Open(ctx, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "fenced: %v\n", err)
		return exitError
	}
	defer store.Close()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintf(stderr, "fenced: %v\n", err)
		return exitError
	}
	srv := &http.Server{
		Handler:           fencing.NewServer(store, opts),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
	}
	fmt.Fprintf(stderr, "fenced: Fencing API v1 on http://%s (backend %s, sealed %t, bugs %q, clock file %q)\n",
		ln.Addr(), *backend, len(opts.SealKey) > 0, *bugs, *clockFile)
	if ready != nil {
		ready(ln.Addr().String())
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		fmt.Fprintf(stderr, "fenced: %v\n", err)
		return exitError
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close()
	}
	fmt.Fprintln(stderr, "fenced: stopped")
	return exitOK
}
