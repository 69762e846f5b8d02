// Package nodes is the node model: a target declares its nodes as data (a
// table of Node values) and this package runs them and carries out every
// fault on them, once per kind of node. A system's own package keeps only
// what is its own: images, configuration, adapters, the semantics it
// declares, and hooks such as "who is the leader" or "replace a member".
//
// A Cluster is a harness.Target (given a name and semantics) and offers the
// nemesis capabilities (Pauser, Restarter, PowerCutter, ClockSkewer,
// Partitioner) by dispatching on each node's kind:
//
//	kind        start/stop        pause            kill/restart          power loss         clock                          partition
//	in process  the server        request stall    kill, start again     lazyfs layer       injectable clock               (the target's hook)
//	process     exec, own group   SIGSTOP/SIGCONT  kill -9 of the group  lazyfs layer       vDSO patch, preload library    proxies only
//	container   engine API        freezer          kill + start          layer bind-mounted vDSO/preload, offset file      rules in its netns
//	ssh         host agent        SIGSTOP/SIGCONT  kill -9 of the group  lazyfs on the host  vDSO patch on the host          nftables on the host
//	url         -                 -                -                     -                  -                              proxies only
//
// A kind is a driver (driver.go); a new kind is a new driver and a new
// field on Node that selects it.
package nodes

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// Kind is how a node runs, and so how each fault reaches it.
type Kind string

const (
	// KindInProcess is a server inside this process (the reference).
	KindInProcess Kind = "in-process"
	// KindProcess is a program on this machine, in its own process group.
	KindProcess Kind = "process"
	// KindContainer is a container on the run's own network (harness/docker).
	KindContainer Kind = "container"
	// KindSSH is a program on a host reached over SSH, run there by the
	// run's host agent (nemesis/hostagent).
	KindSSH Kind = "ssh"
	// KindURL is someone else's deployment: fencecheck only sends it
	// requests, and only the proxies' faults reach it.
	KindURL Kind = "url"
)

// Node is one node of a target, as data.
type Node struct {
	// Name is unique within the target.
	Name string
	// Role labels the node for the faults and the report ("etcd",
	// "adapter", "reference"); the default says what it serves
	// ("issuer+resource", "issuer", "resource", "data").
	Role string
	// Issuer and Resource are the halves of the Fencing API the node serves
	// on its main port. A node with neither only holds data (a database, a
	// consensus member) and answers its own Health.
	Issuer, Resource bool
	// Stateless says the node keeps no state of its own (an adapter in front
	// of a store): restarts prefer the nodes that hold state, and power
	// losses and wipes pass it by.
	Stateless bool
	// Ports are the node's ports. The one named "" is its main port: {port}
	// in templates, and where an issuer or resource serves the Fencing API.
	Ports []Port
	// Data is where the node keeps its state.
	Data Data
	// Clock is how the clock nemesis reaches the node's wall clock.
	Clock Clock
	// Health is how the harness knows the node serves.
	Health Health
	// Leads, when set, says yes on the node that currently leads (a
	// primary, a raft leader), so that pauses, kills and cuts can aim at it
	// (Cluster.FindLeader).
	Leads *Probe
	// WaitFor names nodes that must answer their health before this one
	// starts (an adapter that connects to its database at once).
	WaitFor []string

	// Exactly one of these is set; it says the node's kind.
	Server    *Server    // KindInProcess
	Process   *Process   // KindProcess
	Container *Container // KindContainer
	SSH       *SSH       // KindSSH
	URL       string     // KindURL: the base URL, e.g. http://10.0.0.5:7001
}

// Port is one named port of a node.
type Port struct {
	Name string
	// Number is the port inside a container; for a node on this machine it
	// is 0: the harness picks a free loopback port that the node keeps
	// across restarts (harness/ports).
	Number int
}

// Data is where a node keeps its state.
type Data struct {
	// Path is the data folder inside a container ("/data"); a container
	// node without one keeps nothing on this machine. A node on this
	// machine always has a data folder of the run (<run>/nodes/<node>/data),
	// given to it as {data}.
	Path string
	// Files are written into the data folder when it is made and again
	// after a wipe (ZooKeeper's myid and zoo.cfg), by name. The nodes'
	// addresses ({addr:NODE}, {addr:NODE:PORT}), {name} and {run} are
	// filled in, as the nodes reach each other (not on an ssh node: its
	// host agent writes them as given).
	Files map[string]string
	// NoLayer says why the data never goes on the lazyfs layer (the node
	// cannot lose power); "" when it may.
	NoLayer string
	// LoseAllOnly says why a power loss of the node drops every unsynced
	// write rather than leaving a partial crash state (lazyfs.CrashModes):
	// "" when partial states apply.
	LoseAllOnly string
}

