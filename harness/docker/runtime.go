// Package docker is the harness's container runtime: images built locally
// FROM scratch (no registry is reachable), one user-defined network per run
// with static IPs, labelled containers, faults (freezer pause, SIGKILL,
// partitions inside a container's own network namespace, clock steps of its
// processes; from this machine, or through the engine's API with helper
// containers: faultpath.go), node logs, and the sweeps that guarantee a run
// leaves nothing behind.
//
// Every object it creates carries the labels fencecheck=1 and
// fencecheck.run=<run id>; nothing unlabelled is ever touched.
package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/docker/docker/client"
)

// Labels on every container, network and image the project creates.
const (
	LabelProject = "fencecheck"     // always "1"
	LabelRun     = "fencecheck.run" // the run id
	LabelPID     = "fencecheck.pid" // pid of the harness that owns the object
	// LabelPIDStart is that harness's start time (ticks since boot), so a
	// reused pid is told apart.
	LabelPIDStart = "fencecheck.pid-start"
	LabelNode     = "fencecheck.node"    // node name within the run
	LabelContent  = "fencecheck.content" // content hash of an image
)

// UnavailableError means the Docker engine could not be reached at all: the
// run cannot be carried out (exit 3), which is different from a failed run.
type UnavailableError struct{ Err error }

func (e *UnavailableError) Error() string {
	return fmt.Sprintf("docker is unreachable (is the engine running and DOCKER_HOST right?): %v", e.Err)
}

func (e *UnavailableError) Unwrap() error { return e.Err }

// IsUnavailable reports whether err says Docker could not be reached.
func IsUnavailable(err error) bool {
	var u *UnavailableError
	return errors.As(err, &u)
}

// Connect opens a client for the engine named by the environment
// (DOCKER_HOST etc.), negotiating the API version down to the engine's (the
// engine here is older than the client library), and pings it.
func Connect(ctx context.Context) (*client.Client, error) {
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return nil, &UnavailableError{Err: err}
	}
	pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := cli.Ping(pingCtx); err != nil {
		cli.Close()
		return nil, &UnavailableError{Err: err}
	}
	return cli, nil
}

// Runtime is one run's view of Docker: it creates the run's network and
// containers, remembers their partitions (to re-apply after a restart), and
// removes everything at Close.
type Runtime struct {
	cli   *client.Client
	runID string
	log   io.Writer

	mu         sync.Mutex
	network    *Network
	containers map[string]*Container // by node name
	blocked    map[string]Cut        // node -> what it drops (re-applied at Start)
	lossy      map[string]Loss       // node -> what it loses (re-applied at Start)
	duped      map[string]Loss       // node -> what it sends twice (re-applied at Start)
	delayed    map[string]Delay      // node -> what its packets wait (re-applied at Start)
	delayers   map[string]*hostDelayer
	// delayMu makes one delay change at a time: a link delay set while
	// the node starts again (its rules re-applied) made two delayers for
	// one new namespace, and the second one's bind of the queue failed the
	// start (redis under all: power-loss's stop failed, the node held to
	// the end of the run).
	delayMu sync.Mutex
	// rulesMu makes one change of a node's cut, loss or duplication at a
	// time, each reading what the node should drop as it puts it in
	// (lockRules).
	rulesMu map[string]*sync.Mutex
	clocks  map[string]*nodeClock // node -> its clock offset (re-applied at Start)
	frozen  map[string]freezer    // node -> its freezer, frozen from this machine (freeze.go)
	// paths is the way each kind of fault reaches the containers
	// (faultpath.go); helpers the fault helpers by kind and node
	// (helper.go), with their images' tags.
	paths        map[string]string
	helpers      map[string]*helper
	helperStarts map[string]*sync.Mutex // one start at a time per helper
	helperTags   map[string]string
	helperSeq    int
	engineArch   string
	watchdog     io.Closer
}

// Options tunes New.
type Options struct {
	// Log receives progress lines (nil: discarded).
	Log io.Writer
	// NoWatchdog skips the detached process that sweeps the run when this
	// process dies (for short-lived runtimes in tests).
	NoWatchdog bool
	_          struct{}
}

// New connects to Docker for run runID. It first sweeps objects left by
// harnesses that died (their owner pid is gone), then starts the watchdog
// that will sweep this run's objects if this process dies before Close.
func New(ctx context.Context, runID string, opts Options) (*Runtime, error) {
	if runID == "" {
		return nil, errors.New("docker runtime: empty run id")
	}
	if _, err := forcedPath(); err != nil {
		return nil, err
	}
	cli, err := Connect(ctx)
	if err != nil {
		return nil, err
	}
	r := &Runtime{cli: cli, runID: runID, log: opts.Log, containers: map[string]*Container{}}
	if r.log == nil {
		r.log = io.Discard
	}
	if removed, err := SweepOrphans(ctx, cli); err != nil {
		fmt.Fprintf(r.log, "docker: sweeping leftovers failed: %v\n", err)
	} else if len(removed) > 0 {
		fmt.Fprintf(r.log, "docker: removed %d objects left by dead runs\n", len(removed))
	}
	if !opts.NoWatchdog {
		w, err := startWatchdog(runID)
		if err != nil {
			cli.Close()
			return nil, fmt.Errorf("docker runtime: starting watchdog: %w", err)
		}
		r.watchdog = w
	}
	return r, nil
}

// RunID is the run this runtime labels its objects with.
func (r *Runtime) RunID() string { return r.runID }

// Client is the underlying Docker client, for what this package does not wrap.
func (r *Runtime) Client() *client.Client { return r.cli }

// labels are the labels of every object this runtime creates.
func (r *Runtime) labels(extra map[string]string) map[string]string {
	l := map[string]string{
		LabelProject:  "1",
		LabelRun:      r.runID,
		LabelPID:      strconv.Itoa(os.Getpid()),
		LabelPIDStart: ownerStart(),
	}
	for k, v := range extra {
		l[k] = v
	}
	return l
}

// Close removes every container and the network of this run (idempotent),
// then lets the watchdog go. Save logs before calling it.
func (r *Runtime) Close(ctx context.Context) error {
	_, err := Sweep(ctx, r.cli, r.runID)
	r.closeDelayers()
	r.mu.Lock()
	for _, nc := range r.clocks {
		nc.group.Close()
	}
	r.clocks = nil
	r.helpers = nil
	r.containers = map[string]*Container{}
	r.blocked = nil
	r.lossy = nil
	r.duped = nil
	r.delayed = nil
	r.network = nil
	w := r.watchdog
	r.watchdog = nil
	r.mu.Unlock()
	if w != nil {
		w.Close()
	}
	if cerr := r.cli.Close(); err == nil && cerr != nil && !errors.Is(cerr, os.ErrClosed) {
		err = cerr
	}
	return err
}
