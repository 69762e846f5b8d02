package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/fencecheck/fencecheck/fencing"
)

// Backend is one kind of store the adapter can serve the Fencing API over.
// Adding one is one file with an init that calls registerBackend, e.g.
//
//	func init() {
//		var addr string
//		registerBackend("redis", Backend{
//			Usage: "state in one Redis server",
//			Flags: func(fs *flag.FlagSet) { fs.StringVar(&addr, "redis-addr", "", "Redis host:port") },
//			Open: func(ctx context.Context, cfg Config) (fencing.Store, fencing.ServerOptions, error) {
//				return redis.OpenStore(redis.StoreOptions{Addr: addr}), cfg.ServerOptions(), nil
//			},
//		})
//	}
//
// A backend's own flags are named after it (--redis-addr) and may fall back
// to environment variables (cfg.Getenv) for container set-ups.
type Backend struct {
	// Usage is a one-line description for --help.
	Usage string
	// Flags registers the backend's own flags; nil when it has none.
	Flags func(fs *flag.FlagSet)
	// Bugs is true for backends that understand --bug (the reference).
	Bugs bool
	// Open builds the store once flags are parsed, and the server options
	// to serve it with (usually cfg.ServerOptions()).
	Open func(ctx context.Context, cfg Config) (fencing.Store, fencing.ServerOptions, error)
}

// Config is what every backend gets from the common flags.
type Config struct {
	// Data is the --data directory ("" when not given).
	Data string
	// Clock is the server's clock (skewed through --clock-offset-file).
	Clock fencing.Clock
	// SealKey is --seal-key (nil: tokens are not authenticated).
	SealKey []byte
	// Bugs are the --bug names, unparsed (only backends with Bugs set get
	// any).
	Bugs []string
	// Getenv reads the environment (replaced in tests).
	Getenv func(string) string
	// Log receives start-up messages.
	Log io.Writer
}

// ServerOptions are the plain options: the seal key, no bugs.
func (c Config) ServerOptions() fencing.ServerOptions {
	return fencing.ServerOptions{SealKey: c.SealKey}
}

var backends = map[string]Backend{}

func registerBackend(name string, b Backend) {
	if _, dup := backends[name]; dup {
		panic("fenced: backend " + name + " registered twice")
	}
	backends[name] = b
}

func backendNames() []string {
	names := make([]string, 0, len(backends))
	for n := range backends {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func backendHelp() string {
	var b strings.Builder
	for _, n := range backendNames() {
		fmt.Fprintf(&b, "  %-8s %s\n", n, backends[n].Usage)
	}
	return b.String()
}