// ClockVia is how a node's wall clock is moved.
type ClockVia int

const (
	// ClockNone: it is not (Clock.Why says why).
	ClockNone ClockVia = iota
	// ClockProcesses: the node's own processes, unmodified: a patch of
	// their vDSO (package timewarp), and the preload library with
	// Clock.Preload.
	ClockProcesses
	// ClockFile: the program adds the offset in the file named by
	// $FENCECHECK_CLOCK_FILE (fencing.FileOffsetClock, a spec's
	// "offset-file" nodes).
	ClockFile
	// ClockSkewLibrary: the image's own copy of the skew library
	// (docker.SkewLibrary, preloaded) reads the offset file.
	ClockSkewLibrary
	// ClockInjected: an in-process server's injectable clock.
	ClockInjected
)

// Clock is how the clock nemesis reaches a node.
type Clock struct {
	Via ClockVia
	// Preload, with ClockProcesses, also loads the preload library into the
	// node's programs from their first instruction (for dynamically linked
	// programs that read the clock through libc: a JVM, a C server).
	Preload bool
	// Aside says why the clock nemesis passes the node by although its
	// clock can be moved (an adapter whose store reads no clock of its):
	// SetClockOffset still moves it.
	Aside string
	// Why, with ClockNone, says why the node's clock cannot be moved.
	Why string
}

// Probe asks a node one question, answered yes or no: an HTTP GET answered
// 200, a Go function, a command's exit status 0, or a TCP connection
// accepted (the fallback when none of the others is set).
type Probe struct {
	// HTTP is a path asked with GET on Port.
	HTTP string
	// Func asks once, given Port's address as this machine reaches it
	// (Redis's PING, a database's SELECT 1).
	Func func(ctx context.Context, addr string) error
	// Command runs on this machine; its placeholders are filled as this
	// machine reaches the nodes.
	Command []string
	// TCP: a connection to Port is accepted.
	TCP bool
	// Port names the port HTTP, Func and TCP use ("": the main port).
	Port string
}

// Health is how the harness knows a node serves. Without a probe, an
// issuer or resource is asked GET /v1/health on its main port, and a data
// node for a TCP connection.
type Health struct {
	Probe
	// Timeout bounds the wait at the start (default 30 s).
	Timeout time.Duration
	// Quorum says the node answers only while it is in a quorum (an etcd
	// member, a ZooKeeper server, an adapter in front of them): a restart
	// does not wait for it, since a partition may keep it out; the start
	// of the run and the final recovery do.
	Quorum bool
}

// DefaultHealthTimeout bounds a node's first health wait when its Health
// does not say.
const DefaultHealthTimeout = 30 * time.Second

// Container is a container node (KindContainer). Command, environment and
// file contents take placeholders (vars.go).
type Container struct {
	// Build names an image the project builds (docker.EnsureImages: etcd,
	// fenced, redis, postgres, ...); Image is a tag built elsewhere (a
	// spec's). One of the two.
	Build, Image string
	// Cmd replaces the image's command (scratch images have no shell).
	Cmd []string
	// Env is KEY=VALUE.
	Env []string
	// ImageUser runs the command as the image's own user (a spec's image;
	// its data folder is made writable by anyone). Otherwise it runs as
	// this harness's uid:gid, so that the harness can remove what it wrote,
	// or as Account.
	ImageUser bool
	// Account runs the command as a named account (databases refuse to run
	// as root): /etc/passwd and /etc/group naming it are mounted, and the
	// data folder is its own.
	Account string
	// Files are written on this machine and mounted read-only, by path
	// inside the container (a configuration the program only reads; one it
	// rewrites goes with Data.Files).
	Files map[string]string
}

// Process is a program on this machine (KindProcess). Argv and Env take
// placeholders.
type Process struct {
	Argv []string
	// Dir is where it runs.
	Dir string
	// Env is KEY=VALUE, added to this process's environment.
	Env []string
}

// Server is a server inside this process (KindInProcess).
type Server struct {
	// New makes the node's server once every node's folders are ready (it
	// is called for each in-process node in table order, before any
	// starts).
	New func(w Workspace) (Runner, error)
}

// Workspace is what an in-process server is given.
type Workspace struct {
	Name string
	// Data is its data folder (on the lazyfs layer when there is one).
	Data string
	// Addr is the loopback address it must listen on, kept across restarts.
	Addr string
	// Log is its log file.
	Log io.Writer
	// Of is another in-process node's workspace (servers that are built
	// together, such as a leader and a follower that share a counter).
	Of func(node string) (Workspace, bool)
}

// Runner is an in-process server. Restarts reuse the address.
type Runner interface {
	// Start listens on addr and serves; it returns the base URL.
	Start(addr string) (url string, err error)
	// Kill drops the server at once, as kill -9 would: nothing not yet
	// durable survives.
	Kill() error
	// Stop shuts it down gracefully.
	Stop() error
	Running() bool
	// Pause stalls its requests until Resume (SIGSTOP).
	Pause()
	Resume()
}

// ClockRunner is a Runner with an injectable clock (ClockInjected).
type ClockRunner interface {
	SetClockOffset(offset time.Duration) error
}

// Kind is the node's kind, from the field that is set.
func (n Node) Kind() Kind {
	switch {
	case n.Server != nil:
		return KindInProcess
	case n.Process != nil:
		return KindProcess
	case n.Container != nil:
		return KindContainer
	case n.SSH != nil:
		return KindSSH
	}
	return KindURL
}

// Serves says whether the node serves any of the Fencing API.
func (n Node) Serves() bool { return n.Issuer || n.Resource }

// RoleLabel is Role, or what the node serves.
func (n Node) RoleLabel() string {
	if n.Role != "" {
		return n.Role
	}
	var parts []string
	if n.Issuer {
		parts = append(parts, "issuer")
	}
	if n.Resource {
		parts = append(parts, "resource")
	}
	if len(parts) == 0 {
		return "data"
	}
	return strings.Join(parts, "+")
}

// port finds a named port.
func (n Node) port(name string) (Port, bool) {
	i := slices.IndexFunc(n.Ports, func(p Port) bool { return p.Name == name })
	if i < 0 {
		return Port{}, false
	}
	return n.Ports[i], true
}

// holdsState says whether faults that hit state (power loss, wipe) reach
// the node's data: it keeps state and has a data folder.
func (n Node) holdsState() bool {
	if n.Stateless {
		return false
	}
	if n.Kind() == KindContainer {
		return n.Data.Path != ""
	}
	return n.Kind() != KindURL
}

// validate checks a table: one kind per node, unique names, ports, the
// references between nodes.
func validate(table []Node) error {
	var errs []error
	names := map[string]bool{}
	for _, n := range table {
		if n.Name == "" {
			errs = append(errs, errors.New("a node has no name"))
			continue
		}
		if names[n.Name] {
			errs = append(errs, fmt.Errorf("node %s is listed twice", n.Name))
		}
		names[n.Name] = true
		set := 0
		for _, b := range []bool{n.Server != nil, n.Process != nil, n.Container != nil, n.SSH != nil, n.URL != ""} {
			if b {
				set++
			}
		}
		if set != 1 {
			errs = append(errs, fmt.Errorf("node %s must be exactly one of in-process, process, container, ssh or url", n.Name))
		}
		seen := map[string]bool{}
		for _, p := range n.Ports {
			if seen[p.Name] {
				errs = append(errs, fmt.Errorf("node %s: port %q is listed twice", n.Name, p.Name))
			}
			seen[p.Name] = true
			if n.Kind() == KindContainer && (p.Number < 1 || p.Number > 65535) {
				errs = append(errs, fmt.Errorf("node %s: port %q needs its number inside the container", n.Name, p.Name))
			}
			if n.Kind() == KindSSH && (p.Number < 1 || p.Number > 65535) {
				errs = append(errs, fmt.Errorf("node %s: port %q needs its number on the host", n.Name, p.Name))
			}
		}
		if _, ok := n.port(""); n.Serves() && n.Kind() != KindURL && !ok {
			errs = append(errs, fmt.Errorf("node %s serves the Fencing API but has no main port", n.Name))
		}
		if s := n.SSH; s != nil && (s.Host == "" || len(s.Argv) == 0) {
			errs = append(errs, fmt.Errorf("node %s: an ssh node needs a host and a command", n.Name))
		}
		if c := n.Container; c != nil && (c.Build == "") == (c.Image == "") {
			errs = append(errs, fmt.Errorf("node %s: a container needs an image to build or a tag, one of the two", n.Name))
		}
	}
	for _, n := range table {
		for _, w := range n.WaitFor {
			if !names[w] {
				errs = append(errs, fmt.Errorf("node %s waits for %s, which is not a node", n.Name, w))
			}
		}
	}
	return errors.Join(errs...)
}
